"""Reading an index in the order it was written, resumably: the follower's change feed
(itlr.follow).

Every write of a document (index, create, `_update`, a `_bulk` `update` that runs no pipeline,
`_update_by_query`) gives it a new `_seq_no`, larger than any before it in its shard. So reading
each shard in `_seq_no` order from a cursor sees every document written since the cursor, once
in its latest version, whatever wrote it: a first pass from -1 reads every document, and once
the cursor is at the head, each look reads only what was written since. The feed reads up to
each shard's global checkpoint (read before a refresh), never past it: every operation up to
it is done on every copy and so visible after the refresh, while a higher one may still be
under way (read next time). Deleted documents leave no trace here (a copy finds them by
comparing, itlr.backfill.delete_gone).

The cursors, with the index's uuid (a recreated index starts again), are kept in the `_meta`
of the index the follower writes (`_meta.itlr_follow`, merged into what is there), with the
time up to which the feed has verified every write: coverage reads them
(ClusterBackend.coverage) and a restarted follower resumes from them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from itlr.engines.coverage import FOLLOW_META
from itlr.engines.operations import ClusterOperations


@dataclass
class FeedPage:
    """Documents of one shard in `_seq_no` order; `upto` is the shard's cursor once they are
    done."""

    shard: int
    hits: list[dict[str, Any]]
    upto: int


@dataclass
class ChangeFeed:
    """The documents of `index` written since the cursors, shard by shard."""

    operations: ClusterOperations
    index: str
    source: list[str] | bool
    page_size: int = 256
    uuid: str = ""
    cursors: dict[int, int] = field(default_factory=dict)
    targets: dict[int, int] = field(default_factory=dict)
    # When the checkpoints of the current look were read.
    looked_at: float = 0.0
    # When the current pass over every document started (None: resumed at the head).
    pass_started: float | None = None
    # Every write made before this time has been read (None: the first pass is not done).
    verified_through: float | None = None

    def start_over(self, uuid: str) -> None:
        """A new index (or the first look at one): read every document again."""
        self.uuid, self.cursors, self.targets = uuid, {}, {}
        self.pass_started, self.verified_through = time.time(), None

    def look(self) -> None:
        """Read each shard's checkpoint, then refresh: what the pages read next is visible."""
        self.looked_at = time.time()
        self.targets = self.operations.shard_checkpoints(self.index)
        for shard in self.targets:
            self.cursors.setdefault(shard, -1)
        self.operations.refresh(self.index)
        if self.caught_up:  # nothing written since the last look
            self.verified_through, self.pass_started = self.looked_at, None

    @property
    def caught_up(self) -> bool:
        return all(self.cursors.get(s, -1) >= target for s, target in self.targets.items())

    @property
    def behind(self) -> int:
        """Operations between the cursors and the checkpoints (an upper bound on the
        documents still to read: an update replaces its document's earlier operations)."""
        return sum(max(0, t - self.cursors.get(s, -1)) for s, t in self.targets.items())

    def pages(self, budget: int | None = None) -> Iterator[FeedPage]:
        """Pages of documents up to the checkpoints of the last look, at most `budget`
        documents in all; `done(page)` moves the cursor once a page is handled."""
        left = budget
        for shard, target in sorted(self.targets.items()):
            while self.cursors.get(shard, -1) < target and (left is None or left > 0):
                size = self.page_size if left is None else min(self.page_size, left)
                page = self._page(shard, target, size)
                if left is not None:
                    left -= max(1, len(page.hits))
                yield page

    def done(self, page: FeedPage) -> None:
        self.cursors[page.shard] = max(self.cursors.get(page.shard, -1), page.upto)
        if self.caught_up:
            # Every write before this look has been read (a pass from the start is over).
            self.verified_through, self.pass_started = self.looked_at, None

    def _page(self, shard: int, target: int, size: int) -> FeedPage:
        cursor = self.cursors.get(shard, -1)
        body = {
            "size": size,
            "seq_no_primary_term": True,
            "sort": [{"_seq_no": "asc"}],
            "_source": self.source,
            "query": {"range": {"_seq_no": {"gt": cursor, "lte": target}}},
        }
        answer = self.operations.search(self.index, body, f"_shards:{shard}")
        hits = list(answer["hits"]["hits"])
        upto = target if len(hits) < size else int(hits[-1]["_seq_no"])
        return FeedPage(shard, hits, upto)

    # -- state in the written index's _meta --------------------------------------------

    def state(self, **extra: Any) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "cursors": {str(s): c for s, c in sorted(self.cursors.items())},
            "verified_through": self.verified_through,
            "pass_started": self.pass_started,
            "saved": time.time(),
            **extra,
        }

    def resume(self, state: dict[str, Any] | None, uuid: str) -> bool:
        """Take the cursors saved for this index (same uuid); False (starting over) when
        there are none."""
        if not state or state.get("uuid") != uuid or not isinstance(state.get("cursors"), dict):
            self.start_over(uuid)
            return False
        self.uuid = uuid
        self.cursors = {int(s): int(c) for s, c in state["cursors"].items()}
        self.verified_through = state.get("verified_through")
        self.pass_started = state.get("pass_started")
        return True


def saved_state(operations: ClusterOperations, index: str) -> dict[str, Any] | None:
    """The follower's state recorded in `index`'s `_meta`, if any."""
    state = (operations.mapping(index).get("_meta") or {}).get(FOLLOW_META)
    return state if isinstance(state, dict) else None


def save_state(operations: ClusterOperations, index: str, state: dict[str, Any]) -> None:
    """Record the follower's state in `index`'s `_meta`, keeping every other key there (the
    engines replace `_meta` whole)."""
    meta = dict(operations.mapping(index).get("_meta") or {})
    meta[FOLLOW_META] = state
    operations.put_meta(index, meta)
