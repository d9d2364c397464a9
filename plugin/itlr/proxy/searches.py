"""The requests the query-bar proxy reads before forwarding (itlr.proxy.app): searches, whose
body (or query string) may hold a clause on the virtual field and is rewritten into the logical
scoring, and the APIs that take a query but cannot rank by it, refused when they name the field.
Also what follows a rewritten search's answer: the recheck of itlr's stored scripts after a
script error, the coverage warnings, the answer fixed (itlr.proxy.answers).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from itlr.extras import missing_extra

try:
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.engines.integrity import ScriptMismatch, is_script_error
from itlr.errors import IndexStateError, ItlrError
from itlr.lexical import CorpusStats, query_tokens
from itlr.limits import LIMITS
from itlr.options import SearchOptions
from itlr.proxy import placement, stages
from itlr.proxy.answers import AnswerPlan, AsyncSearches, Rewrite, fixed_answer
from itlr.proxy.bodies import JSON, RequestBody, not_json, read_body
from itlr.proxy.caller import Caller
from itlr.proxy.clause import ClauseError, LogicalSearch
from itlr.proxy.codec import decode_json, encode_json
from itlr.proxy.coverage import CoverageReport
from itlr.proxy.encoding import TermEncoding
from itlr.proxy.forward import Forwarded
from itlr.proxy.integrity import IntegrityWatch
from itlr.proxy.refusals import error_response, refusal, script_mismatch
from itlr.proxy.rewrite import refuse_terminate_after, rewrite_search
from itlr.proxy.statistics import CallerStatistics
from itlr.proxy.upstream import Upstream, UpstreamDenied
from itlr.query import Query

log = logging.getLogger("itlr.proxy")

# A UI's search bodies are small; a _msearch of many panels stays far below this.
MAX_SEARCH_BODY = LIMITS.max_body_bytes

# The token statistics one request has counted, by target and token set (hybrid truths).
Counted = dict[tuple[str, tuple[str, ...]], CorpusStats]


class Refused(Exception):
    """A response to send instead of forwarding."""

    def __init__(self, response: Response) -> None:
        self.response = response


class SearchRequests:
    """Reads, checks and rewrites the searches and query APIs of the proxy's callers, with the
    proxy's collaborators (each shared with the proxy, which owns their lifetimes)."""

    def __init__(
        self,
        field: str,
        defaults: SearchOptions,
        encoding: TermEncoding,
        upstream: Upstream,
        integrity: IntegrityWatch,
        statistics: CallerStatistics,
        coverage: CoverageReport,
        async_searches: AsyncSearches,
    ) -> None:
        self.field = field
        self.defaults = defaults
        self.encoding = encoding
        self.upstream = upstream
        self.integrity = integrity
        self.statistics = statistics
        self.coverage = coverage
        self.async_searches = async_searches

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
                lambda: self.upstream.term_statistics(caller, target, query),
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
            statistics = await self._statistics(target, found.query, caller, counted)
        log.info("logical search on %s: %d terms", target, len(found.query.terms))
        log.debug("logical query on %s: %s", target, found.query)
        with stages.span("build upstream body"):
            rewritten, plan = rewrite_search(
                body, found, searched.dialect, vectors, self.defaults, statistics, target
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

    async def read_search_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_SEARCH_BODY:
            raise Refused(self.too_large())
        chunks = []
        size = 0
        try:
            with stages.span("read body"):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_SEARCH_BODY:
                        raise Refused(self.too_large())
                    chunks.append(chunk)
        except ClientDisconnect:
            # Gone, or cut off by the body read time-out (which answered it): no one to answer.
            raise Refused(Response(status_code=408)) from None
        return b"".join(chunks)

    @staticmethod
    def too_large() -> JSONResponse:
        return error_response(
            413,
            "itlr_requesttoo_large",
            f"itlr: the search body exceeds the proxy's limit of {MAX_SEARCH_BODY} bytes "
            "(max_body_bytes, raise it with ITLR_MAX_BODY_BYTES)",
        )

    async def script_failure(
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

    async def query_api_body(self, request: Request, api: str) -> bytes | None:
        """The body of a request to an API that takes a query but cannot rank by the logical
        score (`_count`, `_explain`, `_reindex`, ...), to forward as it came; refused
        (`Refused`) when it names the field anywhere the engine would read: its body in any
        format or encoding, its `q=` / `source=` parameters, a stored template it renders."""
        raw = await self.read_search_body(request)
        query = request.scope.get("query_string") or b""
        try:
            body = read_body(raw, request.headers)
            named = (
                placement.body_names_field(body, self.field, f"the {api} body")
                or placement.url_names_field(query, self.field)
                or (
                    "template" in api
                    and body.kind == JSON
                    and await self.upstream.stored_template_names_field(
                        Caller.of(request.headers), body.data, self.field
                    )
                )
            )
        except ItlrError as failed:
            raise Refused(refusal(failed)) from None
        if named:
            raise Refused(
                error_response(
                    400,
                    "itlr_query_error",
                    f"itlr: {api} cannot rank by a {self.field}:(...) clause: send it to "
                    "_search, _msearch or _async_search",
                )
            )
        return raw if raw or "content-length" in request.headers else None

    async def search_to_send(
        self, request: Request, search: re.Match[str], headers: list[tuple[str, str]]
    ) -> tuple[bytes, list[tuple[str, str]], bytes | None, Rewrite | None]:
        """(body, headers, query string or None for the UI's own, the rewrite or None) to
        forward for a search: the UI's bytes and headers as they came unless rewritten."""
        received = await self.read_search_body(request)
        query = request.scope.get("query_string") or b""
        try:
            body = read_body(received, request.headers)
            body, from_url = placement.url_body(query, body, search.group("api"), self.field)
            done = await self._body_to_send(
                request, search, body, query if from_url is None else from_url
            )
        except UpstreamDenied as denied:
            raise Refused(
                Response(denied.content, denied.status_code, media_type=denied.media_type)
            ) from None
        except ItlrError as failed:
            raise Refused(refusal(failed)) from None
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

    async def add_coverage_warnings(
        self, request: Request, targets: list[str], response_headers: dict[str, str]
    ) -> None:
        """The coverage `Warning` of every index a logical search of the request searched."""
        caller = Caller.of(request.headers)
        notes = [await self.coverage.warning(caller, target) for target in dict.fromkeys(targets)]
        shown = [note for note in notes if note]
        if shown:
            previous = response_headers.get("warning")
            response_headers["warning"] = ", ".join(filter(None, [previous, *shown]))

    def fixed_answer_response(
        self, content: bytes, status: int, headers: dict[str, str], done: Rewrite, api: str
    ) -> Response:
        """The answer to a rewritten search with itlr's fields hidden and a true hits.total
        (itlr.proxy.answers); an async search's id remembered for its polls."""
        with stages.span("fix answer"):
            content = fixed_answer(content, headers, done, api, self.async_searches)
        return Response(content, status, headers)
