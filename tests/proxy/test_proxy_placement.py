"""Where an itlr clause may sit (issue 42.4): the proxy rewrites a clause only where it means
"rank by this", and refuses it everywhere else with a 400 in the cluster's error shape, in front
of a real OpenSearch. Each probe of the issue was a 200 with wrong hits before: `_count?q=`
counting 0, `q=NOT itlr:(...)` returning every document, `source=` finding nothing, negated
shapes scoring every document 1.0, a default-OR `query_string` dropping its other clause,
`simple_query_string` searching the words, clauses in aggregations, `post_filter` and `rescore`
passing through, an `_msearch` header `[]` searching every index unrewritten.

The pure cases (`SHAPES`) are the table in docs/query-bar.md."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from itlr.proxy.clause import ClauseError
from itlr.proxy.placement import walk

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
CLAUSE = {"query_string": {"query": f"itlr:({LOGICAL})"}}
WORDS = {"match": {"text": "sleep"}}


def dql(value: str, kind: str = "match_phrase") -> dict[str, Any]:
    """A DQL/KQL `itlr:"value"` as Dashboards and Kibana compile it."""
    return {"bool": {"should": [{kind: {"itlr": value}}], "minimum_should_match": 1}}


def lucene(text: str, **options: Any) -> dict[str, Any]:
    return {"query_string": {"query": text, **options}}


# (shape, body, what the proxy does): "rewritten", "refused" or "passed" (no itlr clause).
SHAPES: list[tuple[str, dict[str, Any], str]] = [
    ("Lucene clause alone", {"query": CLAUSE}, "rewritten"),
    ("Lucene clause AND a filter", {"query": lucene(f"itlr:({LOGICAL}) AND topic:x")}, "rewritten"),
    ("Lucene +clause beside another", {"query": lucene(f"+itlr:({LOGICAL}) topic:x")}, "rewritten"),
    (
        "Lucene clause beside another, default_operator AND",
        {"query": lucene(f"itlr:({LOGICAL}) topic:x", default_operator="AND")},
        "rewritten",
    ),
    (
        "clause under bool.must / bool.filter",
        {"query": {"bool": {"filter": [CLAUSE]}}},
        "rewritten",
    ),
    ("clause as the only bool.should", {"query": {"bool": {"should": [CLAUSE]}}}, "rewritten"),
    (
        "clause under constant_score.filter",
        {"query": {"constant_score": {"filter": CLAUSE}}},
        "rewritten",
    ),
    (
        "DQL itlr:a and not itlr:b",
        {"query": {"bool": {"filter": [dql("a"), {"bool": {"must_not": dql("b")}}]}}},
        "rewritten",
    ),
    (
        "DQL itlr:a or itlr:b",
        {"query": {"bool": {"should": [dql("a"), dql("b")], "minimum_should_match": 1}}},
        "rewritten",
    ),
    (
        "Lucene clause beside another, default OR",
        {"query": lucene(f"itlr:({LOGICAL}) text:train")},
        "refused",
    ),
    ("Lucene clause OR another", {"query": lucene(f"itlr:({LOGICAL}) OR text:train")}, "refused"),
    ("Lucene NOT clause", {"query": lucene(f"NOT itlr:({LOGICAL})")}, "refused"),
    ("Lucene -clause", {"query": lucene(f"-itlr:({LOGICAL})")}, "refused"),
    (
        "Lucene clause inside brackets",
        {"query": lucene(f"(itlr:({LOGICAL}) AND a:b) OR c:d")},
        "refused",
    ),
    ("Lucene two clauses", {"query": lucene("itlr:(a) AND itlr:(b)")}, "refused"),
    ("Lucene clause of NOT terms only", {"query": lucene('itlr:(NOT "bone health")')}, "refused"),
    (
        "simple_query_string with a clause",
        {"query": {"simple_query_string": {"query": f"itlr:({LOGICAL})"}}},
        "refused",
    ),
    (
        "query_string with default_field itlr",
        {"query": lucene("vitamin", default_field="itlr")},
        "refused",
    ),
    ("term / exists query on itlr", {"query": {"exists": {"field": "itlr"}}}, "refused"),
    ("Lucene itlr:word without brackets", {"query": lucene("itlr:vitamin")}, "refused"),
    ("Lucene _exists_:itlr", {"query": lucene("_exists_:itlr AND a:b")}, "refused"),
    ("Lucene clause AND itlr:word", {"query": lucene("itlr:(a) AND itlr:b")}, "refused"),
    ("clause under bool.must_not", {"query": {"bool": {"must_not": [CLAUSE]}}}, "refused"),
    (
        "bool.must_not > match itlr",
        {"query": {"bool": {"must_not": [{"match": {"itlr": "bone health"}}]}}},
        "refused",
    ),
    (
        "DQL not itlr:x (bool.filter > bool.must_not > match_phrase)",
        {"query": {"bool": {"filter": [{"bool": {"must_not": dql("bone health")}}]}}},
        "refused",
    ),
    (
        "clause beside other bool.should",
        {"query": {"bool": {"should": [CLAUSE, WORDS]}}},
        "refused",
    ),
    (
        "DQL itlr:a or text:b",
        {
            "query": {
                "bool": {"should": [dql("a"), {"match": {"text": "b"}}], "minimum_should_match": 1}
            }
        },
        "refused",
    ),
    (
        "clause in dis_max / nested / function_score / boosting",
        {"query": {"dis_max": {"queries": [CLAUSE]}}},
        "refused",
    ),
    ("clause in post_filter", {"query": WORDS, "post_filter": CLAUSE}, "refused"),
    (
        "clause in rescore",
        {"query": WORDS, "rescore": {"query": {"rescore_query": CLAUSE}}},
        "refused",
    ),
    (
        "clause in an aggregation's filter",
        {"query": WORDS, "aggs": {"a": {"filter": CLAUSE}}},
        "refused",
    ),
    (
        "clause in a nested aggregation's filters",
        {
            "aggs": {
                "a": {
                    "terms": {"field": "t"},
                    "aggs": {"b": {"filters": {"filters": {"x": CLAUSE}}}},
                }
            }
        },
        "refused",
    ),
    (
        "clause in a highlight_query",
        {"query": WORDS, "highlight": {"fields": {"text": {}}, "highlight_query": CLAUSE}},
        "refused",
    ),
    ("itlr as a word in a match query", {"query": {"match": {"text": "itlr:(a)"}}}, "passed"),
    (
        "aggregation or filters bucket named itlr",
        {"aggs": {"itlr": {"filters": {"filters": {"itlr": WORDS}}}}},
        "passed",
    ),
    ("no clause anywhere", {"query": WORDS, "post_filter": WORDS}, "passed"),
]


def verdict(body: dict[str, Any]) -> str:
    try:
        return "passed" if walk(body, "itlr") is None else "rewritten"
    except ClauseError:
        return "refused"


@pytest.mark.parametrize(("shape", "body", "expected"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_place_a_clause_can_sit_is_rewritten_refused_or_passed_through(
    shape: str, body: dict[str, Any], expected: str
) -> None:
    assert verdict(body) == expected


def test_a_refusal_says_where_a_clause_may_go() -> None:
    for _shape, body, expected in SHAPES:
        if expected == "refused":
            with pytest.raises(ClauseError) as refused:
                walk(body, "itlr")
            message = refused.value.message
            assert "\n" not in message
            assert any(
                words in message.lower()
                for words in ("goes in a search's query", "bool.must", " and", "positive term")
            ), message


# -- in front of a real OpenSearch ----------------------------------------------------------


def assert_refused(response: httpx.Response, *words: str) -> str:
    """A 400 in the cluster's error shape whose one-line reason holds every word."""
    assert response.status_code == 400, response.text[:400]
    body = response.json()
    assert body["status"] == 400 and body["error"]["type"].startswith("itlr_")
    reason = body["error"]["reason"]
    assert body["error"]["root_cause"][0]["reason"] == reason and "\n" not in reason
    for word in words:
        assert word in reason, reason
    return reason


def hit_ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text[:400]
    return [hit["_id"] for hit in response.json()["hits"]["hits"]]


def body_search(url: str, index: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/{index}/_search", json=body, timeout=60)


@pytest.fixture(scope="module")
def ranked(proxy_url, opensearch_demo) -> list[str]:
    """The hits of the logical query sent the ordinary way, as the body's query."""
    ids = hit_ids(body_search(proxy_url, opensearch_demo.index_name, {"size": 10, "query": CLAUSE}))
    assert len(ids) == 10
    return ids


def test_count_with_q_is_refused_instead_of_counting_zero(proxy_url, opensearch_demo) -> None:
    response = httpx.get(
        f"{proxy_url}/{opensearch_demo.index_name}/_count", params={"q": f"itlr:({LOGICAL})"}
    )
    assert_refused(response, "_count", "_search")


def test_a_search_with_q_not_clause_is_refused_instead_of_returning_every_document(
    proxy_url, opensearch_demo
) -> None:
    response = httpx.get(
        f"{proxy_url}/{opensearch_demo.index_name}/_search", params={"q": f"NOT itlr:({LOGICAL})"}
    )
    assert_refused(response, "AND")


def test_a_search_with_q_clause_ranks_as_the_body_query_does(
    proxy_url, opensearch_demo, ranked
) -> None:
    response = httpx.get(
        f"{proxy_url}/{opensearch_demo.index_name}/_search",
        params={"q": f"itlr:({LOGICAL})", "size": "10"},
        timeout=60,
    )
    assert hit_ids(response) == ranked


def test_q_with_a_filter_and_default_operator_and_filters_the_ranking(
    proxy_url, opensearch_demo
) -> None:
    response = httpx.get(
        f"{proxy_url}/{opensearch_demo.index_name}/_search",
        params={"q": f"itlr:({LOGICAL}) metadata.topic:vitamin_d", "default_operator": "AND"},
        timeout=60,
    )
    hits = response.json()["hits"]["hits"]
    assert response.status_code == 200 and hits
    assert {hit["_source"]["metadata"]["topic"] for hit in hits} == {"vitamin_d"}


def test_a_source_parameter_body_ranks_as_the_request_body_does(
    proxy_url, opensearch_demo, ranked
) -> None:
    source = json.dumps({"size": 10, "query": CLAUSE})
    response = httpx.get(
        f"{proxy_url}/{opensearch_demo.index_name}/_search",
        params={"source": source, "source_content_type": "application/json"},
        timeout=60,
    )
    assert hit_ids(response) == ranked


@pytest.mark.parametrize(
    "query",
    [
        {"bool": {"must_not": [{"match": {"itlr": "bone health"}}]}},
        {"bool": {"filter": [{"bool": {"must_not": dql("bone health")}}]}},
    ],
    ids=["must-not-match", "dql-filter-must-not-match-phrase"],
)
def test_a_negated_clause_alone_is_refused_instead_of_scoring_every_document_alike(
    proxy_url, opensearch_demo, query
) -> None:
    assert_refused(body_search(proxy_url, opensearch_demo.index_name, {"query": query}), "NOT")


def test_a_default_or_query_string_is_refused_instead_of_dropping_its_other_clause(
    proxy_url, opensearch_demo
) -> None:
    query = {"query_string": {"query": f"itlr:({LOGICAL}) text:train"}}
    assert_refused(body_search(proxy_url, opensearch_demo.index_name, {"query": query}), "AND")


def test_simple_query_string_with_a_clause_is_refused_instead_of_matching_words(
    proxy_url, opensearch_demo
) -> None:
    query = {"simple_query_string": {"query": f"itlr:({LOGICAL})"}}
    response = body_search(proxy_url, opensearch_demo.index_name, {"query": query})
    assert_refused(response, "simple_query_string", "query_string")


@pytest.mark.parametrize(
    ("extra", "place"),
    [
        ({"post_filter": CLAUSE}, "post_filter"),
        ({"rescore": {"window_size": 10, "query": {"rescore_query": CLAUSE}}}, "rescore"),
        ({"aggs": {"hits": {"filter": CLAUSE}}}, "aggs.hits.filter"),
        (
            {"aggs": {"t": {"terms": {"field": "doc_id"}, "aggs": {"f": {"filter": CLAUSE}}}}},
            "aggs.t.aggs.f.filter",
        ),
    ],
    ids=["post_filter", "rescore", "aggs-filter", "nested-aggs-filter"],
)
def test_a_clause_outside_the_query_is_refused_instead_of_passing_through(
    proxy_url, opensearch_demo, extra, place
) -> None:
    body = {"query": {"match": {"text": "vitamin"}}, **extra}
    assert_refused(body_search(proxy_url, opensearch_demo.index_name, body), place)


@pytest.mark.parametrize("header", [[], "x", None, 1])
def test_an_msearch_header_that_is_no_object_is_refused_when_its_search_has_a_clause(
    proxy_url, header
) -> None:
    ndjson = f"{json.dumps(header)}\n{json.dumps({'query': CLAUSE})}\n"
    response = httpx.post(
        f"{proxy_url}/_msearch",
        content=ndjson,
        headers={"content-type": "application/x-ndjson"},
        timeout=60,
    )
    assert_refused(response, "header")


def test_an_msearch_header_without_an_index_is_refused_when_its_search_has_a_clause(
    proxy_url,
) -> None:
    ndjson = f"{{}}\n{json.dumps({'query': CLAUSE})}\n"
    response = httpx.post(
        f"{proxy_url}/_msearch", content=ndjson, headers={"content-type": "application/x-ndjson"}
    )
    assert_refused(response, "index")


@pytest.fixture
def stored_templates(opensearch_url) -> Iterator[tuple[str, str]]:
    """Two stored search templates: one whose source holds a clause, one without."""
    suffix = uuid.uuid4().hex[:8]
    sources = {
        f"qb-logical-{suffix}": '{"query": {"query_string": {"query": "itlr:({{q}})"}}}',
        f"qb-plain-{suffix}": '{"query": {"match": {"text": "{{q}}"}}}',
    }
    for name, source in sources.items():
        stored = httpx.put(
            f"{opensearch_url}/_scripts/{name}",
            json={"script": {"lang": "mustache", "source": source}},
        )
        assert stored.status_code == 200, stored.text
    yield tuple(sources)  # type: ignore[misc]
    for name in sources:
        httpx.delete(f"{opensearch_url}/_scripts/{name}")


def test_a_stored_template_whose_source_holds_a_clause_is_refused(
    proxy_url, opensearch_demo, stored_templates
) -> None:
    logical, plain = stored_templates
    path = f"{proxy_url}/{opensearch_demo.index_name}/_search/template"
    refused = httpx.post(path, json={"id": logical, "params": {"q": "vitamin"}}, timeout=60)
    assert_refused(refused, "_search/template")
    passed = httpx.post(path, json={"id": plain, "params": {"q": "vitamin"}}, timeout=60)
    assert passed.status_code == 200 and passed.json()["hits"]["hits"]


def test_a_body_clause_with_a_q_parameter_that_would_replace_it_is_refused(
    proxy_url, opensearch_demo
) -> None:
    response = httpx.post(
        f"{proxy_url}/{opensearch_demo.index_name}/_search",
        params={"q": "text:vitamin"},
        json={"query": CLAUSE},
        timeout=60,
    )
    assert_refused(response, "q=", "replaces")
