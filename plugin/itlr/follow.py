"""Vectors that follow the index: `itlr backfill --follow` (`Index.follow(...)`, through
itlr.follow_run), in place or, `--into`, into itlr's copy of the index (itlr.into).

In place, after the back-fill's preparation, the follower asks the index, in a loop, for the
documents that have a text but no `itlr_hash` or no vector (one search per batch, never a scan
of the index), embeds them (itlr.transform) and writes vector, hash and token counts with
`_bulk` partial updates that name the `_seq_no` / `_primary_term` the follower read: a document
rewritten meanwhile is left for the next batch, never given the vector of its old text.
Written documents gain their hash and drop out of the query, so a run killed at any point
resumes with what is still missing and nothing whose hash is current is embedded again.

A document whose text changes keeps a stale hash when the writer carries the old one along (a
read-modify-write), when a partial `_update` leaves it, or when a `_bulk` `update` runs no
pipeline. Two things catch those. The hash guard (itlr.hash_guard, `--install-pipeline`) moves
`itlr_hash` aside on every write that runs pipelines; the follower then compares the old hash
with the current text's: equal, only the hash is put back; different, it embeds again. And the
hash sweep reads the index in `_seq_no` order (itlr.change_feed), paced at `verify_rate` documents
a second: a first pass over every document, then every write as it comes; a stored hash that
is not of the current text is moved aside the same way, so the document is embedded again and,
until it is, counted by coverage. How far the sweep has verified is kept in the index's
`_meta.itlr_follow` (coverage and `/healthz` report it).

Into a copy, the same change feed reads every write of the source and copies the document
(re-embedded only when its text changed); documents deleted from the source are deleted from
the copy when the copy holds more documents than the source.

Nothing is given up silently: a write the engine refuses for another reason than a conflict
(known by status and type, itlr.engines.operations.Refusal) is retried with a back-off and
counted in the report and in `_meta.itlr_follow.failing`, which coverage reads. The index is
checked again every few seconds (itlr.follow_watch): recreated or an alias moved, it is
prepared again (checked, mapped, guarded) and read from the start; a change the follower
cannot handle stops it with one line. Every cluster request has an overall deadline
(itlr.engines.deadline, as the service's).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from itlr.backfill import (
    conditional,
    prepare_guarded,
    require_vector_field,
)
from itlr.change_feed import ChangeFeed, save_state, saved_state
from itlr.embed import Embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.deadline import longer_deadline, set_deadline
from itlr.engines.foreign import itlr_fields
from itlr.engines.operations import ClusterOperations, Refusal
from itlr.errors import EngineError, IndexStateError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.follow_cycle import FollowCycle, Retry, pending_body
from itlr.follow_watch import RECHECK_SECONDS, Changes, Snapshot, changes
from itlr.hash_guard import PIPELINE_ID, install_hash_guard, stored_guard
from itlr.option_groups import BackfillOptions
from itlr.transform import DocumentTransform, in_place_update
from itlr.write_report import WriteReport

__all__ = ["FollowCycle", "Follower", "Retry", "pending_body"]

# Back-off after a refused or failed request (a 429, a node restarting), doubling up to this.
MAX_BACKOFF = 30.0
# A document the engine refused is tried again after a back-off doubling up to this.
MAX_RETRY_BACKOFF = 300.0
# At most this many ids are left out of one search (failing ones waiting, empty texts).
MAX_SKIPPED_IDS = 10_000
# The overall deadline of one cluster request (a bulk request gets twice this).
REQUEST_DEADLINE = 60.0
# Documents per page of the hash sweep.
SWEEP_PAGE = 1000
# Seconds between two lines of an idle follower.
HEARTBEAT_SECONDS = 60.0
# Seconds between two records of the follower's state in `_meta` (sooner when the number of
# failing documents changes).
STATE_SECONDS = 60.0


class Follower:
    """Keeps one index's vectors (or `into`, itlr's copy of it) current until `stop` is set
    (SIGINT / SIGTERM in the CLI): the batch under way is finished first."""

    def __init__(
        self,
        backend: ClusterBackend,
        embedder: Embedder,
        text_field: str,
        options: BackfillOptions | None = None,
        *,
        stop: threading.Event | None = None,
        on_cycle: Callable[[FollowCycle], None] | None = None,
        on_batch: Callable[[int], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_line: Callable[[str], None] | None = None,
        request_deadline: float = REQUEST_DEADLINE,
        heartbeat: float = HEARTBEAT_SECONDS,
        recheck: float = RECHECK_SECONDS,
    ) -> None:
        options = options or BackfillOptions()
        self.backend = backend
        self.exact_only = options.exact_only
        self.embedder = embedder
        self.text_field = text_field
        self.into = options.into
        self.target = options.into or backend.index_name
        self.batch_size = options.batch_size
        self.interval = options.interval
        self.stop = stop or threading.Event()
        self.on_cycle = on_cycle
        self.on_batch = on_batch
        self.on_error = on_error
        self.on_line = on_line
        self.verify_rate = options.verify_rate
        self.heartbeat = heartbeat
        self.recheck = recheck
        self.transform = DocumentTransform(embedder, text_field, backend.layout.vector_field)
        # One overall deadline for each request of the follower's client, however slowly its
        # answer trickles in (itlr.engines.deadline); a bulk request gets twice this.
        self.request_deadline = request_deadline
        if hasattr(backend.client, "transport"):
            set_deadline(backend.client, request_deadline)
        source: list[str] | bool = True if self.into else [text_field, HASH_FIELD]
        # The sweep reads a text and a hash per document: large pages; a copy reads whole ones.
        page = self.batch_size * 4 if self.into else SWEEP_PAGE
        self.feed = ChangeFeed(backend.operations, backend.index_name, source, page)
        self.report = WriteReport("follow", self.target)
        self.failing: dict[str, Retry] = {}
        self.empty: set[str] = set()
        self.guarded = False
        self.snapshot: Snapshot | None = None
        self._tokens = 0.0
        self._tokens_at = time.monotonic()
        self._next_check = 0.0
        self._saved_at = 0.0
        self._saved_failing = 0
        self._last_line = time.monotonic()
        self._deletes_checked = 0.0

    @property
    def operations(self) -> ClusterOperations:
        return self.backend.operations

    def say(self, line: str) -> None:
        self._last_line = time.monotonic()
        if self.on_line is not None:
            self.on_line(f"{time.strftime('%H:%M:%S')} {line}")

    # -- start ---------------------------------------------------------------------------

    def prepare(self, install_pipeline: bool = False) -> None:
        """The back-fill's checks and mapping, and the pipeline when asked for; into a copy,
        the copy made current first (or resumed from where a previous follower stopped)."""
        self.guarded = install_pipeline
        self._prepare_target()
        if self.snapshot is None:
            self.snapshot = self._take()
        held = self.backend.operations.count(self.target)
        where = f"into {self.into!r}" if self.into else "in place"
        sweep = (
            f"; hash sweep at {self.verify_rate:g} documents/s"
            if self.verify_rate > 0 and not self.into
            else ""
        )
        self.say(
            f"following {self.backend.index_name!r} {where} ({held} documents): text "
            f"{self.text_field!r}, vector {self.transform.vector_field!r}, looking every "
            f"{self.interval:g}s{sweep}"
        )

    def _prepare_target(self) -> None:
        """In place: the back-fill's checks and mapping, the guard when asked for, and the
        sweep resumed from the state the index records."""
        prepare_guarded(self.backend, self.text_field, self.embedder, self.guarded, self.exact_only)
        require_vector_field(self.backend, self.target, self.embedder.dims, self.embedder.name)
        self.snapshot = self._take()
        if self.verify_rate > 0:
            self.feed.resume(saved_state(self.operations, self.target), self.snapshot.uuid)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> WriteReport:
        """Cycles until `stop`; a failed request is retried after a back-off (one line on
        `on_error`), a change the follower cannot handle raises IndexStateError."""
        started = time.perf_counter()
        backoff = 0.0
        try:
            while not self.stop.is_set():
                try:
                    cycle = self.cycle()
                except (EngineError, IndexStateError) as failed:
                    if isinstance(failed, IndexStateError) and not self._index_missing():
                        raise
                    # A 429 the client gave up on, a node restarting, a request past its
                    # deadline, the index deleted (maybe to be created again): wait, look again.
                    backoff = min(MAX_BACKOFF, backoff * 2 or 1.0)
                    if self.on_error is not None:
                        self.on_error(f"{failed} (trying again in {backoff:.0f}s)")
                    self._next_check = 0.0  # and check the index before writing again
                    self.stop.wait(backoff)
                    continue
                backoff = 0.0
                if cycle.busy:
                    self.report.busy_seconds += cycle.seconds
                    if self.on_cycle is not None:
                        self.on_cycle(cycle)
                else:
                    if time.monotonic() - self._last_line >= self.heartbeat:
                        self.say(self.heartbeat_line())
                    self.stop.wait(self.interval)
        finally:
            self.report.seconds = time.perf_counter() - started
            self.report.encode_seconds += self.transform.encode_seconds
            self.transform.encode_seconds = 0.0
            # A cluster gone keeps the last record; this one is lost with it.
            with contextlib.suppress(EngineError, IndexStateError):
                self._save_state(force=True)
        return self.report

    def _index_missing(self) -> bool:
        try:
            return not all(
                self.operations.exists(n) for n in {self.backend.index_name, self.target}
            )
        except EngineError:
            return True

    def heartbeat_line(self) -> str:
        report = self.report
        if self.feed.verified_through is not None:
            verified = time.strftime("%H:%M:%S", time.localtime(self.feed.verified_through))
            sweep = f"every write before {verified} verified"
        elif self.feed.targets:
            sweep = f"first pass, {self.feed.behind} operations to go"
        else:
            sweep = "no sweep"
        return (
            f"{self.target}: idle; so far {report.embedded} embedded, {report.restored} hash "
            f"restored, {report.copied} copied, {report.deleted} deleted, {len(self.failing)} "
            f"failing (retried); {sweep}"
        )

    def cycle(self) -> FollowCycle:
        """One look: check the index, then read and write until nothing is left (or stop)."""
        self.report.cycles += 1
        cycle = FollowCycle(self.report.cycles)
        started = time.perf_counter()
        try:
            self._check()
            self._work(cycle)
            self._save_state()
        finally:
            # Counted once, in the cycle; the run's report adds what it did, even a cut look's.
            self.report.add_counts(cycle)
        cycle.seconds = time.perf_counter() - started
        return cycle

    def _work(self, cycle: FollowCycle) -> None:
        """In place: the hash sweep's share, then batches of pending documents."""
        if self.verify_rate > 0:
            self._verify(cycle)
        while not self.stop.is_set():
            found = self._batch(cycle)
            if found < self.batch_size:
                break

    # -- in place ------------------------------------------------------------------------

    def _batch(self, cycle: FollowCycle) -> int:
        backend, index = self.backend, self.backend.index_name
        now = time.monotonic()
        waiting = [i for i, retry in self.failing.items() if retry.due > now]
        skip = [*waiting, *self.empty][:MAX_SKIPPED_IDS]
        body = pending_body(backend.layout.vector_field, self.text_field, self.batch_size, skip)
        self.operations.refresh(index)
        hits = self.operations.search(index, body)["hits"]["hits"]
        if not hits:
            return 0
        actions: list[dict[str, Any]] = []
        todo: list[tuple[dict[str, Any], str]] = []
        restored: set[str] = set()
        for hit in hits:
            source = hit.get("_source") or {}
            text = self.transform.text(source)
            if text is None:
                # An empty text: nothing to embed, and asked for no more.
                if len(self.empty) < MAX_SKIPPED_IDS:
                    self.empty.add(hit["_id"])
                continue
            digest = self.transform.digest(text)
            if source.get(PREVIOUS_HASH_FIELD) == digest and backend.layout.vector_field in source:
                restore = in_place_update(hit["_index"], hit, {HASH_FIELD: digest})
                actions.append(conditional(restore, hit))
                restored.add(hit["_id"])
            else:
                todo.append((hit, text))
        new = self.transform.embed([text for _, text in todo])
        for (hit, _), fields in zip(todo, new, strict=True):
            actions.append(conditional(in_place_update(hit["_index"], hit, fields), hit))
        if actions and not self._unchanged(hits):
            return 0  # read from an index the follower has not prepared: checked first
        refused = self._write(actions, index, cycle) if actions else {}
        written = {a["_id"] for a in actions} - set(refused)
        done_restored = len(written & restored)
        cycle.restored += done_restored
        cycle.embedded += len(written) - done_restored
        if self.on_batch is not None:
            self.on_batch(len(hits))
        return len(hits)

    def _verify(self, cycle: FollowCycle) -> None:
        """The hash sweep, paced: documents whose stored hash is not of their text get it
        moved aside, so the batches after this embed them again (and coverage counts them
        until then)."""
        now = time.monotonic()
        burst = max(self.verify_rate * 2, self.feed.page_size)
        self._tokens = min(burst, self._tokens + (now - self._tokens_at) * self.verify_rate)
        self._tokens_at = now
        if self.feed.caught_up:
            self.feed.look()
        for page in self.feed.pages(int(self._tokens)):
            self._tokens -= max(1, len(page.hits))
            cycle.verified += len(page.hits)
            marks = []
            for hit in page.hits:
                source = hit.get("_source") or {}
                text, stored = self.transform.text(source), source.get(HASH_FIELD)
                if text is not None and stored and stored != self.transform.digest(text):
                    doc = {HASH_FIELD: None, PREVIOUS_HASH_FIELD: stored}
                    update = {"_op_type": "update", "_index": hit["_index"], "_id": hit["_id"]}
                    if hit.get("_routing") is not None:
                        update["routing"] = hit["_routing"]
                    marks.append(conditional({**update, "doc": doc}, hit))
            if marks and not self._unchanged(page.hits):
                return  # the page is read again once the index is checked
            refused = self._write(marks, self.target, cycle, retry=False) if marks else {}
            lost = {i: r for i, r in refused.items() if not (r.conflict or r.missing)}
            if lost:
                # Not moved past: the page is read again after the back-off.
                doc_id, why = next(iter(lost.items()))
                raise EngineError(f"could not mark the stale hash of {doc_id!r}: {why.reason}")
            cycle.stale += len(marks) - len(refused)
            self.feed.done(page)
            if self.stop.is_set():
                break

    # -- writes and their refusals -------------------------------------------------------

    def _write(
        self, actions: list[dict[str, Any]], index: str, cycle: FollowCycle, retry: bool = True
    ) -> dict[str, Refusal]:
        """Send the actions; a conflict or a missing document is "changed meanwhile" (read
        again later), any other refusal is retried after a back-off and counted."""
        with longer_deadline(self.request_deadline * 2):
            refused = self.operations.bulk_refusals(actions, index, self.batch_size)
        self.backend.remembered.written()
        self.backend.coverage_cache.forget()
        routed = {a["_id"]: a.get("routing") for a in actions}
        for doc_id, refusal in refused.items():
            if refusal.conflict or refusal.missing:
                cycle.changed_meanwhile += 1
            elif retry:
                cycle.failed += 1
                self._failed(doc_id, refusal.reason, routed.get(doc_id))
                self._next_check = 0.0  # a refused write: has the mapping changed?
        for doc_id in set(routed) - set(refused):
            self._succeeded(doc_id)
        return refused

    def _failed(self, doc_id: str, reason: str, routing_value: str | None) -> None:
        attempts = self.failing[doc_id].attempts + 1 if doc_id in self.failing else 1
        delay = min(MAX_RETRY_BACKOFF, 2.0 ** (attempts - 1))
        self.failing[doc_id] = Retry(attempts, time.monotonic() + delay, reason, routing_value)
        self.report.failed[doc_id] = reason

    def _succeeded(self, doc_id: str) -> None:
        if self.failing.pop(doc_id, None) is not None:
            self.report.failed.pop(doc_id, None)

    # -- the index changing under the follower -------------------------------------------

    def _take(self) -> Snapshot:
        name = self.backend.index_name
        return Snapshot.of(name, self.operations.describe(name))

    def _unchanged(self, hits: list[dict[str, Any]]) -> bool:
        """Right before a write: the hits come from the index the follower checked and
        prepared, and it is still that index (not recreated, its alias not moved); else the
        next check runs at once and nothing is written (no vector into a field mapped by
        guess)."""
        known = self.snapshot
        if known is not None and all(hit.get("_index") == known.name for hit in hits):
            now = self._take()
            if (now.name, now.uuid) == (known.name, known.uuid):
                return True
        self._next_check = 0.0
        return False

    def _check(self) -> None:
        """Every `recheck` seconds (and after a refused write): has the index been recreated,
        an alias moved, its mapping or guard changed? Handled, said in one line, or raised."""
        if time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + self.recheck
        before = self.snapshot
        now = self._take()
        if self.guarded or now.final_pipeline == PIPELINE_ID:
            # itlr's guard, installed now or before: deleted, it is stored again; emptied or
            # rewritten, it would let rewritten texts through unmarked, so the follower stops.
            guard = stored_guard(self.backend.url, restore=True)
            if self.operations.run(guard, self.target).restored:
                self.say(f"the hash guard pipeline {PIPELINE_ID!r} was deleted: stored again")
        if not self._target_intact(now):
            return
        if before is None:
            self.snapshot = now
            return
        found = changes(before, now, self.backend.index_name, self._wanted(), self.guarded)
        if found.any:
            self._handle(found, now)
            now = self._take()
        self.snapshot = now

    def _target_intact(self, now: Snapshot) -> bool:
        """Whether the index written is still there to write (in place: the one checked)."""
        return True

    def _wanted(self) -> dict[str, dict[str, Any]]:
        """The fields the follower writes, as the snapshot's mapping must have them."""
        return {self.transform.vector_field: {"type": self.backend.vector_type}, **itlr_fields()}

    def _replaced(self, found: Changes) -> None:
        prepare_guarded(self.backend, self.text_field, self.embedder, self.guarded, self.exact_only)
        self.say(f"{found.replaced}: checked, mapped and guarded again; reading it all")

    def _handle(self, found: Changes, now: Snapshot) -> None:
        backend, embedder = self.backend, self.embedder
        if found.replaced:
            self.failing.clear()
            self.report.failed.clear()
            self.empty.clear()
            self.feed.start_over(now.uuid)
            self._replaced(found)
            return
        if found.unmapped:
            prepare_guarded(backend, self.text_field, embedder, False, self.exact_only)
            self.say(f"{found.unmapped}: mapped again")
        if found.guard_gone:
            if found.guard_replaced_by is not None:
                raise IndexStateError(
                    f"index {now.name!r} now has the final pipeline {found.guard_replaced_by!r} "
                    f"instead of itlr's hash guard: the follower stops (add the guard's processor "
                    "to that pipeline, docs/follow.md, and start it again)"
                )
            install_hash_guard(backend)
            self.say(f"the hash guard was removed from {now.name!r}: made its final pipeline again")

    # -- state -------------------------------------------------------------------------

    def _save_state(self, force: bool = False) -> None:
        """Record the feed's cursors, how far it verified and how many documents are failing
        in the written index's `_meta` (coverage reads them): every STATE_SECONDS, sooner when
        the failing count changed."""
        now = time.monotonic()
        failing = len(self.failing)
        changed = failing != self._saved_failing and now - self._saved_at >= 5.0
        if not force and not changed and now - self._saved_at < STATE_SECONDS:
            return
        name = self.snapshot.name if self.snapshot else self.backend.index_name
        state = self.feed.state(failing=failing, source=name, text_field=self.text_field)
        save_state(self.operations, self.target, state)
        self._saved_at, self._saved_failing = now, failing
