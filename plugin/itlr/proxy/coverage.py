"""The proxy's coverage report (`/_itlr/healthz`, gauges in `/_itlr/metrics`): for each index a
caller has searched (or names), how many documents have a text but no vector.

Everything here is read as the caller (itlr.proxy.caller), never as the proxy's own user: a
caller the cluster refuses gets the cluster's refusal, a caller under document-level security
sees their own documents counted, and a count is kept for a few seconds under the caller's
digest only. Healthz lists the indexes this caller searched or named, never another caller's;
the metrics' gauges are those of every searched index this caller may count (the others are
left out). An index name or pattern is checked before it goes into a path; an index that does
not exist is a one-line 404."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from itlr.engines.cluster_client import ClusterRefused
from itlr.engines.cluster_reads import count_coverage, engine_of
from itlr.engines.coverage import COVERAGE_TTL, prometheus_lines
from itlr.errors import EngineError, ItlrError
from itlr.proxy.caller import BadTarget, Caller, TimedLRU, index_path
from itlr.proxy.refusals import error_response
from itlr.proxy.upstream import Upstream, UpstreamDenied
from itlr.results import Coverage

# Counts kept, per (caller, target): a scrape every few seconds by a few callers fits.
KEPT_COUNTS = 1024
# Targets one healthz request may name.
MAX_NAMED = 64


class CoverageReport:
    """Counts per index for the proxy's health and metrics endpoints, each as its caller."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.counted: TimedLRU[tuple[bytes, str], Coverage] = TimedLRU(KEPT_COUNTS, COVERAGE_TTL)

    async def count(self, caller: Caller, target: str) -> Coverage:
        """The target's coverage as the caller may count it (UpstreamDenied: the cluster's
        refusal, or its 404)."""
        key = (caller.digest, target)
        kept = self.counted.get(key)
        if kept is not None:
            return kept
        layout = (await self.upstream.vectors(caller, target)).layout
        operation = count_coverage(
            target, layout.vector_field, layout.text_field, follow_state=False
        )
        try:
            counted = await self.upstream.reads.about(caller, target, operation)
        except ClusterRefused as refused:
            if refused.answer.status in (401, 403, 404):
                raise UpstreamDenied(self.upstream.connection.url, refused.answer.source) from None
            raise
        self.counted.put(key, counted)
        return counted

    async def warning(self, caller: Caller, target: str) -> str | None:
        """The `Warning` header value (RFC 7234 form, code 299, as the engines send theirs) for
        a logical search of `target` when documents it cannot score exist; None otherwise, or
        when they cannot be counted (the search's answer is not held up by the count)."""
        try:
            layout = (await self.upstream.vectors(caller, target)).layout
            counted = await self.count(caller, target)
        except (ItlrError, ValueError):
            return None
        note = counted.warning(layout.vector_field, layout.text_field)
        if note is None:
            return None
        # A header value is Latin-1 text: anything else, and the quote, are escaped away.
        quoted = note.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "replace")
        return f'299 itlr "{quoted.decode("ascii")}"'

    async def healthz(self, request: Request) -> Response:
        """The upstream's engine as the caller's `GET /` finds it and, per index this caller
        searched (and each `?index=` named), the documents with a text but no vector. The
        cluster's 401 to the caller is the answer (its 403 for a named index); a named index that does not exist is a
        404; 503 when the upstream does not answer (a root that answers something else is
        said in `engine_error`, the counts still made)."""
        caller = Caller.of(request.headers)
        named = request.query_params.getlist("index")
        if len(named) > MAX_NAMED:
            return error_response(
                400, "itlr_bad_request", f"itlr: name at most {MAX_NAMED} indexes in ?index="
            )
        try:
            for target in named:
                index_path(target)
        except BadTarget as bad:
            return error_response(400, "itlr_bad_request", f"itlr: {bad}")
        engine: dict[str, Any] = {"engine": None, "version": None}
        try:
            url = self.upstream.connection.url
            engine["engine"], engine["version"] = await self.upstream.reads.run(
                caller, engine_of(url)
            )
        except ClusterRefused as refused:
            root = refused.answer
            if root.status == 401:  # who the caller is, the cluster does not know: nothing
                return Response(root.source.content, 401, media_type="application/json")
            engine["engine_error"] = str(refused) if root.ok else f"GET / answered {root.status}"
        except EngineError as down:
            return JSONResponse({"status": "unavailable", "error": str(down)}, status_code=503)
        coverage: dict[str, Any] = {}
        for target in dict.fromkeys([*named, *self.upstream.searched_by(caller)]):
            try:
                coverage[target] = (await self.count(caller, target)).to_dict()
            except UpstreamDenied as denied:
                if target not in named:
                    continue  # searched once, not readable now: not this caller's to see
                if denied.status_code == 404:
                    return error_response(
                        404,
                        "index_not_found_exception",
                        f"itlr: no index matches {target!r} at {self.upstream.connection.url}",
                        index=target,
                    )
                return Response(denied.content, denied.status_code, media_type=denied.media_type)
            except (ItlrError, ValueError) as failed:
                coverage[target] = {"index": target, "error": str(failed)}
        return JSONResponse({"status": "ok", **engine, "coverage": coverage})

    async def gauges(self, caller: Caller) -> str:
        """The coverage gauges of every searched index the caller may count."""
        counts = []
        for target in self.upstream.searched():
            try:
                counts.append(await self.count(caller, target))
            except (ItlrError, ValueError):
                continue
        return prometheus_lines(counts)
