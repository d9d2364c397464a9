"""Latency of logical queries against plain kNN on the same index, in the same run.

Vectors are random unit vectors (latency does not depend on what they mean); the candidate
recall measurement uses real text instead, because there it matters.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from itlr.parser import parse
from itlr.query import Query
from itlr.search import SearchOptions

QUERIES: dict[int, str] = {
    1: '"t0"',
    3: '("t0" OR "t1") AND NOT "t2"',
    5: '("t0" OR "t1") AND "t2" AND NOT ("t3" OR "t4")',
}


@dataclass(frozen=True)
class Timing:
    name: str
    p50_ms: float
    p95_ms: float

    def ratio_to(self, reference: Timing) -> float:
        return self.p50_ms / reference.p50_ms if reference.p50_ms else float("nan")


def time_calls(name: str, call: Callable[[int], object], repeats: int, warmup: int = 3) -> Timing:
    for i in range(warmup):
        call(i)
    samples = []
    for i in range(repeats):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return Timing(name, statistics.median(samples), p95)


def random_unit(rows: int, dims: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dims), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def query_vectors(query: Query, dims: int, seed: int) -> np.ndarray:
    return random_unit(len(query.terms), dims, seed)


def measure_backend(backend, dims: int, repeats: int, k: int = 10) -> list[Timing]:
    """Plain kNN, then 1/3/5-term logical queries in knn and exact mode, on one backend."""
    pool = random_unit(64, dims, seed=99)
    timings = [
        time_calls(
            "plain kNN (1 vector)", lambda i: backend.search_vector(pool[i % 64], k), repeats
        )
    ]
    for terms, text in QUERIES.items():
        query = parse(text)
        for mode in ("knn", "exact"):
            options = SearchOptions(k=k, mode=mode)  # type: ignore[arg-type]

            def run(i: int, query: Query = query, options: SearchOptions = options) -> object:
                return backend.search(query, query_vectors(query, dims, seed=i % 64), options)

            timings.append(time_calls(f"itlr {terms}-term, {mode} mode", run, repeats))
    return timings


def memory_pass(vectors: np.ndarray, repeats: int) -> Timing:
    """The floor for exact scoring: one matrix-vector product that reads every vector once."""
    probe = random_unit(1, vectors.shape[1], seed=5)[0]
    return time_calls("one pass over the vectors (V @ q)", lambda _i: vectors @ probe, repeats)


def candidate_recall(
    index,
    term_vectors_for: Callable[[Query], np.ndarray],
    queries: list[Query],
    budgets: list[int],
    k: int = 10,
) -> dict[int, float]:
    """Mean top-k overlap of knn mode with exact mode, per candidate budget."""
    recall: dict[int, float] = {}
    exact_ids = {}
    for query in queries:
        vectors = term_vectors_for(query)
        exact = index.search(query, vectors, SearchOptions(k=k, mode="exact"))
        exact_ids[str(query)] = ({h.id for h in exact}, vectors)
    for budget in budgets:
        overlaps = []
        for query in queries:
            truth, vectors = exact_ids[str(query)]
            if not truth:
                continue
            found = index.search(query, vectors, SearchOptions(k=k, mode="knn", candidates=budget))
            overlaps.append(len(truth & {h.id for h in found}) / len(truth))
        recall[budget] = float(np.mean(overlaps)) if overlaps else float("nan")
    return recall
