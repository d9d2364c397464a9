"""Ingestion into the embedded engine with the real model: resumption and the write pipeline."""

from __future__ import annotations

import pytest

from itlr.documents import Document
from itlr.engines.embedded import EmbeddedBackend
from itlr.errors import IndexStateError
from itlr.ingest import ingest

TEXTS = [
    "Vitamin D supports the immune system.",
    "Calcium and vitamin D keep bones strong.",
    "Electric cars need charging stations.",
    "Espresso is brewed under pressure.",
    "Roman legions built roads across Europe.",
]


@pytest.fixture()
def index(tmp_path, embedder) -> EmbeddedBackend:
    return EmbeddedBackend.create(tmp_path / "idx", embedder.name, embedder.dims)


def documents(count: int, prefix: str = "d") -> list[Document]:
    return [Document(f"{prefix}{i}", TEXTS[i % len(TEXTS)], {}) for i in range(count)]


def test_every_document_is_added_across_many_small_batches(index, embedder) -> None:
    report = ingest(documents(11), index, embedder, batch_size=2)
    assert (report.added, report.skipped, report.failed) == (11, 0, {})
    assert index.count() == 11
    assert report.encode_seconds > 0 and report.index_seconds > 0


def test_a_rerun_adds_only_what_is_missing(index, embedder) -> None:
    ingest(documents(4), index, embedder, batch_size=3)
    again = ingest(documents(7), index, embedder, batch_size=3)
    assert (again.added, again.skipped) == (3, 4)
    assert index.count() == 7


def test_an_id_repeated_in_the_next_batch_counts_once_while_its_first_copy_is_written(
    index, embedder
) -> None:
    repeated = [*documents(2), *documents(2)]
    report = ingest(repeated, index, embedder, batch_size=2)
    assert (report.added, report.skipped) == (2, 2)
    assert index.count() == 2


def test_an_engine_error_while_writing_reaches_the_caller(tmp_path, embedder) -> None:
    # An index for another model's dimensions refuses every batch the real model makes.
    narrow = EmbeddedBackend.create(tmp_path / "narrow", "tiny-model", 8)
    with pytest.raises(IndexStateError, match="wants"):
        ingest(documents(5), narrow, embedder, batch_size=2)
