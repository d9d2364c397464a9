"""Benchmark helpers: the recall corpus and the candidate-recall measure."""

from __future__ import annotations

import numpy as np

from itlr.benchmarks.latency import candidate_recall, random_unit
from itlr.benchmarks.text_corpus import recall_corpus
from itlr.engines.embedded import EmbeddedBackend
from itlr.query import parse


def test_a_grown_recall_corpus_keeps_its_passages_and_joins_pairs_of_them() -> None:
    base, vocabulary = recall_corpus()
    grown, same_vocabulary = recall_corpus(len(base) + 50)
    assert same_vocabulary == vocabulary
    assert grown[: len(base)] == base
    assert len(grown) == len(base) + 50
    assert len({d.id for d in grown}) == len(grown)
    texts = {d.text for d in base}
    for joined in grown[len(base) :]:
        assert any(
            joined.text.startswith(t + " ") and joined.text[len(t) + 1 :] in texts for t in texts
        )
    assert recall_corpus(len(base) + 50)[0] == grown  # seeded: the same corpus every run


def test_candidate_recall_is_one_when_the_budget_covers_the_index_and_drops_below(
    tmp_path,
) -> None:
    index = EmbeddedBackend.create(tmp_path / "i", "random", 16)
    index.add([f"r{i}" for i in range(300)], [""] * 300, random_unit(300, 16, seed=1))
    index.ann_min_rows = 0  # graph candidates: without the graph, every row is scored
    queries = [parse('"a" AND NOT "b"'), parse('"a" OR "c"')] * 5
    seeds = iter(range(100))

    def vectors_for(query):
        return random_unit(len(query.terms), 16, seed=next(seeds))

    recall = candidate_recall(index, vectors_for, queries, [1, 300])
    assert recall[300].scores == 1.0 and recall[300].ids == 1.0
    assert recall[1].scores < 1.0
    assert np.isfinite(recall[1].ids)


def test_a_throwaway_opensearch_index_takes_documents_and_is_deleted_after(
    opensearch_url: str,
) -> None:
    from itlr.benchmarks.reports import fill_with_random, throwaway_opensearch

    with throwaway_opensearch(opensearch_url, "test", "random", 16) as backend:
        fill_with_random(backend, 50, 16)
        assert backend.count() == 50
        name, client = backend.index_name, backend.client
    assert not client.indices.exists(index=name)


def test_the_request_parts_send_the_logical_query_as_built_and_with_each_stand_in_script(
    opensearch_url: str,
) -> None:
    from itlr.benchmarks.latency import QUERIES, query_vectors, request_parts
    from itlr.benchmarks.reports import fill_with_random, throwaway_opensearch
    from itlr.options import SearchOptions

    with throwaway_opensearch(opensearch_url, "test", "random", 16) as backend:
        fill_with_random(backend, 300, 16)
        parts = request_parts(backend, 16)
        as_built, returning_score, *reading = parts.values()
        assert len(reading) == 3
        query = parse(QUERIES[3])
        logical = backend.search(query, query_vectors(query, 16, seed=3), SearchOptions(k=10))
        sent = as_built(3)
        assert [(h.id, h.score) for h in sent] == [(h.id, h.score) for h in logical]
        # The stand-ins score every candidate by its kNN score, (1 + cos) / 2 on OpenSearch,
        # whatever they read: the same hits in all, none of them the logical query's scores.
        stand_in = [(h.id, round(h.score, 6)) for h in returning_score(3)]
        for read in reading:
            assert stand_in == [(h.id, round(h.score, 6)) for h in read(3)]
        assert len(stand_in) == 10 and all(0.0 <= score <= 1.0 for _, score in stand_in)
        assert [s for _, s in stand_in] != [round(h.score, 6) for h in logical]


def test_latency_lines_search_with_vectors_drawn_before_the_timing(tmp_path) -> None:
    """Drawing a query's vectors is no part of its search: every line takes them from the pool
    drawn beforehand, as plain kNN does, but the one kept to show what drawing them costs."""
    from itlr.benchmarks.latency import POOL, measure_backend

    index = EmbeddedBackend.create(tmp_path / "i", "random", 16)
    index.add([f"r{i}" for i in range(200)], [""] * 200, random_unit(200, 16, seed=1))
    # The arrays themselves, kept alive, so that no two of them share an id().
    given: dict[int, list[np.ndarray]] = {}

    class Recording:
        def __getattr__(self, name: str):
            return getattr(index, name)

        def search(self, query, term_vectors, options):
            given.setdefault(len(query.terms), []).append(term_vectors)
            return index.search(query, term_vectors, options)

    timings = measure_backend(Recording(), 16, repeats=POOL + 1)
    names = [t.name for t in timings]
    assert "itlr 3-term, knn mode, vectors drawn on each call" in names
    assert all(t.p50_ms > 0 for t in timings)
    # Each query's calls reuse at most POOL vector objects; the line that draws on each call
    # adds one per call of its own (POOL + 1 rounds and the warm-up's 10 calls).
    distinct = {terms: len({id(v) for v in arrays}) for terms, arrays in given.items()}
    assert distinct[1] <= POOL and distinct[5] <= POOL
    assert distinct[3] > POOL


def test_the_load_benchmark_reports_why_requests_failed() -> None:
    # A stand-in service that refuses every second search: the report counts each failure and
    # says what the service answered.
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from itlr.benchmarks.load import _phase, markdown

    seen: list[int] = []

    class Service(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(1)
            status, body = (503, b'{"error": "busy"}') if len(seen) % 2 else (200, b"{}")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        phase = asyncio.run(_phase(url, "ordinary only", [{"query": "a"}] * 6, set(), 1))
    finally:
        server.shutdown()
    assert phase.errors == 3 and phase.failures == {'503 \'{"error": "busy"}\'': 3}
    assert 'ordinary only: 3 failed with 503 \'{"error": "busy"}\'' in markdown([phase])
