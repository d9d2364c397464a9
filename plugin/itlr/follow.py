"""Vectors that follow the index: `itlr backfill --follow` (`Index.backfill(..., follow=True)`).

After the in-place preparation of a back-fill, the follower asks the index, in a loop, for the
documents that have a text but no `itlr_hash` (one search per batch, never a scan of the
index), embeds them and writes vector, hash and token counts with `_bulk` partial updates that
name the `_seq_no` / `_primary_term` the follower read: a document rewritten meanwhile is left
for the next batch, never given the vector of its old text. Written documents gain their hash and
drop out of the query, so a run killed at any point resumes with what is still missing and
nothing whose hash is current is embedded again.

A document whose text changes keeps a stale hash when the writer carries the old one along (a
read-modify-write) or when a partial `_update` leaves it. For those itlr installs on request an
ingest pipeline (`final_pipeline` of the index) that moves `itlr_hash` to `itlr_hash_was` on
every write that runs pipelines; the follower then compares the old hash with the current
text's: equal, only the hash is put back (no encoder call); different, it embeds again. What
runs the pipeline on OpenSearch 3.6 (tests/existing_indexes/test_follow.py checks each): index and create
(REST and `_bulk`), `_update` (REST, partial `doc` or script), upserts that create a document,
`_update_by_query`. What does not: `_bulk` `update` actions on an existing document (itlr's own
writes are of that kind, which is why they keep their hash); a full `itlr backfill` run (a
scan) catches those.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itlr.backfill import cluster_backend, passage_embedder, prepare_guarded, text_of
from itlr.embed import Embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.factory import EngineSpec
from itlr.engines.integrity import SCRIPT_CHECK_SECONDS
from itlr.errors import EngineError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD, content_hash
from itlr.hash_guard import verify_hash_guard
from itlr.lexical import lexical_fields
from itlr.write_report import WriteReport

# Seconds between two looks at an index that had nothing to do.
FOLLOW_INTERVAL = 1.0
# Back-off after a refused or failed request (a 429, a node restarting), doubling up to this.
MAX_BACKOFF = 30.0
# Documents the engine refused are skipped by id (named in the report); at most this many.
MAX_SKIPPED_IDS = 10_000


@dataclass
class FollowCycle:
    """One look at the index: what it found and did."""

    number: int
    embedded: int = 0
    restored: int = 0
    changed_meanwhile: int = 0
    failed: int = 0
    seconds: float = 0.0

    @property
    def busy(self) -> bool:
        return bool(self.embedded or self.restored or self.changed_meanwhile or self.failed)

    def line(self, index_name: str) -> str:
        return (
            f"{time.strftime('%H:%M:%S')} {index_name}: {self.embedded} embedded, {self.restored} "
            f"hash restored (text unchanged), {self.changed_meanwhile} changed meanwhile "
            f"(next cycle), {self.failed} failed in {self.seconds:.1f}s"
        )


def pending_body(vector_field: str, text_field: str, size: int, skip: list[str]) -> dict[str, Any]:
    """The documents with a text and no hash: new ones, rewritten ones, and those whose hash
    the pipeline moved aside."""
    must_not: list[dict[str, Any]] = [{"exists": {"field": HASH_FIELD}}]
    if skip:
        must_not.append({"ids": {"values": skip}})
    return {
        "size": size,
        "seq_no_primary_term": True,
        "_source": [text_field, PREVIOUS_HASH_FIELD, vector_field],
        "query": {"bool": {"filter": [{"exists": {"field": text_field}}], "must_not": must_not}},
    }


class Follower:
    """Keeps one index's vectors current until `stop` is set (SIGINT / SIGTERM in the CLI):
    the batch under way is finished first."""

    def __init__(
        self,
        backend: ClusterBackend,
        embedder: Embedder,
        text_field: str,
        *,
        batch_size: int = 64,
        interval: float = FOLLOW_INTERVAL,
        stop: threading.Event | None = None,
        on_cycle: Callable[[FollowCycle], None] | None = None,
        on_batch: Callable[[int], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.text_field = text_field
        self.batch_size = batch_size
        self.interval = interval
        self.stop = stop or threading.Event()
        self.on_cycle = on_cycle
        self.on_batch = on_batch
        self.on_error = on_error
        self.report = WriteReport("follow", backend.index_name)
        self.empty: set[str] = set()

    def prepare(self, install_pipeline: bool) -> None:
        """The back-fill's checks and mapping, and the pipeline when asked for."""
        prepare_guarded(self.backend, self.text_field, self.embedder, install_pipeline)

    def run(self) -> WriteReport:
        started = time.perf_counter()
        backoff = 0.0
        checked = -math.inf
        while not self.stop.is_set():
            try:
                if time.monotonic() - checked >= SCRIPT_CHECK_SECONDS:
                    # itlr's pipeline, when the index uses it: put back if deleted; a foreign
                    # one stops the follower in one line (it would miss rewritten texts).
                    verify_hash_guard(self.backend)
                    checked = time.monotonic()
                cycle = self.cycle()
            except EngineError as failed:
                checked = -math.inf  # looked at again before the next cycle
                # A 429 the client gave up on, a node restarting: wait, then look again.
                backoff = min(MAX_BACKOFF, backoff * 2 or 1.0)
                if self.on_error is not None:
                    self.on_error(f"{failed} (trying again in {backoff:.0f}s)")
                self.stop.wait(backoff)
                continue
            backoff = 0.0
            if cycle.busy:
                self.report.busy_seconds += cycle.seconds
            if cycle.busy and self.on_cycle is not None:
                self.on_cycle(cycle)
            if not cycle.busy:
                self.stop.wait(self.interval)
        self.report.seconds = time.perf_counter() - started
        return self.report

    def cycle(self) -> FollowCycle:
        """Batches of pending documents until none is left (or a stop): one look."""
        self.report.cycles += 1
        cycle = FollowCycle(self.report.cycles)
        started = time.perf_counter()
        while not self.stop.is_set():
            found = self._batch(cycle)
            if found < self.batch_size:
                break
        cycle.seconds = time.perf_counter() - started
        return cycle

    def _batch(self, cycle: FollowCycle) -> int:
        backend = self.backend
        skip = [*self.report.failed, *self.empty][:MAX_SKIPPED_IDS]
        body = pending_body(backend.layout.vector_field, self.text_field, self.batch_size, skip)
        backend.operations.refresh(backend.index_name)
        hits = backend.operations.search(backend.index_name, body)["hits"]["hits"]
        if not hits:
            return 0
        actions: list[dict[str, Any]] = []
        todo: list[tuple[dict[str, Any], str, str]] = []
        restored: set[str] = set()
        for hit in hits:
            source = hit.get("_source") or {}
            text = text_of(source, self.text_field)
            if text is None:
                # An empty text: nothing to embed, and asked for no more.
                if len(self.empty) < MAX_SKIPPED_IDS:
                    self.empty.add(hit["_id"])
                continue
            digest = content_hash(text, self.embedder.name)
            if source.get(PREVIOUS_HASH_FIELD) == digest and backend.layout.vector_field in source:
                actions.append(self._update(hit, {HASH_FIELD: digest, PREVIOUS_HASH_FIELD: None}))
                restored.add(hit["_id"])
            else:
                todo.append((hit, text, digest))
        if todo:
            encode_start = time.perf_counter()
            vectors = self.embedder.encode([text for _, text, _ in todo])
            self.report.encode_seconds += time.perf_counter() - encode_start
            for (hit, text, digest), vector in zip(todo, vectors, strict=True):
                new = {
                    backend.layout.vector_field: vector.tolist(),
                    HASH_FIELD: digest,
                    PREVIOUS_HASH_FIELD: None,
                    **lexical_fields(text),
                }
                actions.append(self._update(hit, new))
        failures = backend.bulk(actions, chunk_size=self.batch_size) if actions else {}
        for doc_id, reason in failures.items():
            if "version_conflict" in reason or reason == "not found":
                cycle.changed_meanwhile += 1  # rewritten or deleted since read: next look
                continue
            cycle.failed += 1
            self.report.failed[doc_id] = reason
        written = {a["_id"] for a in actions} - set(failures)
        done_restored = len(written & restored)
        cycle.restored += done_restored
        cycle.embedded += len(written) - done_restored
        self.report.restored += done_restored
        self.report.embedded += len(written) - done_restored
        if self.on_batch is not None:
            self.on_batch(len(hits))
        return len(hits)

    def _update(self, hit: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
        return {
            "_op_type": "update",
            "_index": hit.get("_index", self.backend.index_name),
            "_id": hit["_id"],
            "if_seq_no": hit["_seq_no"],
            "if_primary_term": hit["_primary_term"],
            "doc": doc,
        }


def follow_spec(
    spec: EngineSpec,
    *,
    model: str | None = None,
    install_pipeline: bool = False,
    batch_size: int = 64,
    interval: float = FOLLOW_INTERVAL,
    stop: threading.Event | None = None,
    on_cycle: Callable[[FollowCycle], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    encoder: str | None = None,
    encoder_url: str | None = None,
    passage_prompt: str | None = None,
) -> WriteReport:
    """Follow the index an EngineSpec names until `stop` is set. The encoder options are
    back-fill's (itlr.backfill.backfill_spec): the follower must embed as the back-fill did."""
    embedder = passage_embedder(model, encoder, encoder_url, passage_prompt)
    follower = Follower(
        cluster_backend(spec, embedder),
        embedder,
        spec.layout.text_field,
        batch_size=batch_size,
        interval=interval,
        stop=stop,
        on_cycle=on_cycle,
        on_batch=on_batch,
        on_error=on_error,
    )
    follower.prepare(install_pipeline)
    return follower.run()
