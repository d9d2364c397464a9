"""Hybrid searches on a cluster built from remembered statistics: checked by a count sent along,
so the hits are always those of freshly counted statistics."""

from __future__ import annotations

import pytest

import itlr
from itlr.engines.opensearch import OpenSearchBackend
from itlr.engines.remembered_stats import RememberedStats
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.scoring import TruthMap


def stats(documents: int, **df: int) -> CorpusStats:
    return CorpusStats(documents, documents * 10, df)


def test_statistics_are_guessed_only_after_two_counts_in_a_row_agreed() -> None:
    memory = RememberedStats()
    assert memory.guess(["a"]) is None
    memory.record(stats(5, a=1))
    assert memory.guess(["a"]) is None  # one count says nothing of whether the index moves
    memory.record(stats(5, a=1, b=2))
    assert memory.guess(["a", "b"]) == stats(5, a=1, b=2)
    assert memory.guess(["a", "c"]) is None  # never counted
    memory.record(stats(6, a=1))  # a write in between
    assert memory.guess(["a"]) is None
    memory.record(stats(6, a=1))
    assert memory.guess(["a"]) == stats(6, a=1)


def test_a_changed_document_frequency_alone_stops_the_guessing() -> None:
    memory = RememberedStats()
    memory.record(stats(5, a=1))
    memory.record(stats(5, a=1))
    memory.record(stats(5, a=2))
    assert memory.guess(["a"]) is None


def test_the_least_recently_used_tokens_are_forgotten_past_the_capacity() -> None:
    memory = RememberedStats(capacity=2)
    memory.record(stats(5, a=1, b=1))
    memory.record(stats(5, a=1, b=1))
    assert memory.guess(["a"]) is not None  # a is now the most recent
    memory.record(stats(5, c=1))
    assert memory.guess(["a", "c"]) is not None
    assert memory.guess(["b"]) is None


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
    count = backend.lexical_stats
    monkeypatch.setattr(backend, "lexical_stats", lambda q: counted_apart.append(q) or count(q))
    assert ranking(backend.search(query, vectors, options)) == first
    assert counted_apart == []

    # A write changes the statistics: the check sent along notices, the search is built again.
    backend.add(["new"], [corpus[0].text], corpus_vectors[:1])
    backend.refresh()
    after = ranking(backend.search(query, vectors, options))
    assert backend.remembered.guess(["vitamin"]) is None  # not steady until two counts agree
    fresh = OpenSearchBackend(backend.client, backend.index, backend.model, backend.dims)
    assert after == ranking(fresh.search(query, vectors, options))
    assert after != first  # the write shows in the scores
