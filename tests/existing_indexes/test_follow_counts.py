"""One set of counts (itlr.write_report.WriteCounts) for a follower, on a real OpenSearch: each
cycle counts what it did to documents, the run's report is those cycles added up (after what
preparing it did), never a second tally kept beside them; in place and into a copy."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from following import current
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.backfill import cluster_backend
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec
from itlr.engines.layout import IndexLayout
from itlr.fingerprint import HASH_FIELD
from itlr.follow import FollowCycle, Follower
from itlr.follow_copy import CopyFollower
from itlr.option_groups import BackfillOptions
from itlr.write_report import COUNTS, WriteCounts

pytestmark = pytest.mark.opensearch


def spec_of(url: str, name: str) -> EngineSpec:
    return EngineSpec(
        engine="opensearch",
        index_name=name,
        connection=Connection(url),
        layout=IndexLayout("vec", "body"),
    )


def counts(of: WriteCounts) -> dict[str, int]:
    return {name: getattr(of, name) for name in COUNTS}


def added_up(start: dict[str, int], cycles: list[FollowCycle]) -> dict[str, int]:
    return {name: start[name] + sum(getattr(c, name) for c in cycles) for name in COUNTS}


def cycles_until(follower: Follower, done: Callable[[], bool]) -> list[FollowCycle]:
    """The follower's cycles, run here one after another until `done` (at most 2 minutes)."""
    cycles = []
    deadline = time.monotonic() + 120
    while not done():
        assert time.monotonic() < deadline, "not in time"
        cycles.append(follower.cycle())
        time.sleep(0.2)
    return cycles


def test_an_in_place_followers_report_is_its_cycles_counts_added_up(
    opensearch_url, corpus, embedder
) -> None:
    url = opensearch_url
    docs = documents(corpus, 6)
    name = create_index(url, "opensearch", docs[:4])
    follower = Follower(
        cluster_backend(spec_of(url, name), embedder),
        embedder,
        "body",
        BackfillOptions(interval=0.2),
        recheck=0.5,
    )
    try:
        follower.prepare()
        start = counts(follower.report)
        cycles = cycles_until(follower, lambda: current(url, name, embedder))
        bulk(url, name, docs[4:])  # new documents
        # A text rewritten without the hash guard: the sweep finds its hash stale.
        rewritten = {"doc": {"body": "Volcanoes erupt molten lava and ash."}}
        httpx.post(f"{url}/{name}/_update/{docs[0]['_id']}", json=rewritten, timeout=30)
        cycles += cycles_until(
            follower,
            lambda: (
                current(url, name, embedder)
                and all_sources(url, name)[docs[0]["_id"]]["body"].startswith("Volcanoes")
            ),
        )
        assert sum(c.embedded for c in cycles) >= 7
        assert counts(follower.report) == added_up(start, cycles)
        assert follower.report.cycles == len(cycles)
    finally:
        delete_index(url, name)


def test_a_copy_followers_report_is_the_first_copy_and_its_cycles_counts_added_up(
    opensearch_url, corpus, embedder
) -> None:
    url = opensearch_url
    docs = documents(corpus, 6)
    source = create_index(url, "opensearch", [*docs[:4], {"_id": "no-text", "topic": "sleep"}])
    copy = f"{source}-copy"
    follower = CopyFollower(
        cluster_backend(spec_of(url, source), embedder),
        embedder,
        "body",
        BackfillOptions(into=copy, interval=0.2),
        recheck=0.5,
    )

    def mirrored() -> bool:
        theirs, ours = all_sources(url, source), all_sources(url, copy)
        return set(theirs) == set(ours) and all(
            ours[i].get(HASH_FIELD) for i, s in theirs.items() if s.get("body")
        )

    try:
        follower.prepare()  # the whole copy first: its counts are the report's start
        start = counts(follower.report)
        assert (start["embedded"], start["no_text"]) == (4, 1)
        bulk(url, source, docs[4:])
        retagged: dict[str, Any] = {"doc": {"topic": "sport"}}
        httpx.post(f"{url}/{source}/_update/{docs[1]['_id']}", json=retagged, timeout=30)
        httpx.delete(f"{url}/{source}/_doc/{docs[2]['_id']}?refresh=true", timeout=30)
        cycles = cycles_until(follower, mirrored)
        assert sum(c.embedded for c in cycles) >= 2
        assert sum(c.deleted for c in cycles) == 1
        assert counts(follower.report) == added_up(start, cycles)
    finally:
        delete_index(url, copy)
        delete_index(url, source)
