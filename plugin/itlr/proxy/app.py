"""The query-bar proxy: an ASGI app between Kibana / OpenSearch Dashboards and the cluster.

Every request goes to the configured upstream unchanged and its answer streams back unchanged,
except a search (`_search`, `_msearch`, `_async_search` submit) whose query holds a clause on the
virtual field: that clause becomes the logical scoring (see `itlr.proxy.rewrite`). Polls of an
async search (`GET _async_search/<id>`) refer to the upstream's id and pass through.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from itlr.extras import missing_extra

try:
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.embed import Embedder
from itlr.engines.connection import Connection, is_tls_failure, untrusted_tls
from itlr.engines.integrity import (
    SCRIPT_CHECK_SECONDS,
)
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions
from itlr.proxy import stages
from itlr.proxy.answers import AsyncSearches, Rewrite
from itlr.proxy.caller import Caller, CallerReads
from itlr.proxy.coverage import CoverageReport
from itlr.proxy.encoding import TermEncoding
from itlr.proxy.forward import Forwarded, Forwarder, ForwardFailed, ForwardTimeout
from itlr.proxy.integrity import IntegrityWatch, OwnRequests, write_refusal
from itlr.proxy.refusals import error_body, error_response, upstream_timeout
from itlr.proxy.searches import Refused, SearchRequests
from itlr.proxy.statistics import CallerStatistics, changes_documents
from itlr.proxy.upstream import IndexConfig, Upstream, UpstreamTimeout
from itlr.service.security import TOKEN_HEADER, TokenGuard
from itlr.term_cache import PROMETHEUS_CONTENT_TYPE, prometheus_text

log = logging.getLogger("itlr.proxy")

# An answer up to this size (a search page, a histogram) is read whole and sent in one piece:
# a streamed response costs the server a second task per request; bigger ones stream.
RELAY_IN_ONE_PIECE = 1 << 20
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection, never forwarded.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    TOKEN_HEADER,
}
# Kept-alive connections to the upstream: a new one costs a TCP (and TLS) handshake. A UI
# fires a dozen panel searches at once; httpx's default drops idle ones after 5 s, less than
# the pause between two queries typed in a query bar; 30 s stays under load balancers' 60.
MAX_CONNECTIONS = 100
KEEPALIVE_SECONDS = 30.0
CONNECT_SECONDS = 10.0
UPSTREAM_POOL = httpx.Limits(
    max_connections=MAX_CONNECTIONS,
    max_keepalive_connections=32,
    keepalive_expiry=KEEPALIVE_SECONDS,
)
SEARCH_PATH = re.compile(
    r"^/(?:(?P<target>_all|[^/_][^/]*)/)?(?P<api>_search|_msearch|_async_search)/?$"
)
# APIs that take a query but cannot rank by the logical score: a clause there would pass
# through verbatim and match nothing, so it is refused instead. Every API of both engines whose
# body (or `q=`) holds a query: searches of another kind (templates, rank evaluation, EQL,
# SQL, PPL, ES|QL, graph, vector tiles, OpenSearch's asynchronous search plugin, the fleet
# searches, rollups), counts, explanations, validations, field and term listings filtered by a
# query, Painless' execute API (a score context holds a query) and the writes a query selects
# (`_delete_by_query`, `_update_by_query`, `_reindex`).
QUERY_API_PATH = re.compile(
    r"^/(?:[^/]+/)?(?P<api>_count|_search/template|_msearch/template|_render/template"
    r"|_validate/query|_explain|_delete_by_query|_update_by_query|_rank_eval|_reindex"
    r"|_field_caps|_terms_enum|_knn_search|_eql/search|_graph/explore|_mvt|_rollup_search"
    r"|_fleet/_fleet_search|_fleet/_fleet_msearch|_scripts/painless/_execute"
    r"|_query|_sql|_sql/translate|_plugins/_sql|_plugins/_ppl|_opendistro/_sql"
    r"|_plugins/_asynchronous_search)(?:/[^?]*)?$"
)
# A poll of an async search by its id (not `status/<id>`, which holds no hits).
ASYNC_POLL_PATH = re.compile(r"^/_async_search/(?P<id>(?!status/)[^/]+)/?$")


def _raw_target(request: Request, query: bytes | None = None) -> str:
    """Path and query string exactly as the UI sent them (percent-escapes kept); `query` in
    place of the query string when the proxy took parameters out of it."""
    path = request.scope.get("raw_path") or request.url.path.encode()
    if query is None:
        query = request.scope.get("query_string") or b""
    return (path + (b"?" + query if query else b"")).decode("latin-1")


def normalised_path(request: Request) -> str | None:
    """The path as the cluster resolves it (percent-escapes decoded, empty segments dropped),
    for the guards to match; None when it holds a dot segment, which the cluster would resolve
    to another resource than the guards see (`/_scripts/./itlr-...`, `/_scripts/x/../itlr-...`)."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    segments = unquote(raw.decode("latin-1")).split("/")
    if any(segment in (".", "..") for segment in segments):
        return None
    return "/" + "/".join(segment for segment in segments if segment)


async def _relayed(upstream: Forwarded) -> AsyncIterator[bytes]:
    """The upstream's bytes as they come, the time to pass them on recorded."""
    started = time.perf_counter()
    async for chunk in upstream.stream():
        yield chunk
    stages.add("relay response body", (time.perf_counter() - started) * 1000)


# Writes that may change itlr's stored scripts or pipelines (checked again after them).
SCRIPT_WRITE_PATHS = ("/_scripts/", "/_ingest/pipeline/")


@dataclass(slots=True)
class Outgoing:
    """What the proxy forwards for one request: the body (bytes, the caller's stream, or
    None), the headers, the query string (None: the caller's own), and for a search the proxy
    rewrote (or a poll of one) what to fix in the answer, the API and the searched target."""

    content: bytes | AsyncIterator[bytes] | None
    headers: list[tuple[str, str]]
    query: bytes | None = None
    done: Rewrite | None = None
    api: str = ""
    target: str | None = None
    # A search the proxy rewrote (not a poll of one): its errors may be a stored script's.
    rewritten: bool = False


def _passed_body(request: Request) -> AsyncIterator[bytes] | None:
    """The caller's body streamed on as it comes; None when none came (not an empty chunked
    one)."""
    if "content-length" in request.headers or "transfer-encoding" in request.headers:
        return request.stream()
    return None


class QueryBarProxy:
    def __init__(
        self,
        connection: Connection,
        field: str,
        embedder: Embedder | None,
        defaults: SearchOptions,
        token: str | None,
        timeout: float,
        allow_script_writes: bool = False,
        indexes: Sequence[IndexConfig] = (),
        script_check_seconds: float = SCRIPT_CHECK_SECONDS,
    ) -> None:
        self.connection = connection
        self.allow_script_writes = allow_script_writes
        self.field = field
        self.defaults = defaults
        self.token = token
        self.encoding = TermEncoding(embedder)
        verify: Any = connection.ca_file or connection.verify_certs
        # One trust for both hops: the certificates httpx would trust (certifi's by default).
        tls = httpx.create_ssl_context(verify=verify)
        # Forwarded requests (itlr.proxy.forward): no client layers, no cookie one UI user's
        # answer set riding along on another user's request.
        self.forwarder = Forwarder(
            tls, timeout, CONNECT_SECONDS, MAX_CONNECTIONS, KEEPALIVE_SECONDS
        )
        # The client asks the upstream the proxy's questions: its callers' (as each caller,
        # itlr.proxy.caller) and its own (itlr.proxy.integrity). No credentials of its own.
        self.client = httpx.AsyncClient(
            base_url=connection.url,
            timeout=httpx.Timeout(timeout, connect=CONNECT_SECONDS),
            follow_redirects=False,
            transport=httpx.AsyncHTTPTransport(verify=tls, limits=UPSTREAM_POOL),
        )
        self._base = connection.url.rstrip("/")
        # httpx's default headers (Accept-Encoding, User-Agent, ...) would alter what the UI sent.
        self.client.headers.clear()
        self.timeout = timeout
        reads = CallerReads(self.client, connection.url, timeout)
        self.upstream = Upstream(reads, connection, indexes)
        self.integrity = IntegrityWatch(
            OwnRequests(self.client, connection, timeout), reads, script_check_seconds, timeout
        )
        self.coverage = CoverageReport(self.upstream)
        # Hybrid truths' token statistics, per target and caller (itlr.proxy.statistics).
        self.statistics = CallerStatistics(deadline=timeout)
        # What to fix in the polls of the async searches the proxy rewrote, by their ids.
        self.async_searches = AsyncSearches()
        # Set by `itlr bench proxy` only: where each request spends its time.
        self.stages: stages.StageTimes | None = None
        self.searches = SearchRequests(
            field,
            defaults,
            self.encoding,
            self.upstream,
            self.integrity,
            self.statistics,
            self.coverage,
            self.async_searches,
        )

    # -- forwarding ------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        """`_handle`, with a last guard: a failure of the proxy's own is logged with its
        traceback and answered in the cluster's error shape, never as a plain-text 500."""
        try:
            return await self._handle(request)
        except Exception:
            log.exception("itlr proxy: unexpected failure on %s", request.method)
            return error_response(
                500,
                "itlr_proxy_error",
                "itlr proxy: an unexpected failure (the proxy's log holds its traceback); "
                "the request was not forwarded",
            )

    async def _handle(self, request: Request) -> Response:
        """Guard the path, read what to send by the request's kind (`_outgoing`), forward it
        (`_forward`) and relay the answer (`_relay`)."""
        if self.stages is not None:
            self.stages.start_request()
        path = normalised_path(request)
        if path is None:
            return error_response(
                400,
                "itlr_bad_request",
                "itlr proxy: paths with dot segments (`.`, `..`, or their percent-encodings) are "
                "refused: name the resource directly",
            )
        refused = write_refusal(request.method, path, self.connection.url)
        if refused is not None and not self.allow_script_writes:
            return error_response(403, "itlr_script_write_refused", f"itlr proxy: {refused}")
        try:
            outgoing = await self._outgoing(request)
        except Refused as refusing:
            return refusing.response
        upstream = await self._forward(request, path, outgoing)
        if isinstance(upstream, Response):
            return upstream
        return await self._relay(request, upstream, outgoing)

    async def _outgoing(self, request: Request) -> Outgoing:
        """What to forward, by the request's kind: a query API's body (refused when it names
        the field), a search (rewritten when it holds the clause), a poll of an async search
        (its answer fixed as the submit's), anything else as it came."""
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        url_path = request.url.path
        if query_api := QUERY_API_PATH.match(url_path):
            return Outgoing(await self.searches.query_api_body(request, query_api["api"]), headers)
        if search := SEARCH_PATH.match(url_path):
            content, headers, query, done = await self.searches.search_to_send(
                request, search, headers
            )
            api, target = search["api"], search["target"]
            return Outgoing(content, headers, query, done, api, target, done is not None)
        if request.method == "GET" and (poll := ASYNC_POLL_PATH.match(url_path)):
            done = self.async_searches.recall(poll["id"])
            polled = request.stream() if "content-length" in request.headers else None
            return Outgoing(polled, headers, done=done, api="_async_search")
        return Outgoing(_passed_body(request), headers)

    async def _forward(
        self, request: Request, path: str, outgoing: Outgoing
    ) -> Forwarded | Response:
        """The upstream's answer (headers read), or the error response when it does not come."""
        writes = changes_documents(request.method, path, request.query_params.get("refresh"))
        try:
            with stages.span("upstream round trip (to headers)"):
                upstream = await self.forwarder.send(
                    request.method,
                    self._base + _raw_target(request, outgoing.query),
                    outgoing.headers,
                    outgoing.content,
                )
        except ForwardTimeout:
            log.warning("upstream %s timed out", self.connection.url)
            return self._timed_out()
        except ForwardFailed as failed:
            down = failed.cause
            log.warning("upstream %s unreachable: %s", self.connection.url, type(down).__name__)
            said = (
                f"{untrusted_tls(self.connection.url, down)}"
                if is_tls_failure(down)
                else f"cannot reach the upstream {self.connection.url} "
                f"({type(down).__name__}): is it running?"
            )
            return error_response(502, "itlr_upstream_unreachable", f"itlr proxy: {said}")
        finally:
            if writes:
                # Answered (or failed): the next logical search through the proxy counts anew.
                self.statistics.written()
        log.info("%s %s -> %d", request.method, request.url.path, upstream.status_code)
        if request.method not in ("GET", "HEAD") and path.startswith(SCRIPT_WRITE_PATHS):
            # Whatever it wrote, the next logical search waits for a new check of itlr's own.
            self.integrity.nudge()
        return upstream

    async def _relay(self, request: Request, upstream: Forwarded, outgoing: Outgoing) -> Response:
        """The upstream's answer to the caller: a rewritten search's fixed (or refused when
        itlr's stored script is not its own any more), anything else as it came, streamed
        when large."""
        done = outgoing.done
        relayed = False
        try:
            if outgoing.rewritten and upstream.status_code >= 400:
                foreign = await self.searches.script_failure(request, upstream, outgoing.target)
                if foreign is not None:
                    return foreign
            response_headers = {k: v for k, v in upstream.headers.items() if k not in HOP_BY_HOP}
            if done is not None and upstream.status_code < 400:
                # Documents without a vector cannot be found: say so as engines say deprecations.
                await self.searches.add_coverage_warnings(request, done.targets, response_headers)
                with stages.span("relay response body"):
                    answer = await upstream.read()
                return self.searches.fixed_answer_response(
                    answer, upstream.status_code, response_headers, done, outgoing.api
                )
            content = upstream.content
            if content is None:
                declared = upstream.headers.get("content-length", "")
                if not (declared.isdigit() and int(declared) <= RELAY_IN_ONE_PIECE):
                    relayed = True  # the response closes the upstream's answer once sent
                    return StreamingResponse(
                        _relayed(upstream) if stages.recording() else upstream.stream(),
                        status_code=upstream.status_code,
                        headers=response_headers,
                        background=BackgroundTask(upstream.aclose),
                    )
                with stages.span("relay response body"):
                    content = await upstream.read()
        except ForwardTimeout:
            return self._timed_out()
        except ForwardFailed as cut:
            return error_response(
                502,
                "itlr_upstream_unreachable",
                f"itlr proxy: the upstream {self.connection.url} broke off its answer "
                f"({type(cut.cause).__name__})",
            )
        finally:
            if not relayed:
                await upstream.aclose()
        # The bytes as sent (still compressed if they were): its content-length holds.
        return Response(content, upstream.status_code, response_headers)

    def _timed_out(self) -> JSONResponse:
        return upstream_timeout(UpstreamTimeout(self.connection.url, self.timeout))


METRICS_PATH = "/_itlr/metrics"
HEALTHZ_PATH = "/_itlr/healthz"
TERM_CACHE_NEEDS_TOKEN = (
    "# itlr_term_cache_* counters: shown only by a proxy started with a client token "
    "(--token, ITLR_TOKEN), to callers presenting it\n"
)


def refusal_body(status: int, reason: str) -> dict[str, Any]:
    """A guard's refusal (token, Host) in the cluster's error shape, as a UI shows it."""
    return error_body(status, "itlr_unauthorized" if status == 401 else "itlr_forbidden", reason)


def create_proxy_app(
    connection: Connection,
    *,
    field: str = "itlr",
    embedder: Embedder | None = None,
    defaults: SearchOptions | None = None,
    token: str | None = None,
    timeout: float = 120.0,
    allow_script_writes: bool = False,
    indexes: Sequence[IndexConfig] = (),
    script_check_seconds: float = SCRIPT_CHECK_SECONDS,
) -> Starlette:
    """The proxy as an ASGI app. `embedder` None loads the index's own model on first use;
    `timeout`: seconds the upstream may take to answer (504 beyond); `allow_script_writes`:
    pass PUT / POST / DELETE on itlr's stored script ids through (refused by default);
    `indexes`: where indexes itlr did not make keep their text and vectors;
    `script_check_seconds`: how old the last comparison of itlr's stored scripts may be when a
    logical search runs (they are compared again beyond, and after any write to `_scripts`)."""
    if len(connection.hosts) > 1:
        raise ConfigurationError(
            "the proxy forwards to one address: give one host in `url` (a load balancer in "
            "front of the cluster's nodes, or one node)"
        )
    proxy = QueryBarProxy(
        connection,
        field,
        embedder,
        defaults or SearchOptions(),
        token,
        timeout,
        allow_script_writes,
        indexes,
        script_check_seconds,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        proxy.integrity.start()  # the proxy's own schedule, from the start
        yield
        await proxy.integrity.stop()
        await proxy.client.aclose()
        await proxy.forwarder.aclose()

    async def metrics(request: Request) -> Response:
        """In Prometheus' text format: the coverage gauges of every searched index the caller
        may count (counted as the caller) and, behind the proxy's token, the term cache's
        counters (they would tell which terms others searched)."""
        text = await coverage.gauges(Caller.of(request.headers))
        if proxy.token is not None:  # the token guard let the request in: it presented it
            text = prometheus_text() + text
        else:
            text = TERM_CACHE_NEEDS_TOKEN + text
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    async def healthz(request: Request) -> Response:
        return await coverage.healthz(request)

    coverage = proxy.coverage
    methods = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"]
    # The token guards the whole app, every route (one added later too), before any reads.
    guards = (
        [Middleware(TokenGuard, token=token, bearer=False, body=refusal_body)]
        if token is not None
        else []
    )
    app = Starlette(
        routes=[
            # `_` starts no index name, so this path never shadows one of the upstream's.
            Route(METRICS_PATH, metrics, methods=["GET"]),
            Route(HEALTHZ_PATH, healthz, methods=["GET"]),
            Route("/", proxy.handle, methods=methods),
            Route("/{path:path}", proxy.handle, methods=methods),
        ],
        lifespan=lifespan,
        middleware=guards,
    )
    app.state.proxy = proxy
    return app
