"""The embedded engine's HNSW candidates: same hits as exact mode, a cache that survives
anything (more rows, compaction, a torn file, a kill) by catching up or rebuilding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import itlr
from itlr.engines.ann import graph_path
from itlr.engines.embedded import EmbeddedBackend
from itlr.options import SearchOptions

DIMS = 32


CENTRES = np.random.default_rng(0).standard_normal((40, DIMS))


def clustered(rows: int, seed: int) -> np.ndarray:
    """Vectors around 40 topic centres, like passages around topics (random vectors have no
    neighbours worth the name, which no real corpus looks like)."""
    rng = np.random.default_rng(seed)
    centres = CENTRES
    vectors = centres[rng.integers(0, 40, rows)] + 0.6 * rng.standard_normal((rows, DIMS))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EmbeddedBackend:
    monkeypatch.setenv("ITLR_ANN_MIN_ROWS", "500")
    built = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    vectors = clustered(3000, seed=1)
    built.add([f"d{i}" for i in range(3000)], [f"text {i}" for i in range(3000)], vectors)
    return built


def queries() -> list[tuple[itlr.Query, np.ndarray]]:
    rng = np.random.default_rng(7)
    texts = ['"a"', '"a" AND "b" AND NOT "c"', '("a" OR "b") AND NOT "c"']
    found = []
    for number in range(10):
        query = itlr.parse(texts[number % len(texts)])
        found.append((query, clustered(len(query.terms), seed=100 + number)))
    rng.shuffle(found)  # type: ignore[arg-type]
    return found


def assert_knn_matches_exact(index: EmbeddedBackend) -> None:
    """Graph candidates give the hits that exact candidates (a full scan) give, with the same
    exact scores, and exact mode's top hit."""
    for query, vectors in queries():
        options = SearchOptions(k=10, mode="knn")
        through_graph = index.search(query, vectors, options)
        threshold, index.ann_min_rows = index.ann_min_rows, 10**9
        scanned = index.search(query, vectors, options)
        exact = index.search(query, vectors, SearchOptions(k=10, mode="exact"))
        index.ann_min_rows = threshold
        assert [h.id for h in through_graph] == [h.id for h in scanned], str(query)
        np.testing.assert_allclose(
            [h.score for h in through_graph], [h.score for h in scanned], rtol=1e-6
        )
        assert through_graph[0].id == exact[0].id


def graph_files(index: EmbeddedBackend) -> list[str]:
    return sorted(p.name for p in index.path.glob("ann.*"))


def test_knn_mode_takes_graph_candidates_and_returns_exact_modes_hits(index) -> None:
    assert graph_files(index) == ["ann.0.usearch"]
    assert_knn_matches_exact(index)


def test_plain_knn_through_the_graph_ranks_like_an_exact_scan(index) -> None:
    probe = clustered(1, seed=9)[0]
    through_graph = index.search_vector(probe, 10, candidates=100)
    scores = np.asarray(index.vectors) @ probe
    assert [h.id for h in through_graph] == [f"d{i}" for i in np.argsort(-scores)[:10]]


def test_rows_added_after_the_graph_was_saved_are_caught_up(index, tmp_path) -> None:
    more = clustered(200, seed=2)
    index.add([f"n{i}" for i in range(200)], ["new"] * 200, more)
    reopened = EmbeddedBackend.open(index.path)
    hits = reopened.search_vector(more[5], 1)
    assert hits[0].id == "n5"
    assert_knn_matches_exact(reopened)


def test_deleted_and_replaced_ids_never_come_back(index) -> None:
    vectors = np.asarray(index.vectors[:5]).copy()
    index.delete(["d0", "d1"])
    index.add(["d2"], ["moved"], clustered(1, seed=3))
    for row in range(3):
        hits = index.search_vector(vectors[row], 5)
        assert {"d0", "d1"}.isdisjoint(h.id for h in hits)
        assert all(h.id != "d2" or h.text == "moved" for h in hits)
    assert_knn_matches_exact(index)


def test_compaction_rebuilds_the_graph_for_the_new_rows(index) -> None:
    index.delete([f"d{i}" for i in range(0, 3000, 2)])
    index.compact()
    assert graph_files(index) == ["ann.1.usearch"]
    assert_knn_matches_exact(EmbeddedBackend.open(index.path))


def test_a_torn_graph_file_is_rebuilt_not_an_error(index) -> None:
    path = graph_path(index.path, 0)
    path.write_bytes(path.read_bytes()[:1000])
    assert_knn_matches_exact(EmbeddedBackend.open(index.path))


def test_a_graph_covering_rows_that_are_not_committed_is_rebuilt(index, tmp_path) -> None:
    """A graph file from a longer index of the same generation (here copied in) claims rows the
    store never committed: it is thrown away, never searched."""
    other = EmbeddedBackend.create(tmp_path / "other", "test-model", DIMS)
    other.add([f"x{i}" for i in range(4000)], ["x"] * 4000, clustered(4000, seed=5))
    graph_path(index.path, 0).write_bytes(graph_path(other.path, 0).read_bytes())
    reopened = EmbeddedBackend.open(index.path)
    assert all(h.id.startswith("d") for h in reopened.search_vector(clustered(1, 6)[0], 20))
    assert_knn_matches_exact(reopened)


def test_below_the_threshold_no_graph_is_built(tmp_path) -> None:
    small = EmbeddedBackend.create(tmp_path / "small", "test-model", DIMS)
    small.add([f"d{i}" for i in range(100)], ["t"] * 100, clustered(100, seed=4))
    assert graph_files(small) == []


def test_the_onnx_encoder_loads_after_the_graph_without_crashing_the_process() -> None:
    # onnxruntime 1.32 imported after usearch 2.26 dies with SIGSEGV; usearch_index imports
    # onnxruntime first. A fresh interpreter, since this one may have loaded both already.
    import subprocess
    import sys

    script = "from itlr.engines.ann import usearch_index; usearch_index(); import onnxruntime"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-500:]
