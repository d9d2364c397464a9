"""`itlr translate`: print the search request itlr would send, for Dev Tools, curl or an app."""

from __future__ import annotations

from enum import StrEnum
from functools import partial
from typing import Annotated, Any

import typer

from itlr import translation
from itlr.cli.app import ModelOpt, app, optional_connection_command, run_guarded, warn
from itlr.cli.options import search_option_command
from itlr.cli.query_input import QueryArg, QueryFileOpt, query_text
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError
from itlr.lexical import CorpusStats
from itlr.options import search_options
from itlr.query import Query

# The choices are the library's own lists.
TargetEngine = StrEnum("TargetEngine", {name: name for name in translation.ENGINES})  # type: ignore[misc]
Format = StrEnum("Format", {name: name for name in translation.FORMATS})  # type: ignore[misc]
JSON_IS_ONE_BODY = (
    "--format json prints one request body: drop --with-install, or use --format console or curl"
)
# The host a curl command names when no --url is given.
CURL_HOST = "http://localhost:9200"
# Options whose flag defaults to None: search_options applies its own default, and translate
# can tell the user's choice from it (a hybrid default gives way without a cluster; a hybrid
# choice is refused).
UNSET_OPTIONS = ("truth",)


def count_statistics(
    connection: Connection, engine: str, index_name: str, query: Query, layout: Any
) -> CorpusStats:
    """The index's token statistics for the query's tokens, counted on the cluster: the one
    request hybrid truths cost (the search itself is what translate prints)."""
    from itlr.engines.cluster import ClusterBackend
    from itlr.engines.factory import EngineSpec, remote_backend

    spec = EngineSpec(engine, index_name, connection, layout)
    # The model does not matter to the statistics: no index check, no model load.
    backend: ClusterBackend = remote_backend(spec, model="", dims=0)
    return backend.term_statistics(query)


@app.command()
@optional_connection_command
@search_option_command(unset=UNSET_OPTIONS)
def translate(
    query: QueryArg = None,
    query_file: QueryFileOpt = None,
    *,
    index: Annotated[str, typer.Option("--index", "-i", help="Index name on the cluster.")],
    engine: Annotated[
        TargetEngine, typer.Option(help="Whose request syntax and Painless script to print.")
    ] = TargetEngine.opensearch,  # type: ignore[attr-defined]
    output: Annotated[
        Format,
        typer.Option(
            "--format",
            help="console: paste into Kibana / OpenSearch Dashboards Dev Tools; json: the "
            "search body only; curl: a shell command.",
        ),
    ] = Format.console,  # type: ignore[attr-defined]
    with_install: Annotated[
        bool,
        typer.Option(help="Also print the PUT _scripts/<id> requests that install the scripts."),
    ] = False,
    server_version: Annotated[
        str | None,
        typer.Option(
            help="Elasticsearch version to shape the request for (knn `k` needs 8.15+, the knn "
            "query 8.12+). Default: the newest.",
            metavar="X.Y",
        ),
    ] = None,
    inline_script: Annotated[
        bool,
        typer.Option(help="Put the fixed Painless source in the request instead of a stored id."),
    ] = False,
    vector_field: Annotated[str, typer.Option(help="Vector field of the index.")] = "embedding",
    text_field: Annotated[str, typer.Option(help="Text field of the index.")] = "text",
    tiebreak: Annotated[
        str,
        typer.Option(
            help="Sort key after the score: doc_id (itlr's indexes); for an index without it, "
            "_id (OpenSearch) or _doc (Elasticsearch); none for none."
        ),
    ] = "doc_id",
    model: ModelOpt = None,
    connection: Any = None,
    option_values: Any = None,
) -> None:
    """Print the request a logical query becomes (e.g. for Dev Tools). No cluster is needed,
    except for hybrid truths (--truth hybrid): they need the index's token statistics, counted
    on the cluster at --url (one request) and written into the request. Without --url, hybrid
    truths that are only the default are printed as cosine truths (--truth clamp), with a note."""
    from itlr.embed import get_embedder
    from itlr.engines.layout import IndexLayout

    def action() -> None:
        options = search_options(**option_values, model=model)
        if output.value == "json" and with_install:
            raise ConfigurationError(JSON_IS_ONE_BODY)  # before the model loads
        parsed = Query.of(query_text(query, query_file))  # a syntax error shows first too
        count = None
        if connection is not None:
            layout = IndexLayout(vector_field, text_field)
            count = partial(count_statistics, connection, engine.value, index, parsed, layout)
        options, statistics, notes = translation.truths_to_build(
            options, "truth" in option_values, index, count
        )
        for note in notes:
            warn(note)
        requests = translation.translate_requests(
            parsed,
            engine.value,
            index,
            options,
            get_embedder(model),
            with_install=with_install,
            inline_script=inline_script,
            vector_field=vector_field,
            text_field=text_field,
            server_version=server_version,
            tiebreak=None if tiebreak == "none" else tiebreak,
            statistics=statistics,
        )
        host = connection.hosts[0] if connection is not None else CURL_HOST
        print(translation.render(requests, output.value, host))

    run_guarded(action)
