"""`itlr translate`: print the search request itlr would send, for Dev Tools, curl or an app.

No cluster is contacted: the terms are embedded with the local model and the request is built by
the same backend code that `itlr search` uses, so what is printed is exactly what would run.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from itlr.cli.app import AndOp, Mode, ModelOpt, NotOp, OrOp, Truth, app, run_guarded
from itlr.cli.options import (
    AndOpt,
    CandidatesOpt,
    ExcludeLexicalOpt,
    ExplainOpt,
    FilterOpt,
    HardFilterOpt,
    KOpt,
    LamOpt,
    ModeOpt,
    NotOpt,
    NotStrengthOpt,
    OrOpt,
    TauOpt,
    TruthOpt,
    search_options,
)
from itlr.cli.query_input import QueryArg, QueryFileOpt, query_text
from itlr.errors import ConfigurationError
from itlr.parser import parse
from itlr.scoring import DEFAULT_NOT_STRENGTH
from itlr.search import SearchOptions

HEREDOC = "ITLR_JSON"
JSON_IS_ONE_BODY = (
    "--format json prints one request body: drop --with-install, or use --format console or curl"
)


class TargetEngine(StrEnum):
    opensearch = "opensearch"
    elasticsearch = "elasticsearch"


class Format(StrEnum):
    console = "console"
    json = "json"
    curl = "curl"


def pretty_json(value: Any, indent: int = 2, level: int = 0) -> str:
    """Indented JSON, except that a list of numbers stays on one line: a 384-dim vector is one
    line in Dev Tools instead of 384."""
    pad = " " * (indent * (level + 1))
    end = " " * (indent * level)
    if isinstance(value, dict) and value:
        items = [
            f"{pad}{json.dumps(key, ensure_ascii=False)}: {pretty_json(item, indent, level + 1)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(value, list) and value:
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            return json.dumps(value)
        items = [pad + pretty_json(item, indent, level + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + end + "]"
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Request:
    """One HTTP request as Dev Tools shows it: method, path without the host, JSON body."""

    method: str
    path: str
    body: dict[str, Any]

    def console(self) -> str:
        """Kibana / OpenSearch Dashboards Dev Tools syntax: `METHOD path` then the JSON body."""
        return f"{self.method} {self.path}\n{pretty_json(self.body)}"

    def curl(self, url: str) -> str:
        """A runnable curl command; the body goes through a quoted heredoc so no shell quoting
        can break it."""
        target = shlex.quote(f"{url.rstrip('/')}/{self.path}")
        return (
            f"curl -sS -X {self.method} {target} -H 'Content-Type: application/json' "
            f"--data-binary @- <<'{HEREDOC}'\n"
            f"{pretty_json(self.body)}\n{HEREDOC}"
        )


def translate_requests(
    query_text: str,
    engine: str,
    index: str,
    options: SearchOptions,
    embedder: Any,
    with_install: bool = False,
    inline_script: bool = False,
    vector_field: str = "embedding",
    text_field: str = "text",
    server_version: str | None = None,
) -> list[Request]:
    """The requests, in order: the stored scripts (with_install), then the search."""
    from itlr.engines.remote import IndexLayout

    query = parse(query_text)
    layout = IndexLayout(vector_field, text_field)
    if engine == "elasticsearch":
        from itlr.engines import elasticsearch as es

        backend: Any = es.ElasticsearchBackend(
            None,
            index,
            embedder.name,
            embedder.dims,
            layout=layout,
            inline_script=inline_script,
            version=server_version,
        )
        scripts = (es.SCORE_SCRIPT, es.EXCLUDE_SCRIPT)
    else:
        from itlr.engines import opensearch as os_engine

        backend = os_engine.OpenSearchBackend(
            None, index, embedder.name, embedder.dims, layout=layout, inline_script=inline_script
        )
        scripts = (os_engine.SCORE_SCRIPT, os_engine.EXCLUDE_SCRIPT)
    vectors = embedder.encode(list(query.terms))
    body = backend.build_request(query, vectors, options)
    requests = []
    if with_install and not inline_script:
        requests += [Request("PUT", f"_scripts/{s.id}", s.body()) for s in scripts]
    requests.append(Request("GET", f"{index}/_search", body))
    return requests


def render(requests: list[Request], output: str, url: str) -> str:
    if output == "json":
        if len(requests) > 1:
            raise ConfigurationError(JSON_IS_ONE_BODY)
        return pretty_json(requests[0].body)
    if output == "curl":
        return "\n\n".join(r.curl(url) for r in requests)
    # Dev Tools separates requests by their method line; a blank line keeps it readable.
    return "\n\n".join(r.console() for r in requests)


@app.command()
def translate(
    query: QueryArg = None,
    query_file: QueryFileOpt = None,
    *,
    index: Annotated[str, typer.Option("--index", "-i", help="Index name on the cluster.")],
    engine: Annotated[
        TargetEngine, typer.Option(help="Whose request syntax and Painless script to print.")
    ] = TargetEngine.opensearch,
    output: Annotated[
        Format,
        typer.Option(
            "--format",
            help="console: paste into Kibana / OpenSearch Dashboards Dev Tools; json: the "
            "search body only; curl: a shell command.",
        ),
    ] = Format.console,
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
    k: KOpt = 10,
    mode: ModeOpt = Mode.knn,
    candidates: CandidatesOpt = None,
    hard_filter: HardFilterOpt = None,
    and_: AndOpt = AndOp.product,
    or_: OrOpt = OrOp.sum,
    not_: NotOpt = NotOp.complement,
    not_strength: NotStrengthOpt = DEFAULT_NOT_STRENGTH,
    truth: TruthOpt = Truth.clamp,
    tau: TauOpt = 0.5,
    lam: LamOpt = 10.0,
    filter: FilterOpt = None,
    exclude_lexical: ExcludeLexicalOpt = False,
    explain: ExplainOpt = False,
    inline_script: Annotated[
        bool,
        typer.Option(help="Put the fixed Painless source in the request instead of a stored id."),
    ] = False,
    vector_field: Annotated[str, typer.Option(help="Vector field of the index.")] = "embedding",
    text_field: Annotated[str, typer.Option(help="Text field of the index.")] = "text",
    model: ModelOpt = None,
) -> None:
    """Print the request a logical query becomes, without a cluster (e.g. for Dev Tools)."""
    from itlr.embed import get_embedder

    def action() -> None:
        options = search_options(
            k=k,
            mode=mode,
            candidates=candidates,
            hard_filter=hard_filter,
            and_=and_,
            or_=or_,
            not_=not_,
            not_strength=not_strength,
            truth=truth,
            tau=tau,
            lam=lam,
            filter=filter,
            exclude_lexical=exclude_lexical,
            explain=explain,
            model=model,
        )
        if output == Format.json and with_install:
            raise ConfigurationError(JSON_IS_ONE_BODY)  # before the model loads
        requests = translate_requests(
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
        )
        print(render(requests, output.value, url))

    run_guarded(action)
