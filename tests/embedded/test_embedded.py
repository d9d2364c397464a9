"""The embedded engine: persistence, updates, search plans, filters."""

from __future__ import annotations

import numpy as np
import pytest

import itlr
from itlr import IndexStateError
from itlr.engines.embedded import EmbeddedBackend
from itlr.options import SearchOptions
from itlr.scoring import DEFAULT_NOT_STRENGTH, TruthMap

DIMS = 16


def unit(rows: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def index(tmp_path) -> EmbeddedBackend:
    created = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    vectors = unit(200)
    created.add(
        [f"d{i}" for i in range(200)],
        [f"text {i}" for i in range(200)],
        vectors,
        [{"parity": i % 2} for i in range(200)],
    )
    return created


def test_documents_survive_reopening(index: EmbeddedBackend) -> None:
    reopened = EmbeddedBackend.open(index.path)
    assert reopened.count() == 200
    assert reopened.get("d7") == {"id": "d7", "text": "text 7", "fields": {"parity": 1}}
    np.testing.assert_allclose(reopened.vector("d7"), index.vector("d7"))


def test_same_id_replaces_and_delete_removes(index: EmbeddedBackend) -> None:
    index.add(["d1"], ["new text"], unit(1, seed=9))
    assert index.delete(["d2", "missing"]) == 1
    reopened = EmbeddedBackend.open(index.path)
    assert reopened.count() == 199
    assert reopened.get("d1")["text"] == "new text"
    assert "d2" not in reopened
    np.testing.assert_allclose(reopened.vector("d1"), unit(1, seed=9)[0], rtol=1e-6)


def test_compact_drops_dead_rows_and_keeps_live_ones(index: EmbeddedBackend) -> None:
    index.add(["d1"], ["new text"], unit(1, seed=9))
    index.delete(["d3"])
    index.compact()
    reopened = EmbeddedBackend.open(index.path)
    assert reopened.count() == 199
    assert reopened.vectors.shape == (199, DIMS)
    assert reopened.get("d1")["text"] == "new text"


def test_vector_bytes_past_the_commit_point_are_ignored_and_cut_by_the_next_writer(
    index: EmbeddedBackend,
) -> None:
    # What a writer killed after writing its vectors but before committing leaves behind.
    with open(index.path / "vectors.f32", "ab") as handle:
        handle.write(b"\0" * (3 * DIMS * 4 + 10))
    reopened = EmbeddedBackend.open(index.path)
    assert reopened.count() == 200 and reopened.vectors.shape == (200, DIMS)
    reopened.add(["new"], ["new text"], unit(1, seed=11))
    again = EmbeddedBackend.open(index.path)
    assert (index.path / "vectors.f32").stat().st_size == 201 * DIMS * 4
    np.testing.assert_allclose(again.vector("new"), unit(1, seed=11)[0], rtol=1e-6)
    np.testing.assert_allclose(again.vector("d199"), index.vector("d199"))


def test_manifest_records_model_dims_similarity_count(index: EmbeddedBackend) -> None:
    assert EmbeddedBackend.open(index.path).manifest() == {
        "format": 3,
        "model": "test-model",
        "dims": DIMS,
        "similarity": "cosine",
        "count": 200,
    }


def test_an_index_of_the_previous_format_is_migrated_on_open(tmp_path) -> None:
    import json

    old = tmp_path / "old"
    old.mkdir()
    manifest = {"format": 1, "model": "m", "dims": DIMS, "similarity": "cosine", "count": 3}
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "vectors.f32").write_bytes(unit(3).tobytes())
    lines = [
        json.dumps({"id": "a", "text": "A", "fields": {"x": 1}}),
        json.dumps({"id": "b", "text": "B", "fields": {}}),
        '{"id": "c", "te',  # a torn last line
    ]
    (old / "docs.jsonl").write_text("\n".join(lines))
    migrated = EmbeddedBackend.open(old)
    assert migrated.ids() == ["a", "b"]
    assert migrated.get("a") == {"id": "a", "text": "A", "fields": {"x": 1}}
    np.testing.assert_allclose(migrated.vector("b"), unit(3)[1], rtol=1e-6)
    assert not (old / "docs.jsonl").exists() and not (old / "manifest.json").exists()
    assert EmbeddedBackend.open(old).count() == 2


def test_a_second_writer_is_refused_with_a_message_naming_the_lock(index: EmbeddedBackend) -> None:
    other = EmbeddedBackend.open(index.path, lock_timeout=0.2)
    refused = pytest.raises(IndexStateError, match=r"being written by another process.*write\.lock")
    with index.writing(), refused:
        other.add(["x"], ["x"], unit(1))
    other.add(["x"], ["x"], unit(1))
    assert EmbeddedBackend.open(index.path).count() == 201


def test_a_writer_first_catches_up_with_rows_another_writer_committed(
    index: EmbeddedBackend,
) -> None:
    other = EmbeddedBackend.open(index.path)
    index.add(["late"], ["from the first writer"], unit(1, seed=3))
    other.add(["later"], ["from the second writer"], unit(1, seed=4))
    reopened = EmbeddedBackend.open(index.path)
    assert reopened.count() == 202 and other.count() == 202
    np.testing.assert_allclose(reopened.vector("late"), unit(1, seed=3)[0], rtol=1e-6)
    np.testing.assert_allclose(reopened.vector("later"), unit(1, seed=4)[0], rtol=1e-6)


def test_a_reader_opened_before_a_commit_keeps_its_snapshot(index: EmbeddedBackend) -> None:
    reader = EmbeddedBackend.open(index.path)
    index.add(["new"], ["new"], unit(1))
    assert reader.count() == 200 and reader.vectors.shape == (200, DIMS)


def test_compaction_leaves_no_file_of_the_previous_generation(index: EmbeddedBackend) -> None:
    index.delete(["d0"])
    index.compact()
    index.delete(["d1"])
    index.compact()
    assert sorted(p.name for p in index.path.glob("vectors*")) == ["vectors.2.f32"]
    assert index.compact() == (198, 198)  # nothing dead: nothing rewritten
    assert EmbeddedBackend.open(index.path).count() == 198


def test_exact_scores_are_the_program_over_clamped_cosines(index: EmbeddedBackend) -> None:
    query = itlr.parse("a AND NOT b OR c")
    terms = unit(3, seed=1)
    hits = index.search(query, terms, SearchOptions(k=200, mode="exact", truth=TruthMap("clamp")))
    assert len(hits) == 200
    for hit in hits[:20]:
        cosines = np.clip(terms @ index.vector(hit.id), 0, 1)
        # Searches negate at DEFAULT_NOT_STRENGTH: 1 - s*x.
        expected = max(0.0, cosines[0] * (1 - DEFAULT_NOT_STRENGTH * cosines[1]) + cosines[2])
        assert hit.score == pytest.approx(expected, rel=1e-5)
        assert hit.truths == pytest.approx(dict(zip("abc", cosines, strict=True)), rel=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_knn_plan_matches_exact_when_the_budget_covers_the_corpus(index: EmbeddedBackend) -> None:
    query = itlr.parse("(a OR b) AND NOT c")
    terms = unit(3, seed=2)
    exact = index.search(query, terms, SearchOptions(k=10, mode="exact"))
    knn = index.search(query, terms, SearchOptions(k=10, mode="knn", candidates=200))
    assert [h.id for h in knn] == [h.id for h in exact]


def test_knn_plan_only_rescores_candidates_of_positive_terms(index: EmbeddedBackend) -> None:
    # On the graph: without it, knn mode scores every row of a query it can certify.
    index.ann_min_rows = 0
    query = itlr.parse("a AND NOT b")
    terms = unit(2, seed=3)
    options = SearchOptions(k=200, mode="knn", candidates=5, max_candidates=5)
    hits = index.search(query, terms, options)
    cosines = np.array([index.vector(f"d{i}") for i in range(200)]) @ terms[0]
    top5 = {f"d{i}" for i in np.argsort(-cosines)[:5]}
    assert {h.id for h in hits} == top5
    # 5 candidates cannot prove a top 200: the result says so.
    assert hits.exact is False and hits.warnings


def test_absolute_hard_filter_drops_every_document_whose_not_truth_reaches_theta(
    index: EmbeddedBackend,
) -> None:
    query = itlr.parse("a AND NOT b")
    terms = unit(2, seed=4)
    options = SearchOptions(k=200, mode="exact", hard_filter=0.2, hard_filter_rule="absolute")
    hits = index.search(query, terms, options)
    assert hits and all(h.truths["b"] < 0.2 for h in hits)
    assert len(hits) < 200


def test_relative_hard_filter_drops_only_documents_closer_to_the_not_than_to_every_positive(
    index: EmbeddedBackend,
) -> None:
    # The default rule: dropped when the NOT's cosine reaches theta AND exceeds the document's
    # best positive cosine ("a" or "c"); hybrid truths judge the clamped cosines.
    query = itlr.parse('("a" OR "c") AND NOT "b"')
    terms = unit(3, seed=4)
    hits = index.search(query, terms, SearchOptions(k=200, mode="exact", hard_filter=0.1))
    cosines = np.clip(np.array([index.vector(f"d{i}") for i in range(200)]) @ terms.T, 0, 1)
    a, c, b = (cosines[:, query.terms.index(t)] for t in ("a", "c", "b"))
    expected = {f"d{i}" for i in range(200) if not (b[i] >= 0.1 and b[i] > max(a[i], c[i]))}
    assert {h.id for h in hits} == expected
    # Both kinds of survivor exist: below theta, and at or above it but outweighed.
    assert any(b[i] < 0.1 for i in range(200)) and any(
        0.1 <= b[i] <= max(a[i], c[i]) for i in range(200)
    )
    assert 0 < 200 - len(expected) < 200


def test_hard_filter_leaves_not_under_or_fuzzy(index: EmbeddedBackend) -> None:
    query = itlr.parse("a OR NOT b")
    hits = index.search(query, unit(2, seed=5), SearchOptions(k=200, mode="exact", hard_filter=0.0))
    assert len(hits) == 200


def test_filters_restrict_hits(index: EmbeddedBackend) -> None:
    query = itlr.parse("a")
    options = SearchOptions(k=200, mode="exact", filter={"term": {"parity": 0}})
    hits = index.search(query, unit(1, seed=6), options)
    assert len(hits) == 100 and all(h.fields["parity"] == 0 for h in hits)
    options = SearchOptions(k=200, filter={"bool": {"must_not": [{"terms": {"id": ["d0", "d2"]}}]}})
    assert {"d0", "d2"}.isdisjoint(h.id for h in index.search(query, unit(1, seed=6), options))


def test_wrong_query_dimensions_are_refused_with_the_model_name(index: EmbeddedBackend) -> None:
    with pytest.raises(IndexStateError, match=r"\(1, 16\).*test-model"):
        index.search(itlr.parse("a"), np.ones((1, 8)), SearchOptions())


def test_missing_index_says_how_to_create_one(tmp_path) -> None:
    with pytest.raises(IndexStateError, match="itlr ingest"):
        EmbeddedBackend.open(tmp_path / "nothing")


def test_other_model_is_refused(index: EmbeddedBackend) -> None:
    with pytest.raises(IndexStateError, match=r"other-model|test-model"):
        EmbeddedBackend.open_or_create(index.path, "other-model", DIMS)
    with pytest.raises(IndexStateError, match="16-dim"):
        EmbeddedBackend.open_or_create(index.path, "test-model", 32)


@pytest.mark.parametrize("queries", [1, 3])
def test_candidate_sized_and_whole_index_products_give_the_same_cosines(queries: int) -> None:
    from itlr.engines.kernels import SINGLE_THREAD_ROWS, cosine_matrix

    rng = np.random.default_rng(7)
    rows = rng.standard_normal((SINGLE_THREAD_ROWS + 1, 16), dtype=np.float32)
    terms = rng.standard_normal((queries, 16), dtype=np.float32)
    whole = cosine_matrix(rows, terms)  # torch's matmul
    candidates = cosine_matrix(rows[:SINGLE_THREAD_ROWS], terms)  # numpy on this thread
    assert whole.shape == (SINGLE_THREAD_ROWS + 1, queries)
    np.testing.assert_allclose(candidates, whole[:SINGLE_THREAD_ROWS], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(whole, rows.astype(np.float64) @ terms.T, rtol=1e-4, atol=1e-4)


def test_rows_tied_at_the_kth_score_are_taken_in_id_order_after_the_higher_ones(
    tmp_path,
) -> None:
    created = EmbeddedBackend.create(tmp_path / "ties", "test-model", DIMS)
    axis = np.eye(DIMS, dtype=np.float32)
    # Three rows close to the term, three tied just below them, the rest orthogonal (score 0
    # under clamp truths); ids written out of order so that row order is not id order.
    close = [0.9 * axis[0] + 0.1 * axis[1], 0.8 * axis[0] + 0.2 * axis[1], axis[0] + axis[2]]
    tied = [0.5 * axis[0] + 0.5 * axis[3]] * 3
    vectors = np.stack([*close, *tied, *([axis[4]] * 40)])
    ids = [f"c{i}" for i in range(3)] + ["t9", "t1", "t5"] + [f"z{i:02d}" for i in range(40, 0, -1)]
    created.add(ids, ids, vectors)
    query = itlr.parse('"term"')
    term = axis[0][np.newaxis]
    clamp = TruthMap("clamp")
    five = created.search(query, term, SearchOptions(k=5, mode="exact", truth=clamp))
    assert [h.id for h in five] == ["c0", "c1", "c2", "t1", "t5"]
    ten = created.search(query, term, SearchOptions(k=10, mode="exact", truth=clamp))
    assert [h.id for h in ten] == ["c0", "c1", "c2", "t1", "t5", "t9", "z01", "z02", "z03", "z04"]
    assert [h.score for h in ten[6:]] == [0.0] * 4
