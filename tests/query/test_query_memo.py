"""A query sent again builds only what its vectors decide; everything else is reused."""

from __future__ import annotations

import numpy as np

from itlr.engines.layout import IndexLayout
from itlr.engines.opensearch import OpenSearchDialect
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.query import Query, parse
from itlr.query_memo import QueryMemo


def unit_vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, 8)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_the_memo_reuses_a_value_for_the_same_query_object_and_an_equal_key() -> None:
    memo: QueryMemo[list[int]] = QueryMemo()
    query = parse('"a" AND NOT "b"')
    made = []

    def make() -> list[int]:
        made.append(1)
        return [len(made)]

    first = memo.get(query, (SearchOptions(k=5), 1), make)
    assert memo.get(query, (SearchOptions(k=5), 1), make) is first
    assert memo.get(query, (SearchOptions(k=6), 1), make) is not first
    # Another object for the same tree (not from the parser's cache) is worked out again.
    assert memo.get(Query(query.root), (SearchOptions(k=5), 1), make) is not first
    assert len(made) == 3


def test_the_memo_forgets_the_least_recently_asked_queries_and_values() -> None:
    memo: QueryMemo[int] = QueryMemo(queries=2, per_query=2)
    queries = [parse(f'"t{i}"') for i in range(3)]
    for i, query in enumerate(queries):
        memo.get(query, 0, lambda i=i: i)
    assert len(memo) == 2
    assert memo.get(queries[0], 0, lambda: 99) == 99  # forgotten
    for key in range(3):
        memo.get(queries[0], key, lambda key=key: key)
    assert memo.get(queries[0], 0, lambda: -1) == -1  # the third value pushed the first out


def test_a_query_sent_again_gets_the_body_a_new_query_object_would() -> None:
    dialect = OpenSearchDialect(IndexLayout())
    text = '("vitamin benefits" OR "sleep") AND NOT "bone"'
    stats = CorpusStats(100, 1000, {"vitamin": 5, "benefits": 50, "sleep": 10, "bone": 3})
    options = SearchOptions(k=10, hard_filter=0.9, exclude_lexical=True, highlight=True)
    query = parse(text)
    for seed in range(3):
        vectors = unit_vectors(len(query.terms), seed)
        again = dialect.search_request(query, vectors, options, stats)
        fresh = OpenSearchDialect(IndexLayout()).search_request(
            Query(parse(text).root), vectors, options, stats
        )
        assert again.body == fresh.body
        assert [(s.terms, s.budget) for s in again.searches] == [
            (s.terms, s.budget) for s in fresh.searches
        ]
    assert len(dialect._shapes) == 1
    # Other statistics are another shape: the lexical params follow them.
    changed = CorpusStats(100, 1000, {"vitamin": 50, "benefits": 5, "sleep": 10, "bone": 3})
    params = dialect.search_request(query, vectors, options, changed).body["query"]
    assert params != again.body["query"]
    assert len(dialect._shapes) == 2


def test_a_body_changed_by_its_caller_leaves_the_next_one_as_it_was() -> None:
    dialect = OpenSearchDialect(IndexLayout())
    query = parse('"sleep" AND NOT "bone"')
    options = SearchOptions(k=10)
    stats = CorpusStats(100, 1000, {"sleep": 10, "bone": 3})
    first = dialect.search_request(query, unit_vectors(2, 1), options, stats).body
    expected = dialect.search_request(query, unit_vectors(2, 1), options, stats).body
    first["sort"].append({"other": "desc"})
    first["query"]["script_score"]["script"]["params"]["vectors"] = "changed"
    first["query"]["script_score"]["query"]["bool"]["should"].clear()
    assert dialect.search_request(query, unit_vectors(2, 1), options, stats).body == expected
