"""The proxy's coverage report (`/_itlr/healthz`, gauges in `/_itlr/metrics`): for each index
it has searched (or one named), how many documents have a text but no vector, counted with the
caller's credentials and reused for a few seconds (itlr.engines.coverage)."""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from itlr.engines.connection import Connection, error_reason
from itlr.engines.coverage import (
    CoverageCache,
    coverage_body,
    parse_coverage,
    prometheus_lines,
)
from itlr.errors import EngineError
from itlr.proxy.upstream import Upstream, auth_headers
from itlr.results import Coverage


async def target_coverage(
    upstream: Upstream, cache: CoverageCache, target: str, headers: dict[str, str]
) -> Coverage:
    # Counted per caller: one user's answer never stands in for another's, who may not be
    # allowed to read the index.
    key = f"{target}\0{hashlib.sha256(repr(sorted(headers.items())).encode()).hexdigest()}"
    kept = cache.fresh(key)
    if kept is not None:
        return kept
    layout = (await upstream.vectors(target, headers)).layout
    response = await upstream._send(
        "POST",
        f"/{target}/_search",
        headers,
        json=coverage_body(layout.vector_field, layout.text_field),
    )
    try:
        payload: Any = response.json()
    except ValueError:
        payload = response.text
    if response.status_code != 200 or not isinstance(payload, dict):
        raise EngineError(
            f"cannot count the documents of {target!r} without a vector: the upstream answered "
            f"{response.status_code} ({error_reason(payload, payload)})"
        )
    counted = parse_coverage(target, payload)
    cache.put(counted, key)
    return counted


class CoverageReport:
    """Counts per index for the proxy's health and metrics endpoints."""

    def __init__(self, upstream: Upstream, connection: Connection) -> None:
        self.upstream = upstream
        self.connection = connection
        self.cache = CoverageCache()

    def _headers(self, request: Request) -> dict[str, str]:
        return {**self.connection.auth_headers(), **auth_headers(request.headers)}

    async def counts(self, request: Request, named: list[str]) -> dict[str, Coverage | EngineError]:
        """{index: coverage, or why it could not be counted}: the named ones and every index
        searched so far."""
        headers = self._headers(request)
        report: dict[str, Coverage | EngineError] = {}
        for target in dict.fromkeys([*named, *self.upstream.known_targets()]):
            try:
                report[target] = await target_coverage(self.upstream, self.cache, target, headers)
            except EngineError as failed:
                report[target] = failed
            except ValueError as failed:  # an index whose layout itlr cannot read
                report[target] = EngineError(str(failed))
        return report

    async def warning(self, request: Request, target: str) -> str | None:
        """The `Warning` header value (RFC 7234 form, code 299, as the engines send theirs) for
        a logical search of `target` when documents it cannot score exist; None otherwise, or
        when they cannot be counted (the search's answer is not held up by the count)."""
        headers = self._headers(request)
        try:
            layout = (await self.upstream.vectors(target, headers)).layout
            counted = await target_coverage(self.upstream, self.cache, target, headers)
        except (EngineError, ValueError):
            return None
        note = counted.warning(layout.vector_field, layout.text_field)
        if note is None:
            return None
        # A header value is Latin-1 text: anything else, and the quote, are escaped away.
        quoted = note.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "replace")
        return f'299 itlr "{quoted.decode("ascii")}"'

    async def healthz(self, request: Request) -> JSONResponse:
        """The upstream's engine and, per index searched so far (and each `?index=` named), the
        documents with a text but no vector; 503 when the upstream does not answer."""
        try:
            engine, version = await self.upstream.engine(self._headers(request))
        except EngineError as down:
            return JSONResponse({"status": "unavailable", "error": str(down)}, status_code=503)
        counts = await self.counts(request, request.query_params.getlist("index"))
        coverage = {
            name: {"index": name, "error": str(c)} if isinstance(c, Exception) else c.to_dict()
            for name, c in counts.items()
        }
        return JSONResponse(
            {"status": "ok", "engine": engine, "version": version, "coverage": coverage}
        )

    async def gauges(self, request: Request) -> str:
        """The coverage gauges of every index searched so far (those that could be counted)."""
        try:
            counts = await self.counts(request, [])
        except EngineError:
            return ""
        return prometheus_lines([c for c in counts.values() if isinstance(c, Coverage)])
