"""The embedded engine: persistence, updates, search plans, filters."""

from __future__ import annotations

import numpy as np
import pytest

import itlr
from itlr import IndexStateError
from itlr.engines.embedded import EmbeddedIndex
from itlr.search import SearchOptions

DIMS = 16


def unit(rows: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def index(tmp_path) -> EmbeddedIndex:
    created = EmbeddedIndex.create(tmp_path / "idx", "test-model", DIMS)
    vectors = unit(200)
    created.add(
        [f"d{i}" for i in range(200)],
        [f"text {i}" for i in range(200)],
        vectors,
        [{"parity": i % 2} for i in range(200)],
    )
    return created


def test_documents_survive_reopening(index: EmbeddedIndex) -> None:
    reopened = EmbeddedIndex.open(index.path)
    assert reopened.count() == 200
    assert reopened.get("d7") == {"id": "d7", "text": "text 7", "fields": {"parity": 1}}
    np.testing.assert_allclose(reopened.vector("d7"), index.vector("d7"))


def test_same_id_replaces_and_delete_removes(index: EmbeddedIndex) -> None:
    index.add(["d1"], ["new text"], unit(1, seed=9))
    assert index.delete(["d2", "missing"]) == 1
    reopened = EmbeddedIndex.open(index.path)
    assert reopened.count() == 199
    assert reopened.get("d1")["text"] == "new text"
    assert "d2" not in reopened
    np.testing.assert_allclose(reopened.vector("d1"), unit(1, seed=9)[0], rtol=1e-6)


def test_compact_drops_dead_rows_and_keeps_live_ones(index: EmbeddedIndex) -> None:
    index.add(["d1"], ["new text"], unit(1, seed=9))
    index.delete(["d3"])
    index.compact()
    reopened = EmbeddedIndex.open(index.path)
    assert reopened.count() == 199
    assert (index.path / "vectors.f32").stat().st_size == 199 * DIMS * 4
    assert reopened.get("d1")["text"] == "new text"


def test_a_torn_write_keeps_the_common_prefix(index: EmbeddedIndex) -> None:
    with open(index.path / "vectors.f32", "ab") as handle:
        handle.write(b"\0" * 10)
    assert EmbeddedIndex.open(index.path).count() == 200


def test_manifest_records_model_dims_similarity_count(index: EmbeddedIndex) -> None:
    import json

    manifest = json.loads((index.path / "manifest.json").read_text())
    assert manifest | {"format": 1} == {
        "format": 1,
        "model": "test-model",
        "dims": DIMS,
        "similarity": "cosine",
        "count": 200,
    }


def test_exact_scores_are_the_program_over_clamped_cosines(index: EmbeddedIndex) -> None:
    query = itlr.parse("a AND NOT b OR c")
    terms = unit(3, seed=1)
    hits = index.search(query, terms, SearchOptions(k=200, mode="exact"))
    assert len(hits) == 200
    for hit in hits[:20]:
        cosines = np.clip(terms @ index.vector(hit.id), 0, 1)
        expected = max(0.0, cosines[0] * (1 - cosines[1]) + cosines[2])
        assert hit.score == pytest.approx(expected, rel=1e-5)
        assert hit.truths == pytest.approx(dict(zip("abc", cosines, strict=True)), rel=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_knn_plan_matches_exact_when_the_budget_covers_the_corpus(index: EmbeddedIndex) -> None:
    query = itlr.parse("(a OR b) AND NOT c")
    terms = unit(3, seed=2)
    exact = index.search(query, terms, SearchOptions(k=10, mode="exact"))
    knn = index.search(query, terms, SearchOptions(k=10, mode="knn", candidates=200))
    assert [h.id for h in knn] == [h.id for h in exact]


def test_knn_plan_only_rescores_candidates_of_positive_terms(index: EmbeddedIndex) -> None:
    query = itlr.parse("a AND NOT b")
    terms = unit(2, seed=3)
    hits = index.search(query, terms, SearchOptions(k=200, mode="knn", candidates=5))
    cosines = np.array([index.vector(f"d{i}") for i in range(200)]) @ terms[0]
    top5 = {f"d{i}" for i in np.argsort(-cosines)[:5]}
    assert {h.id for h in hits} == top5


def test_hard_filter_drops_documents_matching_a_root_not(index: EmbeddedIndex) -> None:
    query = itlr.parse("a AND NOT b")
    terms = unit(2, seed=4)
    hits = index.search(query, terms, SearchOptions(k=200, mode="exact", hard_filter=0.2))
    assert hits and all(h.truths["b"] < 0.2 for h in hits)
    assert len(hits) < 200


def test_hard_filter_leaves_not_under_or_fuzzy(index: EmbeddedIndex) -> None:
    query = itlr.parse("a OR NOT b")
    hits = index.search(query, unit(2, seed=5), SearchOptions(k=200, mode="exact", hard_filter=0.0))
    assert len(hits) == 200


def test_filters_restrict_hits(index: EmbeddedIndex) -> None:
    query = itlr.parse("a")
    options = SearchOptions(k=200, mode="exact", filter={"term": {"parity": 0}})
    hits = index.search(query, unit(1, seed=6), options)
    assert len(hits) == 100 and all(h.fields["parity"] == 0 for h in hits)
    options = SearchOptions(k=200, filter={"bool": {"must_not": [{"terms": {"id": ["d0", "d2"]}}]}})
    assert {"d0", "d2"}.isdisjoint(h.id for h in index.search(query, unit(1, seed=6), options))


def test_wrong_query_dimensions_are_refused_with_the_model_name(index: EmbeddedIndex) -> None:
    with pytest.raises(IndexStateError, match=r"\(1, 16\).*test-model"):
        index.search(itlr.parse("a"), np.ones((1, 8)), SearchOptions())


def test_missing_index_says_how_to_create_one(tmp_path) -> None:
    with pytest.raises(IndexStateError, match="itlr ingest"):
        EmbeddedIndex.open(tmp_path / "nothing")


def test_other_model_is_refused(index: EmbeddedIndex) -> None:
    with pytest.raises(IndexStateError, match=r"other-model|test-model"):
        EmbeddedIndex.open_or_create(index.path, "other-model", DIMS)
    with pytest.raises(IndexStateError, match="16-dim"):
        EmbeddedIndex.open_or_create(index.path, "test-model", 32)
