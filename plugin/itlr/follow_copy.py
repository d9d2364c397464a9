"""Following into a copy (`itlr backfill --follow --into COPY`): for a source index the engine
cannot add a vector field to (an OpenSearch index created without `index.knn`), the team's
application keeps writing where it writes, and the follower keeps itlr's copy of it (itlr.into)
current.

At the start a whole copy is made (itlr.backfill, into), the source's shard checkpoints read
before it; then the change feed (itlr.change_feed) reads every write of the source since, in
`_seq_no` order, and copies each document (re-embedded only when its text changed, else with
the vector the copy holds). A write the copy refuses is retried (read again from the source by
id). Deletions leave no trace in the feed: once the copy is current, a copy holding more
documents than the source has documents to delete, found by asking the source for the copy's
ids (itlr.backfill.delete_gone). The feed's cursors live in the copy's `_meta.itlr_follow`: a
restarted follower resumes there. The source recreated or its alias moved: the copy is
mirrored from the start; fields the source maps anew are mapped in the copy.
"""

from __future__ import annotations

import time
from typing import Any

from itlr.backfill import (
    backfill,
    check_before_backfill,
    copy_actions,
    delete_gone,
    prepare_copy,
    require_vector_field,
    routing,
)
from itlr.change_feed import saved_state
from itlr.engines.deadline import longer_deadline
from itlr.errors import ConfigurationError, EngineError, IndexStateError
from itlr.follow import FollowCycle, Follower, Retry
from itlr.follow_watch import Changes, Snapshot
from itlr.ingest import batched
from itlr.into import plan_copy
from itlr.write_report import WriteCounts


class CopyFollower(Follower):
    """A Follower whose writes go into `into`, itlr's copy of the source."""

    into: str
    # The copy's uuid once made or found: writes go only into that index (a copy deleted
    # meanwhile would be created again by the first write, with every field mapped by guess).
    copy_uuid: str = ""
    # Top-level fields the source's documents carry but its mapping keeps unmapped.
    unmapped: frozenset[str] = frozenset()

    def _prepare_target(self) -> None:
        if self.guarded:
            raise ConfigurationError(
                "--install-pipeline guards an index followed in place: following into a "
                "copy reads every write of the source, no guard needed"
            )
        self._prepare_copy()

    def _work(self, cycle: FollowCycle) -> None:
        self._copy_changes(cycle)
        self._retry_copies(cycle)
        self._mirror_deletes(cycle)

    def _prepare_copy(self) -> None:
        assert self.into is not None
        backend, embedder = self.backend, self.embedder
        plan = plan_copy(backend.operations, backend.index_name, self.into, None)
        state = saved_state(backend.operations, self.into) if plan.copy is not None else None
        if plan.copy is not None and self.feed.resume(state, plan.source.uuid):
            check_before_backfill(backend, self.text_field, embedder.dims, embedder.name, plan)
            prepare_copy(backend, plan, self.into, self.transform)
            require_vector_field(backend, self.into, embedder.dims, embedder.name)
            self.say(f"resuming the copy of {backend.index_name!r} where it stopped")
            self.snapshot = self._take()
            self.copy_uuid = self._copy_uuid()
            return
        # A whole copy first; the feed then starts from the checkpoints read before it, so
        # nothing written while it ran is missed.
        checkpoints = backend.operations.shard_checkpoints(backend.index_name)
        started = time.time()
        copied = backfill(
            backend, embedder, self.text_field, into=self.into, batch_size=self.batch_size
        )
        self.report.add_counts(copied)
        self.report.encode_seconds += copied.encode_seconds
        for doc_id, reason in copied.failed.items():
            self.failing[doc_id] = Retry(1, time.monotonic() + 1.0, reason)
            self.report.failed[doc_id] = reason
        self.feed.start_over(plan.source.uuid)
        self.feed.cursors = dict(checkpoints)
        self.feed.verified_through, self.feed.pass_started = started, None
        self.snapshot = self._take()
        self.copy_uuid = self._copy_uuid()
        self._save_state(force=True)
        self.say(f"copied {backend.index_name!r} into {self.into!r}: {copied.summary()}")

    # -- into a copy ---------------------------------------------------------------------

    def _copy_changes(self, cycle: FollowCycle) -> None:
        if self.feed.caught_up:
            self.feed.look()
        for page in self.feed.pages():
            known = self.snapshot
            if known is not None and any(h.get("_index") != known.name for h in page.hits):
                self._next_check = 0.0  # another index answers by the source's name: check
                return
            new = _new_fields(page.hits, known) - self.unmapped if known is not None else set()
            if known is not None and new:
                # Mapped in the copy as the source maps them before a document carries them
                # there: written first, the copy would map them by guess (a keyword as text),
                # and the source's mapping could then never be taken.
                self._next_check = 0.0
                self._check()
                if self.snapshot is None or self.snapshot.uuid != known.uuid:
                    return  # another index now: the feed starts over
                # Fields the source keeps unmapped (`dynamic: false`): not asked about again.
                self.unmapped |= new - set(self.snapshot.properties)
            for hits in batched(page.hits, self.batch_size):
                self._copy(list(hits), cycle)
            self.feed.done(page)
            if self.on_batch is not None:
                self.on_batch(len(page.hits))
            if self.stop.is_set():
                break

    def _copy(self, hits: list[dict[str, Any]], cycle: FollowCycle) -> None:
        assert self.into is not None
        ids = [hit["_id"] for hit in hits]
        copies = self.operations.mget(self.into, ids, True, None, routing(hits))
        embedded: set[str] = set()
        found = WriteCounts()  # what reading found; what was written is counted below
        actions = copy_actions(hits, copies, self.transform, self.into, found, embedded)
        cycle.unchanged += found.unchanged
        cycle.no_text += found.no_text
        if actions and self._copy_uuid() != self.copy_uuid:
            self._next_check = 0.0
            raise EngineError(f"the copy {self.into!r} changed under the follower: checking it")
        refused = self._write(actions, self.into, cycle) if actions else {}
        for action in actions:
            if action["_id"] in refused:
                continue
            if action["_id"] in embedded:
                cycle.embedded += 1
            else:
                cycle.copied += 1

    def _retry_copies(self, cycle: FollowCycle) -> None:
        now = time.monotonic()
        due = [i for i, retry in self.failing.items() if retry.due <= now][: self.batch_size]
        if not due:
            return
        body = {"size": len(due), "query": {"ids": {"values": due}}}
        hits = self.operations.search(self.backend.index_name, body)["hits"]["hits"]
        for gone in set(due) - {hit["_id"] for hit in hits}:
            self._succeeded(gone)  # deleted from the source since: the delete pass follows
        if hits:
            self._copy(hits, cycle)

    def _mirror_deletes(self, cycle: FollowCycle) -> None:
        """Documents deleted from the source leave no trace in the feed: once the copy is
        current, a copy holding more documents than the source has some to delete."""
        assert self.into is not None
        now = time.monotonic()
        if not self.feed.caught_up or self.failing or now - self._deletes_checked < self.recheck:
            return
        self._deletes_checked = now
        self.operations.refresh(self.into)
        source = self.operations.count(self.backend.index_name)
        held = self.operations.count(self.into)
        if held > source:
            # Deletes go in bulk requests: each gets a bulk request's deadline.
            with longer_deadline(self.request_deadline * 2):
                gone = delete_gone(self.backend, self.into, self.batch_size * 16, self.report)
            cycle.deleted += gone

    # -- the source changing -------------------------------------------------------------

    def _copy_uuid(self) -> str:
        """The uuid of the index the copy's name names now ("" when there is none)."""
        if not self.operations.exists(self.into):
            return ""
        states = self.operations.describe(self.into)
        return states[0].uuid if len(states) == 1 and states[0].name == self.into else "?"

    def _target_intact(self, now: Snapshot) -> bool:
        uuid = self._copy_uuid()
        if uuid == self.copy_uuid:
            return True
        if uuid:
            self.say(f"the copy {self.into!r} was replaced: checking it is still itlr's copy")
        else:
            self.say(f"the copy {self.into!r} is gone: copying {now.name!r} again")
        self.feed.start_over(now.uuid)
        self._prepare_copy()  # refuses, in one line, an index that is not itlr's copy
        return False

    def _wanted(self) -> dict[str, dict[str, Any]]:
        return {}  # the source holds none of itlr's fields

    def _replaced(self, found: Changes) -> None:
        backend, embedder = self.backend, self.embedder
        plan = plan_copy(backend.operations, backend.index_name, self.into, None)
        check_before_backfill(backend, self.text_field, embedder.dims, embedder.name, plan)
        prepare_copy(backend, plan, self.into, self.transform)
        self._deletes_checked = 0.0
        self.say(f"{found.replaced}: copying it from the start")

    def _handle(self, found: Changes, now: Snapshot) -> None:
        super()._handle(found, now)
        if found.remapped:
            fields = {name: now.properties[name] for name in found.remapped}
            try:
                self.operations.put_mapping(self.into, fields)
            except EngineError as refused:
                raise IndexStateError(
                    f"{now.name!r} now maps {', '.join(found.remapped)} in a way the copy "
                    f"{self.into!r} cannot take ({refused}): the follower stops; delete the copy "
                    "and follow again to copy the source anew"
                ) from None
            self.say(f"{now.name!r} maps {', '.join(found.remapped)} anew: mapped in the copy too")


def _new_fields(hits: list[dict[str, Any]], known: Snapshot) -> set[str]:
    """The top-level fields of the documents read that the source's mapping, as last seen,
    did not map."""
    return {
        name for hit in hits for name in hit.get("_source") or {} if name not in known.properties
    }
