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

from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.results import Coverage

# The `_meta` key of the follower's state in the index it writes (itlr.change_feed keeps it).
FOLLOW_META = "itlr_follow"

# Seconds a count is reused: a document written since is missed for at most this long.
COVERAGE_TTL = 5.0


def coverage_body(vector_field: str, text_field: str) -> dict[str, Any]:
    """One size-0 search: the total, the documents without a vector split by whether they
    have a text, and those with a vector whose text a write changed since it was embedded
    (the hash guard or the follower's sweep moved their hash aside: itlr.follow)."""
    no_vector = {"bool": {"must_not": [{"exists": {"field": vector_field}}]}}
    unverified = {
        "bool": {
            "filter": [
                {"exists": {"field": text_field}},
                {"exists": {"field": vector_field}},
                {"exists": {"field": PREVIOUS_HASH_FIELD}},
            ],
            "must_not": [{"exists": {"field": HASH_FIELD}}],
        }
    }
    return {
        "size": 0,
        "track_total_hits": True,
        "query": no_vector,
        "aggs": {
            "with_text": {"filter": {"exists": {"field": text_field}}},
            "everything": {"global": {}, "aggs": {"unverified": {"filter": unverified}}},
        },
    }


def parse_coverage(
    index: str, response: dict[str, Any], mappings: list[dict[str, Any]] | None = None
) -> Coverage:
    """The counts of `coverage_body`'s answer, and from the indexes' `mappings` (where read)
    what a follower recorded in `_meta.itlr_follow`."""
    missing = int(response["hits"]["total"]["value"])
    with_text = int(response["aggregations"]["with_text"]["doc_count"])
    everything = response["aggregations"]["everything"]
    total = int(everything["doc_count"])
    unverified = int((everything.get("unverified") or {}).get("doc_count", 0))
    failing, verified_through = followed(mappings or [])
    return Coverage(
        index, total, with_text, missing - with_text, unverified, failing, verified_through
    )


def followed(mappings: list[dict[str, Any]]) -> tuple[int, float | None]:
    """(documents the followers could not write, the time before which every write of every
    index was verified) from the follower state in each index's `_meta` (itlr.change_feed); no
    state in one of them: no time."""
    states = [((m.get("_meta") or {}).get(FOLLOW_META)) for m in mappings]
    kept = [s for s in states if isinstance(s, dict)]
    failing = sum(int(s.get("failing") or 0) for s in kept)
    times = [s.get("verified_through") for s in states if isinstance(s, dict)]
    if not states or len(kept) < len(states) or any(t is None for t in times):
        return failing, None
    return failing, float(min(t for t in times if t is not None))


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
