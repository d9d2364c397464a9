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
from typing import Any
from urllib.parse import unquote

from itlr.extras import missing_extra

try:
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.middleware import Middleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.embed import Embedder
from itlr.engines.connection import Connection, is_tls_failure, untrusted_tls
from itlr.engines.integrity import (
    SCRIPT_CHECK_SECONDS,
    ScriptMismatch,
    is_script_error,
)
from itlr.errors import ConfigurationError, IndexStateError, ItlrError
from itlr.lexical import CorpusStats, query_tokens
from itlr.limits import LIMITS
from itlr.options import SearchOptions
from itlr.proxy import placement, stages
from itlr.proxy.answers import AnswerPlan, AsyncSearches, Rewrite, fixed_answer
from itlr.proxy.bodies import (
    JSON,
    RequestBody,
    not_json,
    read_body,
)
from itlr.proxy.caller import Caller, CallerReads
from itlr.proxy.clause import ClauseError, LogicalSearch
from itlr.proxy.codec import (
    decode_json,
    encode_json,
    error_body,
    error_response,
    refusal,
    script_mismatch,
    upstream_timeout,
)
from itlr.proxy.coverage import CoverageReport
from itlr.proxy.encoding import TermEncoding
from itlr.proxy.forward import Forwarded, Forwarder, ForwardFailed, ForwardTimeout
from itlr.proxy.integrity import IntegrityWatch, OwnRequests, write_refusal
from itlr.proxy.rewrite import refuse_terminate_after, rewrite_search
from itlr.proxy.statistics import CallerStatistics, changes_documents
from itlr.proxy.upstream import IndexConfig, Upstream, UpstreamDenied, UpstreamTimeout
from itlr.query import Query
from itlr.service.security import TOKEN_HEADER, TokenGuard
from itlr.term_cache import PROMETHEUS_CONTENT_TYPE, prometheus_text

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

    # -- rewriting -------------------------------------------------------------------------

    async def _statistics(
        self,
        target: str,
        query: Query,
        caller: Caller,
        counted: Counted,
    ) -> CorpusStats | None:
        """The target's token statistics for hybrid truths (None for other truths): the
        caller's remembered ones while recent (itlr.proxy.statistics), else asked of the
        upstream; once per target and token set of this request (`counted`)."""
        if not self.defaults.truth.uses_lexical:
            return None
        tokens = query_tokens(query.terms)
        key = (target, tuple(sorted(tokens)))
        if key not in counted:
            counted[key] = await self.statistics.statistics(
                target,
                caller.headers,
                tokens,
                lambda: self.upstream.lexical_stats(caller, target, query),
            )
        return counted[key]

    async def _rewrite_one(
        self,
        body: dict[str, Any],
        target: str | None,
        caller: Caller,
        counted: Counted,
        query: bytes = b"",
    ) -> tuple[dict[str, Any], AnswerPlan, bytes | None] | None:
        """The rewritten body, what to fix in its answer and the query string left to forward
        (None: unchanged), or None when it holds no itlr clause. `counted`: the statistics this
        request has counted so far (an `_msearch` shares them between its searches); `query`:
        the search's query string, whose search parameters (size, sort, _source, ...) win over
        the body's: folded into it, so the rewrite ranks the page they ask for and they cannot
        undo it."""
        with stages.span("find + parse clause"):
            body = placement.unwrap(body, self.field)
            found: LogicalSearch | None = placement.walk(body, self.field)
        if found is None:
            return None
        refuse_terminate_after(
            dict(placement.parameters(query)).get("terminate_after"), "a URL parameter"
        )
        body, query_left = placement.folded_url_parameters(body, query)
        if not target:
            raise ClauseError(
                f"a search on {self.field}: must name its index (or index pattern) in the path"
            )
        with stages.span("index lookup (cached)"):
            searched = await self.upstream.target(caller, target)
            await self.integrity.verified(caller, searched.dialect)
        vectors = await self.encoding.vectors(searched, target, list(found.query.terms))
        with stages.span("count token statistics"):  # ~0 unless the truths are hybrid
            lexical = await self._statistics(target, found.query, caller, counted)
        log.info("logical search on %s: %d terms", target, len(found.query.terms))
        log.debug("logical query on %s: %s", target, found.query)
        with stages.span("build upstream body"):
            rewritten, plan = rewrite_search(
                body, found, searched.dialect, vectors, self.defaults, lexical, target
            )
        return rewritten, plan, query_left

    async def _rewrite_search(
        self, raw: bytes, target: str | None, caller: Caller, query: bytes
    ) -> Rewrite | None:
        with stages.span("parse JSON"):
            LIMITS.check_json_depth(raw, "the search body")
            try:
                body = decode_json(raw) if raw.strip() else None
            except ValueError:
                return None  # not ours to judge: the upstream answers malformed JSON itself
        if not isinstance(body, dict):
            return None
        done = await self._rewrite_one(body, target, caller, {}, query)
        if done is None:
            return None
        with stages.span("serialise upstream body"):
            return Rewrite(encode_json(done[0]), done[2], {0: done[1]}, [str(target)])

    async def _rewrite_msearch(
        self, raw: bytes, target: str | None, caller: Caller
    ) -> Rewrite | None:
        """Each header/body pair of the NDJSON; pairs without the clause keep their bytes."""
        LIMITS.check_json_depth(raw, "the _msearch body")
        lines = raw.split(b"\n")
        LIMITS.check_msearch(sum(1 for line in lines if line.strip()) // 2)
        counted: Counted = {}
        plans: dict[int, AnswerPlan] = {}
        targets: list[str] = []
        for found in placement.msearch_searches(lines, target, self.field):
            try:
                done = await self._rewrite_one(found.body, found.index, caller, counted)
            except IndexStateError as failed:  # which search of many, on which index
                raise IndexStateError(
                    f"_msearch search {found.ordinal + 1} (on {found.index!r}): {failed}"
                ) from None
            if done is not None:
                refuse_terminate_after(
                    found.header.get("terminate_after"),
                    f"in the header of _msearch search {found.ordinal + 1}",
                )
                lines[found.position + 1] = encode_json(done[0])
                plans[found.ordinal] = done[1]
                targets.append(str(found.index))
        return Rewrite(b"\n".join(lines), None, plans, targets) if plans else None

    async def _body_to_send(
        self, request: Request, match: re.Match[str], body: RequestBody, query: bytes
    ) -> Rewrite | None:
        """What to forward in place of the request's body (and query string), or None to
        forward them as they came."""
        if request.method not in ("GET", "POST"):
            return None
        target, api = match.group("target"), match.group("api")
        if body.kind != JSON:
            if placement.body_names_field(body, self.field, f"the {api} body"):
                raise not_json(body.kind, self.field)
            return None  # it names no field: the engine reads it as it is
        caller = Caller.of(request.headers)
        if api == "_msearch":
            done = await self._rewrite_msearch(body.data, target, caller)
        else:
            done = await self._rewrite_search(body.data, target, caller, query)
        if done is not None:
            placement.refuse_other_answer_formats(query, request.headers.get("accept"), self.field)
        return done

    # -- forwarding ------------------------------------------------------------------------

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

    async def _script_failure(
        self, request: Request, upstream: Forwarded, target: str | None
    ) -> Response | None:
        """A logical search the upstream refused on a script error: the refusal to send when
        the stored script is not ours any more, else None (the upstream's answer, buffered).
        ForwardTimeout / ForwardFailed when the answer does not come whole."""
        await upstream.read()
        if not is_script_error(upstream.text):
            return None
        caller = Caller.of(request.headers)
        try:
            searched = await self.upstream.target(caller, target) if target else None
            await self.integrity.after_error(caller, searched.dialect if searched else None)
        except ScriptMismatch as foreign:
            return script_mismatch(foreign)
        except ItlrError as failed:
            log.warning("cannot recheck itlr's stored scripts: %s", failed)
        return None

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
        script_write = request.method not in ("GET", "HEAD") and (
            path.startswith("/_scripts/") or path.startswith("/_ingest/pipeline/")
        )
        refused = write_refusal(request.method, path, self.connection.url)
        if refused is not None and not self.allow_script_writes:
            return error_response(403, "itlr_script_write_refused", f"itlr proxy: {refused}")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        content: bytes | AsyncIterator[bytes] | None
        rewritten = False
        search: re.Match[str] | None = None
        forward_query: bytes | None = None
        query_api = QUERY_API_PATH.match(request.url.path)
        done: Rewrite | None = None
        answer_api = ""
        if query_api:
            try:
                content = await self._query_api_body(request, query_api.group("api"))
            except _Refused as refused:
                return refused.response
        elif search := SEARCH_PATH.match(request.url.path):
            try:
                content, headers, forward_query, done = await self._search_to_send(
                    request, search, headers
                )
            except _Refused as refused:
                return refused.response
            rewritten = done is not None
            answer_api = search.group("api")
        elif request.method == "GET" and (poll := ASYNC_POLL_PATH.match(request.url.path)):
            # A poll of an async search the proxy rewrote: its answer is fixed as the submit's.
            done = self.async_searches.recall(poll.group("id"))
            answer_api = "_async_search"
            content = request.stream() if "content-length" in request.headers else None
        elif "content-length" in request.headers or "transfer-encoding" in request.headers:
            content = request.stream()
        else:
            content = None  # no body came, none goes (not an empty chunked one)
        writes = changes_documents(request.method, path, request.query_params.get("refresh"))
        try:
            with stages.span("upstream round trip (to headers)"):
                upstream = await self.forwarder.send(
                    request.method,
                    self._base + _raw_target(request, forward_query),
                    headers,
                    content,
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
        if script_write:
            # Whatever it wrote, the next logical search waits for a new check of itlr's own.
            self.integrity.nudge()
        relayed = False
        try:
            if rewritten and upstream.status_code >= 400:
                foreign = await self._script_failure(
                    request, upstream, search.group("target") if search else None
                )
                if foreign is not None:
                    return foreign
            response_headers = {k: v for k, v in upstream.headers.items() if k not in HOP_BY_HOP}
            if done is not None and upstream.status_code < 400:
                # Documents without a vector cannot be found: say so as engines say deprecations.
                await self._add_coverage_warnings(request, done.targets, response_headers)
                with stages.span("relay response body"):
                    content = await upstream.read()
                return self._fixed_answer(
                    content, upstream.status_code, response_headers, done, answer_api
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

    async def _query_api_body(self, request: Request, api: str) -> bytes | None:
        """The body of a request to an API that takes a query but cannot rank by the logical
        score (`_count`, `_explain`, `_reindex`, ...), to forward as it came; refused
        (`_Refused`) when it names the field anywhere the engine would read: its body in any
        format or encoding, its `q=` / `source=` parameters, a stored template it renders."""
        raw = await self._read_search_body(request)
        query = request.scope.get("query_string") or b""
        try:
            body = read_body(raw, request.headers)
            named = (
                placement.body_names_field(body, self.field, f"the {api} body")
                or placement.url_mentions(query, self.field)
                or (
                    "template" in api
                    and body.kind == JSON
                    and await self.upstream.stored_template_mentions(
                        Caller.of(request.headers), body.data, self.field
                    )
                )
            )
        except ItlrError as failed:
            raise _Refused(refusal(failed)) from None
        if named:
            raise _Refused(
                error_response(
                    400,
                    "itlr_query_error",
                    f"itlr: {api} cannot rank by a {self.field}:(...) clause: send it to "
                    "_search, _msearch or _async_search",
                )
            )
        return raw if raw or "content-length" in request.headers else None

    async def _search_to_send(
        self, request: Request, search: re.Match[str], headers: list[tuple[str, str]]
    ) -> tuple[bytes, list[tuple[str, str]], bytes | None, Rewrite | None]:
        """(body, headers, query string or None for the UI's own, the rewrite or None) to
        forward for a search: the UI's bytes and headers as they came unless rewritten."""
        received = await self._read_search_body(request)
        query = request.scope.get("query_string") or b""
        try:
            body = read_body(received, request.headers)
            body, from_url = placement.url_body(query, body, search.group("api"), self.field)
            done = await self._body_to_send(
                request, search, body, query if from_url is None else from_url
            )
        except UpstreamDenied as denied:
            raise _Refused(
                Response(denied.content, denied.status_code, media_type=denied.media_type)
            ) from None
        except ItlrError as failed:
            raise _Refused(refusal(failed)) from None
        if done is None and from_url is None:
            return received, headers, None, None  # as sent, byte for byte
        content = body.data if done is None else done.content
        forward_query = from_url if done is None or done.query is None else done.query
        # What goes is JSON as the engine reads it: no Content-Encoding, its own length.
        moved = {"content-length", "content-encoding"} | (
            {"content-type"} if from_url is not None else set()
        )
        headers = [(k, v) for k, v in headers if k.lower() not in moved]
        headers.append(("content-length", str(len(content))))
        if from_url is not None:
            headers.append(("content-type", "application/json"))
        return content, headers, forward_query, done

    async def _add_coverage_warnings(
        self, request: Request, targets: list[str], response_headers: dict[str, str]
    ) -> None:
        """The coverage `Warning` of every index a logical search of the request searched."""
        caller = Caller.of(request.headers)
        notes = [await self.coverage.warning(caller, target) for target in dict.fromkeys(targets)]
        shown = [note for note in notes if note]
        if shown:
            previous = response_headers.get("warning")
            response_headers["warning"] = ", ".join(filter(None, [previous, *shown]))

    def _fixed_answer(
        self, content: bytes, status: int, headers: dict[str, str], done: Rewrite, api: str
    ) -> Response:
        """The answer to a rewritten search with itlr's fields hidden and a true hits.total
        (itlr.proxy.answers); an async search's id remembered for its polls."""
        with stages.span("fix answer"):
            content = fixed_answer(content, headers, done, api, self.async_searches)
        return Response(content, status, headers)

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
