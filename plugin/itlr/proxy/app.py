"""The query-bar proxy: an ASGI app between Kibana / OpenSearch Dashboards and the cluster.

Every request goes to the configured upstream unchanged and its answer streams back unchanged,
except a search (`_search`, `_msearch`, `_async_search` submit) whose query holds a clause on the
virtual field: that clause becomes the logical scoring (see `itlr.proxy.rewrite`). Polls of an
async search (`GET _async_search/<id>`) refer to the upstream's id and pass through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio.to_thread
import httpx
import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from itlr.embed import Embedder, get_embedder
from itlr.engines.connection import Connection, is_tls_failure, untrusted_tls
from itlr.engines.integrity import (
    SCRIPT_ID_PREFIX,
    ScriptMismatch,
    is_script_error,
    reinstall_command,
)
from itlr.errors import EngineError, IndexStateError, ItlrError, QuerySyntaxError
from itlr.lexical import CorpusStats, query_tokens
from itlr.limits import LIMITS, LimitError
from itlr.options import SearchOptions
from itlr.proxy import stages
from itlr.proxy.clause import ClauseError, LogicalSearch, find_logical_search, mentions_clause
from itlr.proxy.rewrite import rewrite_body
from itlr.proxy.upstream import (
    IndexConfig,
    SearchTarget,
    Upstream,
    UpstreamDenied,
    UpstreamTimeout,
    auth_headers,
    timeout_seconds,
)
from itlr.query import Query
from itlr.service.security import TOKEN_HEADER, token_matches
from itlr.term_cache import PROMETHEUS_CONTENT_TYPE, cache_for, prometheus_text

log = logging.getLogger("itlr.proxy")

# A UI's search bodies are small; a _msearch of many panels stays far below this.
MAX_SEARCH_BODY = LIMITS.max_body_bytes
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
UPSTREAM_POOL = httpx.Limits(max_connections=100, max_keepalive_connections=32, keepalive_expiry=30)
LONG_NUMBER = re.compile(rb"\d{20}")
SEARCH_PATH = re.compile(
    r"^/(?:(?P<target>_all|[^/_][^/]*)/)?(?P<api>_search|_msearch|_async_search)/?$"
)
# APIs that take a query but cannot rank by the logical score: a clause there would pass
# through verbatim and match nothing, so it is refused instead.
QUERY_API_PATH = re.compile(
    r"^/(?:[^/]+/)?(?P<api>_count|_search/template|_msearch/template|_render/template"
    r"|_validate/query|_explain|_delete_by_query|_update_by_query)(?:/[^/_][^/]*)?/?$"
)


def error_body(status: int, kind: str, reason: str, **extra: Any) -> dict[str, Any]:
    """An error in the cluster's own shape, so the UI shows `reason` as it shows the cluster's."""
    cause = {"type": kind, "reason": reason, **extra}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def error_response(status: int, kind: str, reason: str, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(status, kind, reason, **extra), status_code=status)


def clause_error(bad: ClauseError | QuerySyntaxError) -> JSONResponse:
    if isinstance(bad, QuerySyntaxError):
        bad = ClauseError(bad.message, bad.position, bad.text)
    reason = f"itlr: {bad.message}"
    if bad.position is not None:
        reason = f"itlr: syntax error at position {bad.position}: {bad.message}"
    return error_response(
        400,
        "itlr_query_error",
        reason,
        **({"position": bad.position, "query": bad.text} if bad.position is not None else {}),
    )


SCRIPT_WRITE_PATH = re.compile(rf"^/_scripts/{SCRIPT_ID_PREFIX}[^/]*(?:/[^/]*)?/?$")


def script_mismatch(foreign: ScriptMismatch) -> JSONResponse:
    return error_response(502, "itlr_script_mismatch", f"itlr proxy: {foreign}")


def upstream_timeout(slow: UpstreamTimeout) -> JSONResponse:
    extra = {"timeout_seconds": slow.seconds} if slow.seconds is not None else {}
    return error_response(504, "itlr_upstream_timeout", f"itlr proxy: {slow}", **extra)


def _raw_target(request: Request) -> str:
    """Path and query string exactly as the UI sent them (percent-escapes kept)."""
    path = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string") or b""
    return (path + (b"?" + query if query else b"")).decode("latin-1")


def encode_json(body: dict[str, Any]) -> bytes:
    """A rewritten body carries every term's vector: orjson encodes it in a twentieth of the
    standard library's time; what orjson refuses (an integer past 64 bits) goes the slow way."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


async def _relayed(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream's bytes as they come, the time to pass them on recorded."""
    started = time.perf_counter()
    async for chunk in upstream.aiter_raw():
        yield chunk
    stages.add("relay response body", (time.perf_counter() - started) * 1000)


def decode_json(raw: bytes) -> Any:
    """orjson first (a tenth of the standard library's time); what it refuses and the standard
    library takes (NaN, UTF-16) still parses as before. orjson reads an integer past 64 bits as
    a float: a body with 20 digits in a row goes the standard library's way, exact."""
    if LONG_NUMBER.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


# The token statistics one request has counted, by target and token set (hybrid truths).
Counted = dict[tuple[str, tuple[str, ...]], CorpusStats]


class _Refused(Exception):
    """A response to send instead of forwarding."""

    def __init__(self, response: Response) -> None:
        self.response = response


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
    ) -> None:
        self.connection = connection
        self.allow_script_writes = allow_script_writes
        self.field = field
        self.defaults = defaults
        self.token = token
        self._embedder = embedder
        # One encode at a time: the model is shared by every request of the process.
        self._encode_lock = threading.Lock()
        verify: Any = connection.ca_file or connection.verify_certs
        # Forwarded requests go to the transport itself: the client's layers (cookie jar,
        # auth, redirects, URL merging) cost CPU on every request, and a cookie one UI user's
        # answer set must never ride along on another user's request.
        self.transport = httpx.AsyncHTTPTransport(verify=verify, limits=UPSTREAM_POOL)
        # The client, sharing the pool, asks the upstream the proxy's own questions (Upstream).
        self.client = httpx.AsyncClient(
            base_url=connection.url,
            timeout=httpx.Timeout(timeout, connect=10.0),
            follow_redirects=False,
            transport=self.transport,
        )
        self._base = connection.url.rstrip("/")
        self._timeouts = self.client.timeout.as_dict()
        # httpx's default headers (Accept-Encoding, User-Agent, ...) would alter what the UI sent.
        self.client.headers.clear()
        self.upstream = Upstream(self.client, connection, indexes)
        # Set by `itlr bench proxy` only: where each request spends its time.
        self.stages: stages.StageTimes | None = None

    # -- embedding -------------------------------------------------------------------------

    def _encode(self, model: str, terms: list[str]) -> np.ndarray:
        with self._encode_lock:
            if self._embedder is None:
                self._embedder = get_embedder(model)
            if self._embedder.name != model:
                raise EngineError(
                    f"the index was embedded with {model!r} but the proxy runs "
                    f"{self._embedder.name!r}: start it with the index's `model`"
                )
            embedder = self._embedder

        def encode(missing: list[str]) -> np.ndarray:
            with self._encode_lock:
                return embedder.encode(missing)

        # Cached terms (itlr.term_cache) wait for no one; only the encoder's calls take turns.
        with stages.span("encode (cache + model)"):
            return cache_for(embedder.cache_name).encode(terms, encode, embedder.dims)

    def _cached(self, model: str, terms: list[str]) -> np.ndarray | None:
        """The vectors when every term is in the term cache, else None. Microseconds, so it
        runs on the event loop: a repeated query skips the hand-off to a worker thread."""
        embedder = self._embedder  # a plain read: the lock may be held by a running encode
        if embedder is None or embedder.name != model:
            return None
        with stages.span("encode (cache + model)"):
            return cache_for(embedder.cache_name).cached(terms)

    async def _vectors(self, searched: SearchTarget, target: str, terms: list[str]) -> np.ndarray:
        model = searched.vectors.model
        vectors = self._cached(model, terms)
        if vectors is None:
            encoded_before = stages.get("encode (cache + model)")
            with stages.span("thread hand-off"):
                vectors = await anyio.to_thread.run_sync(self._encode, model, terms)
            # The span holds the encode (timed in the worker thread): keep the hand-off alone.
            stages.add("thread hand-off", encoded_before - stages.get("encode (cache + model)"))
        mapped = searched.vectors.dims
        if mapped and vectors.shape[1] != mapped:
            # The engine would refuse each kNN clause with a long error of its own.
            raise IndexStateError(
                f"index {target!r} field {searched.vectors.layout.vector_field!r} holds "
                f"{mapped}-dim vectors but model {model!r} makes {vectors.shape[1]}-dim ones: "
                "start the proxy with the matching --model (or the index config's `model`)"
            )
        return vectors

    # -- rewriting -------------------------------------------------------------------------

    async def _statistics(
        self,
        target: str,
        query: Query,
        headers: dict[str, str],
        counted: Counted,
    ) -> CorpusStats | None:
        """The target's token statistics for hybrid truths (None for other truths): asked of
        the upstream once per target and token set of this request (`counted`), never kept
        for the next request, whose documents may differ."""
        if not self.defaults.truth.uses_lexical:
            return None
        key = (target, tuple(sorted(query_tokens(query.terms))))
        if key not in counted:
            counted[key] = await self.upstream.lexical_stats(target, query, headers)
        return counted[key]

    async def _rewrite_one(
        self,
        body: dict[str, Any],
        target: str | None,
        headers: dict[str, str],
        counted: Counted,
    ) -> dict[str, Any] | None:
        """The rewritten body, or None when it holds no itlr clause. `counted`: the statistics
        this request has counted so far (an `_msearch` shares them between its searches)."""
        with stages.span("find + parse clause"):
            found: LogicalSearch | None = find_logical_search(body.get("query"), self.field)
        if found is None:
            return None
        if not target:
            raise ClauseError(
                f"a search on {self.field}: must name its index (or index pattern) in the path"
            )
        with stages.span("index lookup (cached)"):
            searched = await self.upstream.target(target, headers)
        vectors = await self._vectors(searched, target, list(found.query.terms))
        with stages.span("count token statistics"):  # ~0 unless the truths are hybrid
            lexical = await self._statistics(target, found.query, headers, counted)
        log.info("logical search on %s: %d terms", target, len(found.query.terms))
        log.debug("logical query on %s: %s", target, found.query)
        with stages.span("build upstream body"):
            return rewrite_body(
                body, found, searched.dialect, vectors, self.defaults, lexical, target
            )

    async def _rewrite_search(
        self, raw: bytes, target: str | None, headers: dict[str, str]
    ) -> bytes | None:
        with stages.span("parse JSON"):
            LIMITS.check_json_depth(raw, "the search body")
            try:
                body = decode_json(raw) if raw.strip() else None
            except ValueError:
                return None  # not ours to judge: the upstream answers malformed JSON itself
        if not isinstance(body, dict):
            return None
        rewritten = await self._rewrite_one(body, target, headers, {})
        if rewritten is None:
            return None
        with stages.span("serialise upstream body"):
            return encode_json(rewritten)

    async def _rewrite_msearch(
        self, raw: bytes, target: str | None, headers: dict[str, str]
    ) -> bytes | None:
        """Each header/body pair of the NDJSON; pairs without the clause keep their bytes."""
        LIMITS.check_json_depth(raw, "the _msearch body")
        lines = raw.split(b"\n")
        LIMITS.check_msearch(sum(1 for line in lines if line.strip()) // 2)
        counted: Counted = {}
        changed = False
        position = 0
        while position + 1 < len(lines):
            header_line, body_line = lines[position], lines[position + 1]
            if not header_line.strip():
                position += 1
                continue
            try:
                header = decode_json(header_line)
                body = decode_json(body_line)
            except ValueError:
                return None
            if isinstance(header, dict) and isinstance(body, dict):
                index = header.get("index", target)
                if isinstance(index, list):
                    index = ",".join(index)
                rewritten = await self._rewrite_one(body, index, headers, counted)
                if rewritten is not None:
                    lines[position + 1] = encode_json(rewritten)
                    changed = True
            position += 2
        return b"\n".join(lines) if changed else None

    async def _body_to_send(
        self, request: Request, match: re.Match[str], raw: bytes
    ) -> bytes | None:
        """The body to forward in place of `raw`, or None to forward `raw` itself."""
        if request.method not in ("GET", "POST"):
            return None
        target, api = match.group("target"), match.group("api")
        headers = auth_headers(request.headers)
        if api == "_msearch":
            return await self._rewrite_msearch(raw, target, headers)
        return await self._rewrite_search(raw, target, headers)

    # -- forwarding ------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        return token_matches(request.headers.get(TOKEN_HEADER), self.token)

    async def _read_search_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_SEARCH_BODY:
            raise _Refused(self._too_large())
        chunks = []
        size = 0
        try:
            with stages.span("read body"):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_SEARCH_BODY:
                        raise _Refused(self._too_large())
                    chunks.append(chunk)
        except ClientDisconnect:
            # Gone, or cut off by the body read time-out (which answered it): no one to answer.
            raise _Refused(Response(status_code=408)) from None
        return b"".join(chunks)

    @staticmethod
    def _too_large() -> JSONResponse:
        return error_response(
            413,
            "itlr_request_too_large",
            f"itlr: the search body exceeds the proxy's limit of {MAX_SEARCH_BODY} bytes "
            "(max_body_bytes, raise it with ITLR_MAX_BODY_BYTES)",
        )

    async def _script_failure(self, request: Request, upstream: httpx.Response) -> Response | None:
        """A logical search the upstream refused on a script error: the refusal to send when
        the stored script is not ours any more, else None (the upstream's answer, buffered)."""
        await upstream.aread()
        await upstream.aclose()
        if not is_script_error(upstream.text):
            return None
        try:
            await self.upstream.recheck_scripts(auth_headers(request.headers))
        except ScriptMismatch as foreign:
            return script_mismatch(foreign)
        except EngineError as failed:
            log.warning("cannot recheck itlr's stored scripts: %s", failed)
        return None

    async def handle(self, request: Request) -> Response:
        if self.stages is not None:
            self.stages.start_request()
        if not self._authorized(request):
            return error_response(
                401, "itlr_unauthorized", f"the proxy wants its token in the {TOKEN_HEADER} header"
            )
        if (
            not self.allow_script_writes
            and request.method not in ("GET", "HEAD")
            and SCRIPT_WRITE_PATH.match(request.url.path)
        ):
            return error_response(
                403,
                "itlr_script_write_refused",
                "itlr proxy: writes to itlr's stored scripts are refused (start the proxy with "
                f"--allow-script-writes to permit them); `{reinstall_command(self.connection.url)}`"
                " installs the packaged ones",
            )
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        content: bytes | AsyncIterator[bytes] | None
        rewritten = False
        query_api = QUERY_API_PATH.match(request.url.path)
        if query_api:
            try:
                raw = await self._read_search_body(request)
            except _Refused as refused:
                return refused.response
            if mentions_clause(raw, self.field):
                return error_response(
                    400,
                    "itlr_query_error",
                    f"itlr: {query_api.group('api')} cannot rank by a "
                    f"{self.field}:(...) clause: send it to _search, _msearch or _async_search",
                )
            content = raw if raw or "content-length" in request.headers else None
        elif search := SEARCH_PATH.match(request.url.path):
            try:
                raw = await self._read_search_body(request)
                replaced = await self._body_to_send(request, search, raw)
            except _Refused as refused:
                return refused.response
            except LimitError as over:
                kind = "itlr_request_too_large" if over.is_size else "itlr_limit_exceeded"
                return error_response(413 if over.is_size else 400, kind, f"itlr: {over}")
            except (ClauseError, QuerySyntaxError) as bad:
                return clause_error(bad)
            except UpstreamTimeout as slow:
                return upstream_timeout(slow)
            except ScriptMismatch as foreign:
                return script_mismatch(foreign)
            except UpstreamDenied as denied:
                return Response(denied.content, denied.status_code, media_type=denied.media_type)
            except EngineError as failed:
                return error_response(502, "itlr_upstream_error", f"itlr: {failed}")
            except ItlrError as failed:
                return error_response(400, "itlr_error", f"itlr: {failed}")
            if replaced is not None:
                rewritten = True
                raw = replaced
                headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                headers.append(("content-length", str(len(raw))))
            content = raw
        elif "content-length" in request.headers or "transfer-encoding" in request.headers:
            content = request.stream()
        else:
            content = None  # no body came, none goes (not an empty chunked one)
        upstream_request = httpx.Request(
            request.method,
            self._base + _raw_target(request),
            headers=headers,
            content=content,
            extensions={"timeout": self._timeouts},
        )
        try:
            with stages.span("upstream round trip (to headers)"):
                upstream = await self.transport.handle_async_request(upstream_request)
                upstream.request = upstream_request
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            slow = UpstreamTimeout(self.connection.url, timeout_seconds(self.client))
            log.warning("upstream %s timed out", self.connection.url)
            return upstream_timeout(slow)
        except httpx.TransportError as down:
            log.warning("upstream %s unreachable: %s", self.connection.url, type(down).__name__)
            said = (
                f"{untrusted_tls(self.connection.url, down)}"
                if is_tls_failure(down)
                else f"cannot reach the upstream {self.connection.url} "
                f"({type(down).__name__}): is it running?"
            )
            return error_response(502, "itlr_upstream_unreachable", f"itlr proxy: {said}")
        log.info("%s %s -> %d", request.method, request.url.path, upstream.status_code)
        if rewritten and upstream.status_code >= 400:
            failed = await self._script_failure(request, upstream)
            if failed is not None:
                return failed
        response_headers = {
            k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
        }
        if upstream.is_stream_consumed:
            # Buffered (a failed logical search): the bytes as the upstream sent them.
            response_headers.pop("content-encoding", None)
            response_headers.pop("content-length", None)
            return Response(upstream.content, upstream.status_code, response_headers)
        declared = upstream.headers.get("content-length", "")
        if declared.isdigit() and int(declared) <= RELAY_IN_ONE_PIECE:
            try:
                with stages.span("relay response body"):
                    content = b"".join([chunk async for chunk in upstream.aiter_raw()])
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
                return upstream_timeout(
                    UpstreamTimeout(self.connection.url, timeout_seconds(self.client))
                )
            except httpx.TransportError as cut:
                return error_response(
                    502,
                    "itlr_upstream_unreachable",
                    f"itlr proxy: the upstream {self.connection.url} broke off its answer "
                    f"({type(cut).__name__})",
                )
            finally:
                await upstream.aclose()
            # The bytes as sent (still compressed if they were): its content-length holds.
            return Response(content, upstream.status_code, response_headers)
        return StreamingResponse(
            _relayed(upstream) if stages.recording() else upstream.aiter_raw(),
            status_code=upstream.status_code,
            headers=response_headers,
            background=BackgroundTask(upstream.aclose),
        )


METRICS_PATH = "/_itlr/metrics"


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
) -> Starlette:
    """The proxy as an ASGI app. `embedder` None loads the index's own model on first use;
    `timeout`: seconds the upstream may take to answer (504 beyond); `allow_script_writes`:
    pass PUT / POST / DELETE on itlr's stored script ids through (refused by default);
    `indexes`: where indexes itlr did not make keep their text and vectors."""
    proxy = QueryBarProxy(
        connection,
        field,
        embedder,
        defaults or SearchOptions(),
        token,
        timeout,
        allow_script_writes,
        indexes,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.client.aclose()

    async def metrics(request: Request) -> Response:
        """The term cache's counters in Prometheus' text format (behind the proxy's token)."""
        if not proxy._authorized(request):
            return error_response(
                401, "itlr_unauthorized", f"the proxy wants its token in the {TOKEN_HEADER} header"
            )
        return Response(prometheus_text(), media_type=PROMETHEUS_CONTENT_TYPE)

    methods = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"]
    app = Starlette(
        routes=[
            # `_` starts no index name, so this path never shadows one of the upstream's.
            Route(METRICS_PATH, metrics, methods=["GET"]),
            Route("/", proxy.handle, methods=methods),
            Route("/{path:path}", proxy.handle, methods=methods),
        ],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
