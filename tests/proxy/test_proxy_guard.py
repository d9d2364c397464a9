"""The query-bar proxy refuses what it cannot answer right (issue 26.4), in front of a real
OpenSearch: a clause under must_not or beside other should clauses, on _count or a search
template, or on an index pattern that also matches indexes without itlr vectors. Each was a
wrong answer before (0 hits, a dropped clause, a silent pass-through); each is now a 400 in the
cluster's error shape that names what works."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from demo_backend import demo_backend
from itlr.engines.opensearch import OpenSearchBackend
from itlr.proxy import ClauseError, find_logical_search
from itlr.proxy.placement import raw_names_field

pytestmark = pytest.mark.opensearch

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
CLAUSE = {"query_string": {"query": f"itlr:({LOGICAL})"}}


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"itlr-guard-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def demo_index(
    opensearch_url, corpus, corpus_vectors, embedder, prefix
) -> Iterator[OpenSearchBackend]:
    # Named under the module's prefix: the tests search it through index patterns.
    with demo_backend(
        opensearch_url,
        prefix,
        embedder,
        corpus,
        corpus_vectors,
        with_fields=True,
        name=f"{prefix}-docs",
    ) as backend:
        yield backend


@pytest.fixture(scope="module")
def plain_index(opensearch_url, prefix) -> Iterator[str]:
    """An ordinary index (no itlr vectors) beside the itlr one."""
    name = f"{prefix}-plain"
    httpx.put(f"{opensearch_url}/{name}/_doc/1?refresh=true", json={"text": "vitamin D"})
    yield name
    httpx.delete(f"{opensearch_url}/{name}")


def search(proxy_url: str, target: str, query: dict[str, Any], api: str = "_search"):
    return httpx.post(f"{proxy_url}/{target}/{api}", json={"size": 10, "query": query}, timeout=60)


def assert_refused(response: httpx.Response, *words: str) -> str:
    """A 400 in the cluster's error shape whose reason holds every word; returns the reason."""
    assert response.status_code == 400, response.text[:300]
    body = response.json()
    assert body["status"] == 400
    assert body["error"]["type"].startswith("itlr_")
    reason = body["error"]["reason"]
    assert body["error"]["root_cause"][0]["reason"] == reason
    for word in words:
        assert word in reason, reason
    return reason


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text[:300]
    return [hit["_id"] for hit in response.json()["hits"]["hits"]]


def test_a_clause_under_must_not_is_refused_instead_of_returning_no_hits(
    proxy_url, demo_index
) -> None:
    query = {"bool": {"must_not": [CLAUSE]}}
    reason = assert_refused(
        search(proxy_url, demo_index.index_name, query), "must_not", "bool.must"
    )
    assert "inside the brackets" in reason


def test_a_clause_nested_under_must_not_is_refused_too(proxy_url, demo_index) -> None:
    query = {"bool": {"must_not": [{"bool": {"must": [CLAUSE]}}]}}
    assert_refused(search(proxy_url, demo_index.index_name, query), "must_not")


def test_a_clause_beside_another_should_clause_is_refused_instead_of_dropping_it(
    proxy_url, demo_index
) -> None:
    query = {"bool": {"should": [CLAUSE, {"match": {"text": "sleep"}}]}}
    assert_refused(search(proxy_url, demo_index.index_name, query), "should", "only bool.should")


def test_a_clause_as_the_only_should_clause_ranks_like_a_must_clause(proxy_url, demo_index) -> None:
    as_should = ids(search(proxy_url, demo_index.index_name, {"bool": {"should": [CLAUSE]}}))
    as_must = ids(search(proxy_url, demo_index.index_name, {"bool": {"must": [CLAUSE]}}))
    assert as_should == as_must
    assert len(as_must) == 10


def test_a_clause_inside_another_compound_query_is_refused(proxy_url, demo_index) -> None:
    query = {"boosting": {"positive": {"match_all": {}}, "negative": CLAUSE, "negative_boost": 0.5}}
    assert_refused(search(proxy_url, demo_index.index_name, query), "boosting.negative")


def test_count_with_a_clause_is_refused_instead_of_counting_zero(proxy_url, demo_index) -> None:
    response = httpx.post(
        f"{proxy_url}/{demo_index.index_name}/_count", json={"query": {"bool": {"must": [CLAUSE]}}}
    )
    assert_refused(response, "_count", "_search")


def test_count_without_a_clause_still_passes_through(proxy_url, opensearch_url, demo_index) -> None:
    body = {"query": {"match": {"text": "vitamin"}}}
    through = httpx.post(f"{proxy_url}/{demo_index.index_name}/_count", json=body)
    direct = httpx.post(f"{opensearch_url}/{demo_index.index_name}/_count", json=body)
    assert through.status_code == direct.status_code == 200
    assert through.json()["count"] == direct.json()["count"] > 0


def test_a_search_template_with_a_clause_is_refused(proxy_url, demo_index) -> None:
    inline = {
        "source": '{"query": {"query_string": {"query": "{{q}}"}}}',
        "params": {"q": f"itlr:({LOGICAL})"},
    }
    response = httpx.post(f"{proxy_url}/{demo_index.index_name}/_search/template", json=inline)
    assert_refused(response, "_search/template")
    # A template whose source names the virtual field, its text in params.
    keyed = {"source": '{"query": {"match": {"itlr": "{{q}}"}}}', "params": {"q": "sleep"}}
    response = httpx.post(f"{proxy_url}/{demo_index.index_name}/_search/template", json=keyed)
    assert_refused(response, "_search/template")


def test_all_indexes_are_refused_when_some_hold_no_itlr_vectors(
    proxy_url, demo_index, plain_index
) -> None:
    reason = assert_refused(search(proxy_url, "_all", CLAUSE), "without itlr vectors")
    assert plain_index in reason


def test_a_wildcard_matching_plain_indexes_too_is_refused_naming_them(
    proxy_url, demo_index, plain_index, prefix
) -> None:
    reason = assert_refused(search(proxy_url, f"{prefix}-*", CLAUSE), "without itlr vectors")
    assert plain_index in reason and demo_index.index_name not in reason


def test_a_wildcard_matching_only_itlr_indexes_is_resolved(
    proxy_url, demo_index, plain_index, prefix
) -> None:
    through_pattern = ids(search(proxy_url, f"{prefix}-doc*", CLAUSE))
    assert through_pattern == ids(search(proxy_url, demo_index.index_name, CLAUSE))


# -- where a clause may sit (pure: no server) -----------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        CLAUSE,
        {"bool": {"must": CLAUSE}},
        {"bool": {"filter": [{"bool": {"must": [CLAUSE]}}]}},
        {"bool": {"must": [{"match": {"text": "x"}}], "should": [CLAUSE]}},
        {"constant_score": {"filter": CLAUSE}},
        {"bool": {"must": [CLAUSE], "should": [], "must_not": [{"match": {"text": "x"}}]}},
    ],
    ids=["alone", "must", "filter-must", "only-should", "constant-score", "kibana-shape"],
)
def test_a_clause_anded_with_the_rest_is_accepted(query) -> None:
    assert find_logical_search(query, "itlr") is not None


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"bool": {"must_not": CLAUSE}}, "must_not"),
        ({"bool": {"filter": [{"bool": {"must_not": [{"bool": {"must": CLAUSE}}]}}]}}, "must_not"),
        ({"bool": {"should": [CLAUSE, {"match": {"text": "x"}}]}}, "should"),
        ({"dis_max": {"queries": [CLAUSE]}}, "dis_max.queries"),
        ({"nested": {"path": "p", "query": CLAUSE}}, "nested.query"),
        ({"function_score": {"query": CLAUSE}}, "function_score.query"),
    ],
    ids=["must-not", "deep-must-not", "should-with-others", "dis-max", "nested", "function-score"],
)
def test_a_clause_not_anded_with_the_rest_is_refused_naming_the_place(query, named) -> None:
    with pytest.raises(ClauseError, match=re.escape(named)) as refused:
        find_logical_search(query, "itlr")
    assert "bool.must or bool.filter" in refused.value.message


def test_a_clause_is_found_in_template_sources_and_ndjson_bodies() -> None:
    template = b'{"source": "{\\"query\\": {\\"match\\": {\\"itlr\\": \\"{{q}}\\"}}}"}'
    assert raw_names_field(template, "itlr")
    ndjson = b'{"index": "a"}\n{"source": {"query": {"query_string": {"query": "itlr:(x)"}}}}\n'
    assert raw_names_field(ndjson, "itlr")
    assert not raw_names_field(b'{"query": {"match": {"text": "itlr is a word"}}}', "itlr")
    assert not raw_names_field(b"not json", "itlr")
