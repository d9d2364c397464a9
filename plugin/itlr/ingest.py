"""Documents -> embeddings -> an engine, in batches, resumable."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

import numpy as np

from itlr.documents import Document
from itlr.engines import Backend


class TextEncoder(Protocol):
    """What ingestion needs from a model: texts in, unit vectors out (itlr.embed.Embedder)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class IngestReport:
    added: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    encode_seconds: float = 0.0
    index_seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "added": self.added,
            "skipped": self.skipped,
            "failed": dict(self.failed),
            "encode_seconds": self.encode_seconds,
            "index_seconds": self.index_seconds,
        }


def writer_session(backend: Backend) -> contextlib.AbstractContextManager[object]:
    """Be the backend's only writer for a whole run, if it has writers to exclude.

    The embedded engine allows one writer at a time: holding its lock for the run refuses a
    second ingestion up front instead of interleaving its batches with this one. Clusters
    handle concurrent writers themselves.
    """
    writing = getattr(backend, "writing", None)
    return writing() if writing is not None else contextlib.nullcontext()


def batched(items: Iterable[Document], size: int) -> Iterator[list[Document]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def ingest(
    documents: Iterable[Document],
    backend: Backend,
    embedder: TextEncoder,
    batch_size: int = 64,
    resume: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Embed and store documents. With resume, ids already in the index are skipped, so a re-run
    after a crash adds only what is missing.

    Ids should be unique: `itlr.documents.read_documents` gives one document per id (the last
    copy in the file). An id repeated within one run counts as already present and is skipped.

    The engine writes one batch while the encoder works on the next, so that a cluster's bulk
    round trips hide behind encoding instead of adding to it. At most one batch is in flight;
    an engine error surfaces at the latest when the next batch is handed over.
    """
    report = IngestReport()
    with (
        writer_session(backend),
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="itlr-ingest") as writer,
    ):
        pending: Future[None] | None = None
        in_flight: set[str] = set()

        def write(todo: list[Document], vectors: np.ndarray) -> None:
            started = time.perf_counter()
            failures = backend.add(
                [d.id for d in todo], [d.text for d in todo], vectors, [d.fields for d in todo]
            )
            report.index_seconds += time.perf_counter() - started
            failures = failures or {}
            report.failed.update(failures)
            report.added += len(todo) - len(failures)

        for batch in batched(documents, batch_size):
            if resume:
                # The batch being written counts as present: its ids may not be visible yet.
                present = backend.existing_ids([d.id for d in batch]) | in_flight
                todo = [d for d in batch if d.id not in present]
                report.skipped += len(batch) - len(todo)
            else:
                todo = batch
            if todo:
                started = time.perf_counter()
                vectors = embedder.encode([d.text for d in todo])
                report.encode_seconds += time.perf_counter() - started
                if pending is not None:
                    pending.result()
                pending = writer.submit(write, todo, vectors)
                in_flight = {d.id for d in todo}
            if on_batch:
                on_batch(len(batch))
        if pending is not None:
            pending.result()
    return report
