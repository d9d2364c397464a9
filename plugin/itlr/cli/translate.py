"""`itlr translate`: print the search request itlr would send, for Dev Tools, curl or an app."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from itlr import translation
from itlr.cli.app import ModelOpt, app, run_guarded
from itlr.cli.options import search_option_command
from itlr.cli.query_input import QueryArg, QueryFileOpt, query_text
from itlr.errors import ConfigurationError
from itlr.options import search_options

# The choices are the library's own lists.
TargetEngine = StrEnum("TargetEngine", {name: name for name in translation.ENGINES})  # type: ignore[misc]
Format = StrEnum("Format", {name: name for name in translation.FORMATS})  # type: ignore[misc]
JSON_IS_ONE_BODY = (
    "--format json prints one request body: drop --with-install, or use --format console or curl"
)


@app.command()
@search_option_command()
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
    url: Annotated[
        str, typer.Option(envvar="ITLR_URL", help="Cluster URL used by --format curl.")
    ] = "http://localhost:9200",
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
    option_values: Any = None,
) -> None:
    """Print the request a logical query becomes, without a cluster (e.g. for Dev Tools)."""
    from itlr.embed import get_embedder

    def action() -> None:
        options = search_options(**option_values, model=model)
        if output.value == "json" and with_install:
            raise ConfigurationError(JSON_IS_ONE_BODY)  # before the model loads
        requests = translation.translate_requests(
            query_text(query, query_file),
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
        )
        print(translation.render(requests, output.value, url))

    run_guarded(action)
