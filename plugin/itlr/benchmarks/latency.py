"""Latency of logical queries against plain kNN on the same index, in the same run.

Vectors are random unit vectors (latency does not depend on what they mean); the candidate
recall measurement uses real text instead, because there it matters.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from itlr.candidates import DEFAULT_PLAN, Plan
from itlr.options import SearchOptions
from itlr.query import Query, parse
from itlr.scoring import TruthMap
from itlr.tree import Node

if TYPE_CHECKING:
    from itlr.engines import Backend
    from itlr.engines.cluster import ClusterBackend

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
    # Milliseconds per round, in round order (time_interleaved): for paired comparisons.
    rounds_ms: tuple[float, ...] = field(default=(), compare=False, repr=False)

    def ratio_to(self, reference: Timing) -> float:
        return self.p50_ms / reference.p50_ms if reference.p50_ms else float("nan")

    def paired_ratio_to(self, reference: Timing) -> float:
        """The median of this call's time over the reference's in the same round: a machine
        whose speed drifts during a run moves both alike, where the ratio of p50s takes the
        drift of each whole run."""
        pairs = [
            mine / theirs
            for mine, theirs in zip(self.rounds_ms, reference.rounds_ms, strict=False)
            if theirs > 0
        ]
        return statistics.median(pairs) if pairs else float("nan")


def time_interleaved(
    calls: dict[str, Callable[[int], object]], repeats: int, warmup: int = 10, seed: int = 0
) -> list[Timing]:
    """p50/p95 of each call, timed round-robin so that caches warming up, merges finishing or a
    busy neighbour weigh on every measurement alike rather than on whichever ran first. The
    order is shuffled every round (seeded): in a fixed order each call would always follow the
    same one, and a light query after a heavy scan pays for the scan's garbage."""
    for i in range(warmup):
        for call in calls.values():
            call(i)
    order = list(calls)
    shuffle = random.Random(seed).shuffle
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(repeats):
        shuffle(order)
        for name in order:
            started = time.perf_counter()
            calls[name](i)
            samples[name].append((time.perf_counter() - started) * 1000)
    timings = []
    for name, values in samples.items():
        ranked = sorted(values)
        p95 = ranked[min(len(ranked) - 1, round(0.95 * (len(ranked) - 1)))]
        timings.append(Timing(name, statistics.median(ranked), p95, tuple(values)))
    return timings


def random_unit(rows: int, dims: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dims), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def random_texts(count: int, seed: int, words: int = 60) -> list[str]:
    """Passages of Zipf-distributed made-up words in which the QUERIES' terms t0..t4 occur now
    and then: something for hybrid truths' lexical side to read on a cluster."""
    vocabulary = np.array([f"t{i}" for i in range(5)] + [f"w{i}" for i in range(5000)])
    weights = 1.0 / np.arange(10, 10 + len(vocabulary))
    drawn = np.random.default_rng(seed).choice(
        len(vocabulary), size=(count, words), p=weights / weights.sum()
    )
    return [" ".join(vocabulary[row]) for row in drawn]


def query_vectors(query: Query, dims: int, seed: int) -> np.ndarray:
    return random_unit(len(query.terms), dims, seed)


# Every timed call takes its vectors from a pool drawn before the timing, plain kNN and logical
# queries alike: drawing them is no part of a search, and a cost only one side paid would skew
# the ratio between them (the line "vectors drawn on each call" shows what drawing costs).
POOL = 64


def vector_pool(query: Query, dims: int) -> list[np.ndarray]:
    """The query's term vectors for calls 0..POOL-1 (call i uses entry i % POOL)."""
    return [query_vectors(query, dims, seed=i) for i in range(POOL)]


def measure_backend(
    backend: Backend,
    dims: int,
    repeats: int,
    k: int = 10,
    floor: np.ndarray | None = None,
    extra: Mapping[str, Callable[[int], object]] | None = None,
) -> list[Timing]:
    """Plain kNN, then 1/3/5-term logical queries in knn and exact mode, on one backend.

    With `floor` (the backend's vectors), the first timing is one memory pass over them (numpy's
    gemv): the least any exact scoring must cost. It is timed on its own, before the rounds, as
    the search calls' torch threads would otherwise slow it down. `extra`: more calls, timed in
    the same rounds (`request_parts`).
    """
    pool = random_unit(POOL, dims, seed=99)
    reference = []
    if floor is not None:
        probe = random_unit(1, dims, seed=5)[0]
        reference = time_interleaved(
            {"one pass over the vectors (V @ q)": lambda _i: floor @ probe}, repeats
        )
    calls: dict[str, Callable[[int], object]] = {}
    calls["plain kNN (1 vector)"] = lambda i: backend.search_vector(pool[i % POOL], k)
    # On OpenSearch 3.6 a graph search for 100 neighbours beat one for 10 at 100k documents.
    calls["plain kNN (1 vector, 100 candidates)"] = lambda i: backend.search_vector(
        pool[i % POOL], k, candidates=100
    )
    # As many neighbours as the 3-term query's candidate search gathers (the budget per
    # positive term, two of them): the graph walk's share of that query, without the scoring.
    gathered = SearchOptions(k=k).candidate_budget * len(parse(QUERIES[3]).positive_terms)
    calls[f"plain kNN (1 vector, {gathered} candidates)"] = lambda i: backend.search_vector(
        pool[i % POOL], k, candidates=gathered
    )
    for terms, text in QUERIES.items():
        query = parse(text)
        drawn = vector_pool(query, dims)
        variants = {
            f"itlr {terms}-term, {mode} mode": SearchOptions(k=k, mode=mode)
            for mode in ("knn", "exact")
        }
        if terms == 3:
            # What the certificate's rounds cost: the same search held to one round, which
            # proves nothing (random vectors are the certificate's worst case: no bound proves
            # their top k, so every round runs).
            one_round = SearchOptions(k=k).candidate_budget
            variants[f"itlr {terms}-term, knn mode, one round (no certificate)"] = SearchOptions(
                k=k, mode="knn", max_candidates=one_round
            )
            # What the lexical evidence (the default) costs: the statistics request, the token
            # scan and the mention clauses, against cosine truths alone.
            variants[f"itlr {terms}-term, knn mode, cosine truths"] = SearchOptions(
                k=k, mode="knn", truth=TruthMap("clamp")
            )
            variants[f"itlr {terms}-term, knn mode, cosine truths, one round"] = SearchOptions(
                k=k, mode="knn", truth=TruthMap("clamp"), max_candidates=one_round
            )
            # What the hard filter's exclusion clause costs (itlr.hard_filter): the relative
            # rule, the default, also reads the positive terms' cosines; the absolute one only
            # the NOT term's, as the filter did before.
            for rule in ("relative", "absolute"):
                variants[f"itlr {terms}-term, knn mode, hard filter ({rule})"] = SearchOptions(
                    k=k, mode="knn", hard_filter=0.53, hard_filter_rule=rule
                )
        if len(query.positive_terms) > 1:
            # The per-term plan, one kNN search per positive term, to compare the default with.
            variants[f"itlr {terms}-term, knn mode, per-term plan"] = SearchOptions(
                k=k, mode="knn", plan="per-term"
            )
        for name, options in variants.items():

            def run(
                i: int,
                query: Query = query,
                options: SearchOptions = options,
                drawn: list[np.ndarray] = drawn,
            ) -> object:
                return backend.search(query, drawn[i % POOL], options)

            calls[name] = run
        if terms == 3:
            # Every line above sends one query object again, as a query bar does, and a cluster
            # builds only its vectors' parts of the request again (itlr.query_memo). The same
            # query as a new object each time: what a query text not seen before costs.
            def run_new(i: int, root: Node = query.root, drawn: list[np.ndarray] = drawn) -> object:
                return backend.search(Query(root), drawn[i % POOL], SearchOptions(k=k, mode="knn"))

            calls[f"itlr {terms}-term, knn mode, a query not seen before"] = run_new

            # The same query with its vectors drawn on each call: what drawing them would add
            # to the line above, and why every other line takes them from the pool.
            def run_drawing(i: int, query: Query = query) -> object:
                return backend.search(
                    query, query_vectors(query, dims, seed=i % POOL), SearchOptions(k=k, mode="knn")
                )

            calls[f"itlr {terms}-term, knn mode, vectors drawn on each call"] = run_drawing
    calls.update(extra or {})
    return reference + time_interleaved(calls, repeats)


# The request-parts lines' scripts (`request_parts`): fixed sources, as every script itlr sends.
SCRIPT_RETURNING_SCORE = "return _score;"
# What the score script reads of each candidate, and nothing else: the vector, the token keys and
# the token count (each doc[...] loads the document's values).
SCRIPT_READING_CANDIDATES = """
def vector = doc[params.field];
if (vector.size() == 0) {
    return 0.0;
}
float[] v = vector.value;
double read = v[0];
if (doc.containsKey(params.keys_field)) {
    read += doc[params.keys_field].size();
}
if (doc.containsKey(params.length_field)) {
    read += doc[params.length_field].size();
}
// Multiplied by 0 but kept: 0 * NaN is NaN, so the reads cannot be optimised away.
return _score + 0.0 * read;
"""
# Each read on its own, to tell which of them costs what.
SCRIPT_READING_VECTORS = """
def vector = doc[params.field];
if (vector.size() == 0) {
    return 0.0;
}
float[] v = vector.value;
return _score + 0.0 * v[0];
"""
SCRIPT_READING_TOKEN_KEYS = """
double read = 0.0;
if (doc.containsKey(params.keys_field)) {
    read += doc[params.keys_field].size();
}
return _score + 0.0 * read;
"""


def request_parts(
    backend: ClusterBackend, dims: int, k: int = 10
) -> dict[str, Callable[[int], object]]:
    """The default 3-term query on a cluster, taken apart: its requests built before the timing
    (the same 64 as the "itlr 3-term, knn mode" line's), sent as they are, then with the score
    script swapped for one that returns the kNN score (the candidate search, the script_score
    wrapper and the sort), for one that only reads what the score script reads of each
    candidate, and for ones that read only its vector or only its token keys. Each response is
    read into hits, as plain kNN's are."""
    query = parse(QUERIES[3])
    options = SearchOptions(k=k, mode="knn")
    statistics = backend.term_statistics(query) if options.truth.uses_lexical else None
    built = [
        backend.dialect.search_request(query, vectors, options, statistics)
        for vectors in vector_pool(query, dims)
    ]

    def scripted(body: dict[str, Any], source: str) -> dict[str, Any]:
        score = body["query"]["script_score"]
        given = score["script"]["params"]
        params = {
            name: given[name] for name in ("field", "keys_field", "length_field") if name in given
        }
        script = {"lang": "painless", "source": source, "params": params}
        return {**body, "query": {"script_score": {**score, "script": script}}}

    variants = {
        "": [request.body for request in built],
        ", script returns the kNN score": [
            scripted(request.body, SCRIPT_RETURNING_SCORE) for request in built
        ],
        ", script only reads each candidate": [
            scripted(request.body, SCRIPT_READING_CANDIDATES) for request in built
        ],
        ", script only reads each candidate's vector": [
            scripted(request.body, SCRIPT_READING_VECTORS) for request in built
        ],
        ", script only reads each candidate's token keys": [
            scripted(request.body, SCRIPT_READING_TOKEN_KEYS) for request in built
        ],
    }

    def send(bodies: list[dict[str, Any]]) -> Callable[[int], object]:
        def call(i: int) -> object:
            response = backend.client.search(
                index=backend.index_name, body=bodies[i % POOL], allow_partial_search_results=False
            )
            return backend.dialect.ranking(dict(response)).hits

        return call

    return {
        f"itlr 3-term request built beforehand{name}": send(bodies)
        for name, bodies in variants.items()
    }


@dataclass(frozen=True)
class CandidateRecall:
    """How well knn mode's top k matches exact mode's, at one candidate budget.

    `scores`: the share of ranks at which knn mode returns a document scoring as high as exact
    mode's document at that rank. Where several documents tie (often at score 0, when a query
    has fewer than k documents that satisfy it at all) any of them is as right as another.
    `ids`: the plain overlap of the two id sets, ties broken by id, as a stricter reading.
    """

    scores: float
    ids: float


def candidate_recall(
    index: Backend,
    term_vectors_for: Callable[[Query], np.ndarray],
    queries: list[Query],
    budgets: list[int],
    k: int = 10,
    plan: Plan = DEFAULT_PLAN,
) -> dict[int, CandidateRecall]:
    """knn mode with one candidate plan against exact mode, per candidate budget (per positive
    term), averaged over the queries: one round of candidates (the cap at the budget, so no
    certificate round goes deeper). The embedded engine without its graph scores every row of
    an anchored query, so only its graph's candidates can miss."""
    exact = []
    for query in queries:
        vectors = term_vectors_for(query)
        hits = index.search(query, vectors, SearchOptions(k=k, mode="exact"))
        if hits:
            exact.append((query, vectors, hits))
    recall: dict[int, CandidateRecall] = {}
    for budget in budgets:
        by_score, by_id = [], []
        for query, vectors, truth in exact:
            options = SearchOptions(
                k=k, mode="knn", candidates=budget, max_candidates=budget, plan=plan
            )
            found = index.search(query, vectors, options)
            found_scores = [h.score for h in found] + [-np.inf] * (len(truth) - len(found))
            by_score.append(
                np.mean(
                    [
                        mine >= theirs.score - 1e-6 * max(1.0, abs(theirs.score))
                        for mine, theirs in zip(found_scores, truth, strict=False)
                    ]
                )
            )
            by_id.append(len({h.id for h in truth} & {h.id for h in found}) / len(truth))
        recall[budget] = CandidateRecall(
            float(np.mean(by_score)) if by_score else float("nan"),
            float(np.mean(by_id)) if by_id else float("nan"),
        )
    return recall


@dataclass(frozen=True)
class EmbeddedRun:
    """One embedded-engine latency run, with what the index costs to build and hold."""

    count: int
    floor: Timing
    timings: list[Timing]
    store_seconds: float
    graph_seconds: float | None
    disk_bytes: int
    graph_bytes: int
    rss_bytes: int
    reused: bool = False  # the index was built by an earlier run (`keep`)


BUILD_RECORD = "bench-build.json"


def measure_embedded(count: int, dims: int, repeats: int, folder: Path) -> EmbeddedRun:
    """Fill an embedded index with `count` random unit vectors (the store first, then the HNSW
    graph when the index is past its threshold, each timed), then time the queries.

    An index this function left in `folder` for the same count and dimensions is reused, with
    the build times it recorded: at a million rows the graph takes tens of minutes to build."""
    import json

    from itlr.engines.embedded import EmbeddedBackend

    path = folder / f"bench-{count}-{dims}"
    record = path / BUILD_RECORD
    vectors = random_unit(count, dims, seed=1)
    record_existed = record.exists()
    if record_existed:
        index = EmbeddedBackend.open(path)
        built = json.loads(record.read_text())
        store_seconds, graph_seconds = built["store_seconds"], built["graph_seconds"]
    else:
        if path.exists():
            import shutil

            shutil.rmtree(path)  # a build that did not finish
        index = EmbeddedBackend.create(path, "random", dims)
        threshold, index.ann_min_rows = index.ann_min_rows, 2**62
        started = time.perf_counter()
        index.add([f"r{i}" for i in range(count)], [""] * count, vectors)
        store_seconds = time.perf_counter() - started
        index.ann_min_rows = threshold
        graph_seconds = None
        if count >= threshold:
            started = time.perf_counter()
            with index.writing():
                pass  # the end of a write block brings the graph up to date and saves it
            graph_seconds = time.perf_counter() - started
        built = {"store_seconds": store_seconds, "graph_seconds": graph_seconds}
        record.write_text(json.dumps(built))
    floor, *timings = measure_backend(index, dims, repeats, floor=vectors)
    del vectors
    files = [p for p in path.iterdir() if p.is_file() and p.name != BUILD_RECORD]
    return EmbeddedRun(
        count=count,
        floor=floor,
        timings=timings,
        store_seconds=store_seconds,
        graph_seconds=graph_seconds,
        disk_bytes=sum(p.stat().st_size for p in files),
        graph_bytes=sum(p.stat().st_size for p in files if p.name.startswith("ann.")),
        rss_bytes=resident_bytes(),
        reused=record_existed,
    )


def resident_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 elsewhere)."""
    import os

    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")
