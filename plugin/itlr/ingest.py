"""Documents -> embeddings -> an engine, in batches, resumable."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from itlr.documents import Document
from itlr.embed import Embedder
from itlr.engines import Backend


class ResumableBackend(Backend, Protocol):
    def existing_ids(self, ids: list[str]) -> set[str]: ...


@dataclass
class IngestReport:
    added: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    encode_seconds: float = 0.0
    index_seconds: float = 0.0


def batched(items: Iterable[Document], size: int) -> Iterator[list[Document]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def ingest(
    documents: Iterable[Document],
    backend: ResumableBackend,
    embedder: Embedder,
    batch_size: int = 64,
    resume: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Embed and store documents. With resume, ids already in the index are skipped, so a re-run
    after a crash adds only what is missing."""
    import time

    report = IngestReport()
    for batch in batched(documents, batch_size):
        if resume:
            present = backend.existing_ids([d.id for d in batch])
            todo = [d for d in batch if d.id not in present]
            report.skipped += len(batch) - len(todo)
        else:
            todo = batch
        if todo:
            started = time.perf_counter()
            vectors = embedder.encode([d.text for d in todo])
            encoded = time.perf_counter()
            failures = backend.add(
                [d.id for d in todo], [d.text for d in todo], vectors, [d.fields for d in todo]
            )
            report.index_seconds += time.perf_counter() - encoded
            report.encode_seconds += encoded - started
            failures = failures or {}
            report.failed.update(failures)
            report.added += len(todo) - len(failures)
        if on_batch:
            on_batch(len(batch))
    return report
