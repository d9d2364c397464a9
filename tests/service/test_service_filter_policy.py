"""The JSON service's `filter` is an allow-list (issue 57.2): clauses that compare fields of the
served index with values from the request, inside bool / constant_score / dis_max / boosting /
nested. A `terms` lookup read a secret from another index with the service's credentials and
filtered the hits by it; a `script` filter ran the client's Painless. Each clause that reaches
another index or runs code is now a one-line 400 naming it, before any request goes out; on a
real OpenSearch and on the secured Elasticsearch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import itlr
from itlr.proxy import serving
from itlr.service import create_app
from itlr.service.filter_policy import check_served_filter

QUERY = '"vitamin D" AND NOT "bone health"'
SECRET_INDEX = "itlr-filter-secret"

# Cluster indexes itlr makes keep a document's own fields under `metadata.`.
LOOKUP = {"terms": {"metadata.topic": {"index": SECRET_INDEX, "id": "s1", "path": "secret.topic"}}}
REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("terms", LOOKUP),
    ("terms", {"bool": {"filter": [{"term": {"topic": "sleep"}}, LOOKUP]}}),
    ("script", {"script": {"script": {"source": "return true;"}}}),
    ("script", {"bool": {"must_not": {"script": {"script": "1 == 1"}}}}),
    ("script_score", {"script_score": {"query": {"match_all": {}}, "script": "1"}}),
    ("function_score", {"function_score": {"query": {"match_all": {}}}}),
    ("percolate", {"percolate": {"field": "q", "index": SECRET_INDEX, "id": "s1"}}),
    ("more_like_this", {"more_like_this": {"like": [{"_index": SECRET_INDEX, "_id": "s1"}]}}),
    ("geo_shape", {"geo_shape": {"loc": {"indexed_shape": {"index": SECRET_INDEX, "id": "s1"}}}}),
    ("wrapper", {"wrapper": {"query": "eyJtYXRjaF9hbGwiOnt9fQ=="}}),
    ("terms_set", {"terms_set": {"topic": {"terms": ["a"], "minimum_should_match_script": {}}}}),
    ("intervals", {"intervals": {"text": {"match": {"query": "x", "filter": {"script": {}}}}}}),
    ("nested.inner_hits", {"nested": {"path": "p", "query": {"match_all": {}}, "inner_hits": {}}}),
    ("has_child", {"constant_score": {"filter": {"has_child": {"type": "c", "query": {}}}}}),
]
ALLOWED: list[dict[str, Any]] = [
    {"term": {"metadata.topic": "vitamin_d"}},
    {"terms": {"topic": ["vitamin_d", "sleep"]}},
    {
        "bool": {
            "must_not": [{"term": {"topic": "sleep"}}],
            "filter": {"exists": {"field": "topic"}},
        }
    },
    {"constant_score": {"filter": {"range": {"year": {"gte": 2000}}}, "boost": 2}},
]


@pytest.mark.parametrize(
    ("clause", "spec"), REFUSED, ids=[f"{c}-{n}" for n, (c, _) in enumerate(REFUSED)]
)
def test_a_clause_that_reaches_beyond_the_index_or_runs_code_is_named(clause, spec) -> None:
    with pytest.raises(itlr.ConfigurationError) as refused:
        check_served_filter(spec)
    message = str(refused.value)
    assert f"`{clause}`" in message and "\n" not in message and "a filter may use" in message


@pytest.mark.parametrize("spec", ALLOWED)
def test_clauses_on_the_served_index_pass(spec) -> None:
    check_served_filter(spec)


@pytest.fixture(scope="module")
def served(opensearch_url, corpus) -> Iterator[itlr.Index]:
    """A served index and, beside it, an index holding a secret the service must not read."""
    name = f"itlr-filter-{uuid.uuid4().hex[:8]}"
    index = itlr.Index.open(name, url=opensearch_url, create=True)
    assert not index.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus[:80]]).failed
    secret = {"secret": {"topic": "vitamin_d"}}
    httpx.put(f"{opensearch_url}/{SECRET_INDEX}/_doc/s1?refresh=true", json=secret)
    yield index
    httpx.delete(f"{opensearch_url}/{name}")
    httpx.delete(f"{opensearch_url}/{SECRET_INDEX}")


@pytest.mark.opensearch
def test_the_service_refuses_a_lookup_or_script_filter_on_opensearch(served) -> None:
    with serving(create_app(served)) as url:
        allowed = httpx.post(
            f"{url}/search", json={"query": QUERY, "filter": ALLOWED[0]}, timeout=60
        )
        assert allowed.status_code == 200 and allowed.json()["hits"], allowed.text[:300]
        for clause, spec in REFUSED[:4]:
            for path in ("/search", "/translate"):
                answer = httpx.post(
                    f"{url}{path}", json={"query": QUERY, "filter": spec}, timeout=60
                )
                assert answer.status_code == 400, answer.text[:300]
                error = answer.json()["error"]
                assert f"`{clause}`" in error and "\n" not in error
                assert "hits" not in answer.json()


@pytest.mark.elasticsearch
def test_the_service_refuses_a_lookup_filter_before_asking_elasticsearch(
    secured_elasticsearch, corpus
) -> None:
    cluster = secured_elasticsearch
    name = f"itlr-secure-a-filter-{uuid.uuid4().hex[:6]}"
    auth = {"user": cluster.admin[0], "password": cluster.admin[1], "ca_file": cluster.ca_file}
    index = itlr.Index.open(name, url=cluster.url, engine="elasticsearch", create=True, **auth)
    try:
        assert not index.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus[:20]]).failed
        with serving(create_app(index)) as url:
            answer = httpx.post(
                f"{url}/search", json={"query": QUERY, "filter": LOOKUP}, timeout=60
            )
        assert answer.status_code == 400, answer.text[:300]
        assert "`terms`" in answer.json()["error"]
    finally:
        with cluster.client() as http:
            http.delete(f"/{name}")
