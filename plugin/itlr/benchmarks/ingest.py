"""Ingestion throughput and where its time goes: the encoder or the engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from itlr.embed import Embedder
from itlr.engines import Backend
from itlr.ingest import ingest
from itlr.records import Document


@dataclass(frozen=True)
class IngestMeasurement:
    engine: str
    documents: int
    seconds: float
    encode_seconds: float
    index_seconds: float

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds

    @property
    def engine_share(self) -> float:
        """Share of wall time not spent encoding: reading, batching and the engine's writes."""
        return 1.0 - self.encode_seconds / self.seconds


def measure_ingest(
    engine: str,
    backend: Backend,
    embedder: Embedder,
    documents: list[Document],
    batch_size: int = 64,
) -> IngestMeasurement:
    started = time.perf_counter()
    report = ingest(documents, backend, embedder, batch_size=batch_size)
    if hasattr(backend, "refresh"):
        backend.refresh()
    seconds = time.perf_counter() - started
    return IngestMeasurement(
        engine, report.added, seconds, report.encode_seconds, report.index_seconds
    )


@dataclass(frozen=True)
class EncodeMeasurement:
    terms: int
    batched_ms: float
    one_by_one_ms: float
    question_ms: float


def measure_term_encoding(
    embedder: Embedder, terms: list[str], question: str, repeats: int = 20
) -> EncodeMeasurement:
    """T terms in one batch vs one call per term vs encoding the original question once."""

    def median_ms(call: Callable[[], object]) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        samples.sort()
        return samples[len(samples) // 2]

    embedder.encode(terms)  # warm-up
    return EncodeMeasurement(
        terms=len(terms),
        batched_ms=median_ms(lambda: embedder.encode(terms)),
        one_by_one_ms=median_ms(lambda: [embedder.encode([t]) for t in terms]),
        question_ms=median_ms(lambda: embedder.encode([question])),
    )
