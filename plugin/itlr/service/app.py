"""The JSON API over one index: /search, /translate, /parse, /rewrite, /healthz, /metrics
(Prometheus text); docs at /docs and the search workbench at / (itlr.service.pages).

Each endpoint turns its JSON body into the front door's own names and calls one method of
`itlr.Index`, so an answer is exactly what the library (and `itlr search --json`) gives. Bad
input is a 4xx with the library's one-line message, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from itlr.extras import missing_extra

try:
    from fastapi import FastAPI, Request, Response
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, create_model
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.engines.connection import ClusterTimeout
from itlr.engines.coverage import prometheus_lines
from itlr.engines.deadline import set_deadline
from itlr.errors import (
    ConfigurationError,
    EmbeddingError,
    EngineError,
    IndexStateError,
    ItlrError,
    QuerySyntaxError,
    RewriteError,
)
from itlr.index import Index
from itlr.limits import LIMITS, LimitError
from itlr.options import OPTIONS, Option
from itlr.query import parse
from itlr.rewrite import rewrite_for_search
from itlr.rewrite.llm import LLMConfig
from itlr.service.baseline import dense_baseline
from itlr.service.filter_policy import check_served_filter
from itlr.service.follow import CommitFollower
from itlr.service.pages import add_pages, is_public
from itlr.service.security import BodyLimit, TokenGuard
from itlr.strict_json import dumps as strict_dumps
from itlr.term_cache import PROMETHEUS_CONTENT_TYPE, prometheus_text, term_cache_stats

DEFAULT_MAX_BODY_BYTES = LIMITS.max_body_bytes
DEFAULT_UPSTREAM_TIMEOUT = 120.0
log = logging.getLogger("itlr.service")


_JSON_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "bool": bool,
    "object": dict[str, Any],
    "list": list[Any],
    "fields": Annotated[Any, BeforeValidator(lambda given: _source_fields(given))],
}


def _body_field(option: Option) -> tuple[Any, Any]:
    """One option as a pydantic field: its JSON key, type, default, bounds and help."""
    kind: Any = Literal[option.choices] if option.kind == "choice" else _JSON_TYPES[option.kind]
    if option.optional:
        kind = kind | None
    aliases: dict[str, Any] = {}
    if option.name == "source_fields":
        aliases["validation_alias"] = AliasChoices("_source", "source_fields", "source-fields")
    elif option.key != option.name:
        aliases["alias"] = option.key
    bounds: dict[str, Any] = {
        "ge": option.minimum,
        "le": option.maximum,  # k's is itlr.options.MAX_K
    }
    return kind, Field(
        option.default,
        description=option.help,
        **aliases,
        **{name: value for name, value in bounds.items() if value is not None},
    )


def _source_fields(given: Any) -> tuple[str, ...] | None:
    """`_source` as the engines take it: a list of fields, false (none), true (every field but
    the vectors) or one field name."""
    if given is True or given is None:
        return None
    if given is False:
        return ()
    if isinstance(given, str) and given:
        return (given,)
    if isinstance(given, list) and all(isinstance(name, str) and name for name in given):
        return tuple(given)
    raise ValueError('give a list of field names (["title", "year"]), false or one field name')


class _OptionsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def names(self) -> dict[str, Any]:
        return self.model_dump(by_alias=False)


# Every search option of `itlr search`, by the same JSON names, derived from itlr.options.OPTIONS.
SearchOptionsBody: type[_OptionsBase] = create_model(  # type: ignore[call-overload]
    "SearchOptionsBody",
    __base__=_OptionsBase,
    **{option.name: _body_field(option) for option in OPTIONS},
)


class SearchBody(SearchOptionsBody):  # type: ignore[misc,valid-type]
    query: str = Field(..., description='A logical query, e.g. "vitamin D" AND NOT "bone health".')
    rewrite: Literal["none", "rules", "llm"] = Field(
        "none", description="rules or llm: `query` is a plain-language question, rewritten first."
    )
    dense: bool = Field(
        False,
        description="Also the dense baseline: `query` as typed (the question, when rewritten) "
        "embedded whole, its top k by cosine, each hit with itlr's truths and score.",
    )


class TranslateBody(SearchOptionsBody):  # type: ignore[misc,valid-type]
    query: str
    engine: Literal["opensearch", "elasticsearch"] | None = Field(
        None, description="Whose syntax; default: the index's own engine (opensearch if embedded)."
    )
    with_install: bool = Field(False, description="Also the requests that install the scripts.")


class ParseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str


class RewriteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    method: Literal["rules", "llm"] = "rules"


def _error(status: int, text: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": text, **extra}, status_code=status)


def _json(payload: Any, status: int = 200) -> Response:
    """Strict JSON whatever a stored document holds (itlr.strict_json): returned as a Response,
    so FastAPI's recursive encoders never walk the payload."""
    return Response(strict_dumps(payload), status_code=status, media_type="application/json")


def _validation_message(problem: RequestValidationError) -> str:
    parts = []
    for item in problem.errors():
        if item.get("type") == "json_invalid":
            parts.append(f"the body is not valid JSON ({item.get('ctx', {}).get('error', '?')})")
            continue
        where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def create_app(
    index: Index,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    llm: LLMConfig | None = None,
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT,
) -> Any:
    """The ASGI app for one index. With `token`, every request must present it (see
    itlr.service.security); request bodies over `max_body_bytes` are refused with 413, JSON
    nested deeper than LIMITS.max_depth with 400, before either is parsed. Each request first
    loads what other processes committed to an embedded index (itlr.service.follow). A cluster
    index's requests each get `upstream_timeout` seconds for their whole answer (504 beyond;
    itlr.engines.deadline)."""
    follower = CommitFollower(index.backend)
    client = getattr(index.backend, "client", None)
    if client is not None and hasattr(client, "transport"):
        set_deadline(client, upstream_timeout)
    app = FastAPI(
        title="itlr",
        summary="Logical retrieval over dense vectors: AND, OR, NOT for embedding search.",
        version=_version(),
        docs_url=None,  # served from the package by add_pages, not from a CDN
        redoc_url=None,
    )
    add_pages(app)
    _answer_errors_as_json(app)
    _add_query_routes(app, index, llm, follower)
    _add_health_routes(app, index, llm, follower)
    guarded: Any = BodyLimit(app, max_body_bytes, max_depth=LIMITS.max_depth)
    if token is not None:
        guarded = TokenGuard(guarded, token, public=is_public)
    return guarded


def _answer_errors_as_json(app: FastAPI) -> None:
    """Every refusal in one JSON shape ({"error": ...}), with the status its kind calls for."""

    @app.exception_handler(QuerySyntaxError)
    async def syntax_error(_: Request, bad: QuerySyntaxError) -> JSONResponse:
        return _error(
            422,
            f"syntax error at position {bad.position}: {bad.message}",
            message=bad.message,
            position=bad.position,
            caret=bad.caret,
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, bad: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(bad))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, bad: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body it cannot parse, an unknown path) in the same shape.
        return _error(bad.status_code, str(bad.detail))

    @app.exception_handler(LimitError)
    async def over_limit(_: Request, bad: LimitError) -> JSONResponse:
        return _error(413 if bad.is_size else 422, str(bad), limit=bad.name)

    @app.exception_handler(ItlrError)
    async def library_error(_: Request, bad: ItlrError) -> JSONResponse:
        if isinstance(bad, ConfigurationError | RewriteError):
            return _error(400, str(bad))
        if isinstance(bad, IndexStateError):
            return _error(409, str(bad))
        if isinstance(bad, EngineError):
            log.warning("engine error: %s", bad)  # the message never holds credentials
            return _error(504 if isinstance(bad, ClusterTimeout) else 502, str(bad))
        if isinstance(bad, EmbeddingError):
            return _error(503, str(bad))
        return _error(400, str(bad))


def _add_query_routes(
    app: FastAPI, index: Index, llm: LLMConfig | None, follower: CommitFollower
) -> None:
    """What clients ask of a query: its hits, its engine requests, its tree, its rewrite."""

    @app.post("/search")
    def search(body: SearchBody) -> Response:
        """Hits in the same order, with the same scores, as `itlr search --json`."""
        names = body.names()
        _served_filter(names)
        query, rewrite, dense = names.pop("query"), names.pop("rewrite"), names.pop("dense")
        if rewrite == "llm" and llm is None:
            raise ConfigurationError(
                '`rewrite="llm"` is not available: this service was started without an LLM'
            )
        with follower.current():
            result = index.search(query, rewrite=rewrite, llm=llm, **names)
            answer = result.to_dict()
            if dense:
                answer["dense"] = dense_baseline(index, query, result.query, names).to_dict()
        return _json(answer)

    @app.post("/translate")
    def translate(body: TranslateBody) -> Response:
        """The requests `itlr translate` would print, as JSON; the last one is the search."""
        names = body.names()
        _served_filter(names)
        if "truth" not in body.model_fields_set:
            # Only the default: an embedded index then builds cosine truths instead of hybrid
            # ones it has no cluster statistics for (Index.translate), and says so.
            del names["truth"]
        query = parse(names.pop("query"))
        engine, with_install = names.pop("engine"), names.pop("with_install")
        translated = index.translate(query, engine=engine, with_install=with_install, **names)
        return _json(
            {
                "query": str(query),
                "warnings": [*query.warnings, *translated.warnings],
                # `console`: as Dev Tools takes it, the text `itlr translate` prints.
                "requests": [{**r.to_dict(), "console": r.console()} for r in translated.requests],
            }
        )

    @app.post("/parse")
    def parse_query(body: ParseBody) -> dict[str, Any]:
        """The canonical form and tree of a logical query, as `itlr parse --json` prints them."""
        parsed = parse(body.query)
        return {**parsed.to_dict(), "warnings": list(parsed.warnings)}

    @app.post("/rewrite")
    def rewrite(body: RewriteBody) -> dict[str, Any]:
        """A plain-language question as a logical query (`itlr search --rewrite` does this)."""
        if body.method == "llm" and llm is None:
            raise ConfigurationError(
                '`method="llm"` is not available: this service was started without an LLM'
            )
        return rewrite_for_search(body.question, body.method, llm).to_dict()


def _add_health_routes(
    app: FastAPI, index: Index, llm: LLMConfig | None, follower: CommitFollower
) -> None:
    """What monitoring reads: whether the engine answers, and the counters."""

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """200 with the index's size when its engine answers, 503 when it does not."""
        try:
            with follower.current():
                count = index.count()
                commit = follower.generation
                coverage = index.coverage()
        except EngineError as down:
            return JSONResponse({"status": "unavailable", "error": str(down)}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                **index.to_dict(),
                # What runs the model on the query path (torch, onnx, onnx-int8).
                "encoder": index.embedder.encoder,
                # What `rewrite` may name: llm when the service was started with a model.
                "rewriters": ["rules", "llm"] if llm is not None else ["rules"],
                "count": count,
                "term_cache": [stats.to_dict() for stats in term_cache_stats()],
                **({"commit": commit} if commit else {}),
                # A cluster index: documents with a text but no vector (no search finds them).
                **({"coverage": coverage.to_dict()} if coverage else {}),
            }
        )

    @app.get("/metrics")
    def metrics() -> Response:
        """The term cache's counters and (a cluster index) its coverage gauges in Prometheus'
        text format; an engine that does not answer leaves the gauges out."""
        try:
            coverage = index.coverage()
        except EngineError:
            coverage = None
        text = prometheus_text() + prometheus_lines([coverage] if coverage else [])
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)


def _served_filter(names: dict[str, Any]) -> None:
    """A client's filter holds only clauses that read the served index and run no code."""
    if names.get("filter") is not None:
        check_served_filter(names["filter"])


def _version() -> str:
    from itlr import __version__

    return __version__
