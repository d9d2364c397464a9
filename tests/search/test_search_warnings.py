"""Per-search warnings travel with their search (itlr.results.SearchResult.warnings);
a long-lived cluster backend keeps nothing per search."""

from __future__ import annotations

import pytest

import itlr
from itlr.engines.opensearch import OpenSearchBackend
from itlr.options import SearchOptions
from itlr.retriever import Retriever

pytestmark = pytest.mark.opensearch

# Above the k-NN plugin's largest k: every such search is capped, and says so. The queries are
# not anchored: an anchored one runs certificate rounds, which stay under the limit.
OVER_THE_LIMIT = SearchOptions(k=5, candidates=20_000)
CAPPED = "exceeds OpenSearch's k limit; using 10000"


def backend_state(backend: OpenSearchBackend) -> dict[str, object]:
    """Everything the backend holds, sized: what would grow if searches left something behind."""
    return {
        name: len(value) if hasattr(value, "__len__") else type(value).__name__
        for name, value in vars(backend).items()
    }


def test_a_capped_budget_is_a_warning_of_that_search_only(opensearch_demo, embedder) -> None:
    retriever = Retriever(opensearch_demo, embedder)
    capped = retriever.search('"vitamin D" OR NOT "bone health"', OVER_THE_LIMIT)
    assert [w for w in capped.warnings if CAPPED in w] == [
        "a candidate search of 20000 neighbours exceeds OpenSearch's k limit; using 10000"
    ]
    assert capped.hits
    plain = retriever.search('"vitamin D" OR NOT "bone health"', SearchOptions(k=5))
    assert plain.hits and not any(CAPPED in w for w in plain.warnings)


def test_the_backend_holds_no_per_search_state_after_many_searches(
    opensearch_demo, embedder
) -> None:
    retriever = Retriever(opensearch_demo, embedder)
    queries = [itlr.parse(q) for q in ('"sleep" OR NOT "coffee"', '"vitamin D" OR NOT "sun"')]
    retriever.search(queries[0], OVER_THE_LIMIT)  # the first search builds the dialect
    before = backend_state(opensearch_demo)
    dialect = opensearch_demo.dialect
    for number in range(40):
        result = retriever.search(queries[number % 2], OVER_THE_LIMIT)
        assert any(CAPPED in w for w in result.warnings)
    assert backend_state(opensearch_demo) == before
    assert opensearch_demo.warnings == []
    assert opensearch_demo.dialect is dialect  # built once, not per search
