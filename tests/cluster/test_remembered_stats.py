"""Hybrid searches on a cluster built from remembered statistics: trusted for `max_age` seconds
after a count and until this backend writes, checked by a count sent along after that."""

from __future__ import annotations

import pytest

import itlr
from itlr.engines import remembered_stats
from itlr.engines.opensearch import OpenSearchBackend
from itlr.engines.remembered_stats import RememberedStats, stats_max_age
from itlr.errors import ConfigurationError
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.scoring import TruthMap


def stats(documents: int, **df: int) -> CorpusStats:
    return CorpusStats(documents, documents * 10, df)


def test_statistics_are_guessed_only_after_two_counts_in_a_row_agreed() -> None:
    memory = RememberedStats()
    assert memory.lookup(["a"])[0] is None
    memory.record(stats(5, a=1))
    assert memory.lookup(["a"])[0] is None  # one count says nothing of whether the index moves
    memory.record(stats(5, a=1, b=2))
    assert memory.lookup(["a", "b"])[0] == stats(5, a=1, b=2)
    assert memory.lookup(["a", "c"])[0] is None  # never counted
    memory.record(stats(6, a=1))  # a write in between
    assert memory.lookup(["a"])[0] is None
    memory.record(stats(6, a=1))
    assert memory.lookup(["a"])[0] == stats(6, a=1)


def test_a_changed_document_frequency_alone_stops_the_guessing() -> None:
    memory = RememberedStats()
    memory.record(stats(5, a=1))
    memory.record(stats(5, a=1))
    memory.record(stats(5, a=2))
    assert memory.lookup(["a"])[0] is None


def test_the_least_recently_used_tokens_are_forgotten_past_the_capacity() -> None:
    memory = RememberedStats(capacity=2)
    memory.record(stats(5, a=1, b=1))
    memory.record(stats(5, a=1, b=1))
    assert memory.lookup(["a"])[0] is not None  # a is now the most recent
    memory.record(stats(5, c=1))
    assert memory.lookup(["a", "c"])[0] is not None
    assert memory.lookup(["b"])[0] is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_count_is_trusted_for_max_age_seconds_and_not_after_a_write(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(remembered_stats, "monotonic", clock)
    memory = RememberedStats(max_age=1.0)
    memory.record(stats(5, a=1))
    assert not memory.lookup(["a"])[1]  # one count: not steady
    memory.record(stats(5, a=1, b=2))
    assert memory.lookup(["a", "b"])[1]
    assert not memory.lookup(["a", "c"])[1]  # never counted
    clock.now += 1.5
    assert not memory.lookup(["a"])[1]
    memory.record(stats(5, a=1))
    assert memory.lookup(["a"])[1]
    assert not memory.lookup(["a", "b"])[1]  # b's count is older than max_age
    memory.written()
    assert not memory.lookup(["a"])[1]
    clock.now += 0.1
    memory.record(stats(5, a=1))
    assert memory.lookup(["a"])[1]
    assert not RememberedStats(max_age=0.0).lookup([])[1]


def test_a_count_asked_before_a_write_is_not_trusted_after_it(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(remembered_stats, "monotonic", clock)
    memory = RememberedStats(max_age=1.0)
    memory.record(stats(5, a=1))
    asked = clock.now
    clock.now += 0.1
    memory.written()  # the write finished while the count was on its way
    clock.now += 0.1
    memory.record(stats(5, a=1), asked)
    assert memory.lookup(["a"])[0] is not None and not memory.lookup(["a"])[1]
    memory.record(stats(5, a=1), clock.now)
    assert memory.lookup(["a"])[1]
    clock.now += 0.95  # the age runs from the asking
    memory.record(stats(5, a=1), clock.now - 0.9)
    clock.now += 0.2
    assert not memory.lookup(["a"])[1]


def test_the_max_age_comes_from_the_environment_and_refuses_what_is_not_seconds(
    monkeypatch,
) -> None:
    monkeypatch.delenv("ITLR_STATS_MAX_AGE", raising=False)
    assert stats_max_age() == remembered_stats.STATS_MAX_AGE
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", "0")
    assert RememberedStats().max_age == 0.0
    for wrong in ("-1", "soon", "nan"):
        monkeypatch.setenv("ITLR_STATS_MAX_AGE", wrong)
        with pytest.raises(ConfigurationError, match="ITLR_STATS_MAX_AGE"):
            stats_max_age()


@pytest.mark.opensearch
def test_a_search_from_remembered_statistics_sends_no_count_first_and_notices_a_write(
    opensearch_index, corpus, corpus_vectors, embedder, monkeypatch
) -> None:
    backend: OpenSearchBackend = opensearch_index(corpus_vectors.shape[1])
    backend.add([d.id for d in corpus], [d.text for d in corpus], corpus_vectors)
    backend.refresh()
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    options = SearchOptions(k=10, mode="knn", truth=TruthMap("hybrid"))

    def ranking(found) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in found]

    first = ranking(backend.search(query, vectors, options))
    backend.search(query, vectors, options)  # the second count agrees: the index is steady

    counted_apart: list[object] = []
    count = backend.searches.term_statistics
    monkeypatch.setattr(
        backend.searches, "term_statistics", lambda q: counted_apart.append(q) or count(q)
    )
    counts_sent: list[bool] = []
    multi = backend.searches._multi_search

    def multi_search(bodies):
        counts_sent.append(any("aggs" in body for body in bodies))
        return multi(bodies)

    monkeypatch.setattr(backend.searches, "_multi_search", multi_search)
    # Counted moments ago: the search goes without a count.
    assert ranking(backend.search(query, vectors, options)) == first
    assert counted_apart == [] and not any(counts_sent)
    # Counted longer ago than max_age: a count goes along, in the same request.
    backend.remembered.max_age = 0.0
    assert ranking(backend.search(query, vectors, options)) == first
    assert counted_apart == [] and counts_sent[-1]

    # A write by another client changes the statistics: the check sent along notices, the
    # search is built again.
    other = OpenSearchBackend(backend.client, backend.index_name, backend.model, backend.dims)
    other.add(["new"], [corpus[0].text], corpus_vectors[:1])
    other.refresh()
    after = ranking(backend.search(query, vectors, options))
    assert backend.remembered.lookup(["vitamin"])[0] is None  # not steady until two counts agree
    fresh = OpenSearchBackend(backend.client, backend.index_name, backend.model, backend.dims)
    assert after == ranking(fresh.search(query, vectors, options))
    assert after != first  # the write shows in the scores


@pytest.mark.opensearch
def test_a_write_through_the_backend_is_counted_by_the_next_search_at_once(
    opensearch_index, corpus, corpus_vectors, embedder
) -> None:
    backend: OpenSearchBackend = opensearch_index(corpus_vectors.shape[1])
    backend.add([d.id for d in corpus], [d.text for d in corpus], corpus_vectors)
    backend.refresh()
    backend.remembered.max_age = 3600.0
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    options = SearchOptions(k=10, mode="knn", truth=TruthMap("hybrid"))
    first = [(h.id, h.score) for h in backend.search(query, vectors, options)]
    backend.search(query, vectors, options)
    assert backend.remembered.lookup(["vitamin", "bone", "health"])[1]
    backend.delete([first[0][0]])
    backend.refresh()
    after = [(h.id, h.score) for h in backend.search(query, vectors, options)]
    fresh = OpenSearchBackend(backend.client, backend.index_name, backend.model, backend.dims)
    assert after == [(h.id, h.score) for h in fresh.search(query, vectors, options)]
    assert after[0][0] != first[0][0]
