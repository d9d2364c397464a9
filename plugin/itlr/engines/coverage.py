"""How many documents of a cluster index a search cannot score: those with a text but no vector
(written after the last back-fill by something other than itlr). One size-0 search counts them
beside the total; the answer is kept a few seconds, so a stream of searches costs one count per
interval, not one per search. Pure request and parsing here; the I/O is the caller's (the
cluster backend's client, the proxy's async client)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from itlr.results import Coverage

# Seconds a count is reused: a document written since is missed for at most this long.
COVERAGE_TTL = 5.0


def coverage_body(vector_field: str, text_field: str) -> dict[str, Any]:
    """One size-0 search: the total, and the documents without a vector split by whether they
    have a text."""
    no_vector = {"bool": {"must_not": [{"exists": {"field": vector_field}}]}}
    return {
        "size": 0,
        "track_total_hits": True,
        "query": no_vector,
        "aggs": {
            "with_text": {"filter": {"exists": {"field": text_field}}},
            "everything": {"global": {}},
        },
    }


def parse_coverage(index: str, response: dict[str, Any]) -> Coverage:
    missing = int(response["hits"]["total"]["value"])
    with_text = int(response["aggregations"]["with_text"]["doc_count"])
    total = int(response["aggregations"]["everything"]["doc_count"])
    return Coverage(index, total, with_text, missing - with_text)


class CoverageCache:
    """The last count of each index, reused for `ttl` seconds (threads share it)."""

    def __init__(self, ttl: float = COVERAGE_TTL) -> None:
        self.ttl = ttl
        self._counted: dict[str, tuple[float, Coverage]] = {}
        self._lock = threading.Lock()

    def get(self, index: str, count: Callable[[], Coverage]) -> Coverage:
        now = time.monotonic()
        with self._lock:
            kept = self._counted.get(index)
        if kept is not None and now - kept[0] < self.ttl:
            return kept[1]
        counted = count()
        self.put(counted)
        return counted

    def fresh(self, key: str) -> Coverage | None:
        with self._lock:
            kept = self._counted.get(key)
        return kept[1] if kept is not None and time.monotonic() - kept[0] < self.ttl else None

    def put(self, coverage: Coverage, key: str | None = None) -> None:
        """Keep a count under its index's name, or `key` (the proxy's: name and caller)."""
        with self._lock:
            self._counted[key or coverage.index] = (time.monotonic(), coverage)

    def forget(self) -> None:
        with self._lock:
            self._counted.clear()


def prometheus_lines(coverages: list[Coverage]) -> str:
    """The coverage gauges in Prometheus' text format, one series per index."""
    if not coverages:
        return ""
    lines = []
    gauges = (
        ("itlr_index_documents", "Documents in the index.", "total"),
        (
            "itlr_index_documents_without_vector",
            "Documents with a text but no vector: no search finds them.",
            "without_vector",
        ),
        (
            "itlr_index_documents_without_text",
            "Documents with neither a text nor a vector.",
            "without_text",
        ),
    )
    for name, help_text, attribute in gauges:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for coverage in coverages:
            label = coverage.index.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            lines.append(f'{name}{{index="{label}"}} {getattr(coverage, attribute)}')
    return "\n".join(lines) + "\n"
