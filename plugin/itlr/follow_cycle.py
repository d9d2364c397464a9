"""What the follower (itlr.follow) handles per look: the counts of one cycle (`FollowCycle`,
its line on stdout, added into the run's report once the look is over), a document the engine
refused and when to try it again (`Retry`), and the search for the documents still to embed in
place (`pending_body`)."""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass
from typing import Any

from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.write_report import WriteCounts


@dataclass
class FollowCycle(WriteCounts):
    """One look at the index: what it did to documents (WriteCounts, as the run's report counts
    them), the stale hashes its sweep found among the `verified` documents it read, the writes
    refused (retried later) and its seconds."""

    number: int
    _: KW_ONLY
    stale: int = 0
    verified: int = 0
    failed: int = 0
    seconds: float = 0.0

    @property
    def busy(self) -> bool:
        """Whether it wrote anything (or failed to): reading alone (the sweep) is not busy."""
        return bool(
            self.embedded
            or self.restored
            or self.copied
            or self.deleted
            or self.stale
            or self.changed_meanwhile
            or self.failed
        )

    def line(self, index_name: str) -> str:
        copy = (
            f", {self.copied} copied, {self.deleted} deleted" if self.copied or self.deleted else ""
        )
        stale = f", {self.stale} stale hashes found by the sweep" if self.stale else ""
        return (
            f"{time.strftime('%H:%M:%S')} {index_name}: {self.embedded} embedded, {self.restored} "
            f"hash restored (text unchanged){copy}{stale}, {self.changed_meanwhile} changed "
            f"meanwhile (next cycle), {self.failed} failed (retried) in {self.seconds:.1f}s"
        )


@dataclass
class Retry:
    """A document the engine refused: how often, when to try again, why, its routing."""

    attempts: int
    due: float
    reason: str
    routing: str | None = None


def pending_body(vector_field: str, text_field: str, size: int, skip: list[str]) -> dict[str, Any]:
    """The documents with a text and no hash or no vector: new ones, rewritten ones, and those
    whose hash the pipeline or the sweep moved aside."""
    must_not: list[dict[str, Any]] = [{"ids": {"values": skip}}] if skip else []
    unfinished = [
        {"bool": {"must_not": [{"exists": {"field": HASH_FIELD}}]}},
        {"bool": {"must_not": [{"exists": {"field": vector_field}}]}},
    ]
    return {
        "size": size,
        "seq_no_primary_term": True,
        "_source": [text_field, PREVIOUS_HASH_FIELD, vector_field],
        "query": {
            "bool": {
                "filter": [
                    {"exists": {"field": text_field}},
                    {"bool": {"should": unfinished, "minimum_should_match": 1}},
                ],
                "must_not": must_not,
            }
        },
    }
