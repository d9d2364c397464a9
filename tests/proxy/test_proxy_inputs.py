"""No input makes the proxy answer 500 or show a traceback (issue 42.3, the proxy's part), in
front of a real OpenSearch: a lone surrogate (`"\\ud800"`) in a query string or anywhere in a
search body is a 400 in the cluster's error shape (it was a plain-text 500), so is a 400-digit
integer in a filter of a logical search; and a property test throws arbitrary JSON bodies at
`_search` and asserts the answer is never a 5xx and every error is in the cluster's shape."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.opensearch

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'


def send(client: httpx.Client, path: str, text: str) -> httpx.Response:
    """`text` as sent: json.dumps writes a lone surrogate as its `\\ud800` escape."""
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


def assert_cluster_error(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text[:400]
    body = response.json()
    assert body["status"] == status
    assert body["error"]["root_cause"][0]["reason"] == body["error"]["reason"]
    assert "\n" not in body["error"]["reason"] and "Traceback" not in response.text
    return body["error"]


@pytest.mark.parametrize(
    "body",
    [
        {"query": {"query_string": {"query": 'itlr:("vitamin \ud800 D")'}}},
        {"query": {"query_string": {"query": f"itlr:({LOGICAL}) AND text:\ud800"}}},
        {"query": {"query_string": {"query": f"itlr:({LOGICAL})"}}, "_source": ["\udfff"]},
        {"query": {"query_string": {"query": f"itlr:({LOGICAL})"}}, "search_after": ["\ud800"]},
        {"query": {"bool": {"filter": [{"term": {"\ud800": "x"}}]}}},
    ],
    ids=["in-the-clause", "in-the-rest", "in-source", "in-search-after", "in-a-filter-field"],
)
def test_a_lone_surrogate_is_a_400_in_the_cluster_shape(client, opensearch_demo, body) -> None:
    response = send(client, f"/{opensearch_demo.index_name}/_search", json.dumps(body))
    error = assert_cluster_error(response)
    assert "surrogate" in error["reason"]


def test_a_lone_surrogate_in_an_msearch_line_is_a_400_in_the_cluster_shape(
    client, opensearch_demo
) -> None:
    lines = [
        {"index": opensearch_demo.index_name},
        {"query": {"query_string": {"query": "\ud800"}}},
    ]
    response = client.post(
        "/_msearch",
        content="".join(json.dumps(line) + "\n" for line in lines).encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    assert "surrogate" in assert_cluster_error(response)["reason"]


@pytest.mark.parametrize("filter_kind", ["term", "range"])
def test_a_400_digit_integer_in_a_filter_of_a_logical_search_is_a_400(
    client, opensearch_demo, filter_kind
) -> None:
    huge = "9" * 400
    condition = (
        f'{{"term": {{"metadata.year": {huge}}}}}'
        if filter_kind == "term"
        else f'{{"range": {{"metadata.year": {{"gte": {huge}}}}}}}'
    )
    clause = json.dumps({"query_string": {"query": f"itlr:({LOGICAL})"}})
    text = f'{{"query": {{"bool": {{"must": [{clause}], "filter": [{condition}]}}}}}}'
    response = send(client, f"/{opensearch_demo.index_name}/_search", text)
    assert response.status_code == 400, response.text[:400]
    assert "error" in response.json()


# -- arbitrary JSON --------------------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "query",
        "bool",
        "must",
        "filter",
        "should",
        "must_not",
        "match",
        "match_phrase",
        "query_string",
        "simple_query_string",
        "default_operator",
        "minimum_should_match",
        "itlr",
        "text",
        "size",
        "from",
        "sort",
        "_source",
        "highlight",
        "fields",
        "aggs",
        "post_filter",
        "rescore",
        "rescore_query",
        "search_after",
        "track_total_hits",
    ]
) | st.text(max_size=6)
CLAUSES = st.sampled_from(
    [
        f"itlr:({LOGICAL})",
        "itlr:(vitamin)",
        "itlr:(",
        "NOT itlr:(sleep)",
        "itlr:(a) b",
        'itlr:("a" AND AND)',
        "itlr:(NOT x)",
    ]
)
SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | CLAUSES
    | SURROGATES
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)
# Bodies with a clause where the walk looks first, so that most examples reach the rewrite.
PLANTED = st.builds(
    lambda query, extra: {**extra, "query": query},
    st.one_of(
        st.builds(lambda text: {"query_string": {"query": text}}, CLAUSES | SCALARS),
        st.builds(lambda value: {"bool": {"must": [{"match": {"itlr": value}}]}}, SCALARS),
        st.builds(
            lambda inner: {"bool": {"filter": [inner], "must": [{"match": {"itlr": "a"}}]}}, JSON
        ),
    ),
    st.dictionaries(KEYS, JSON, max_size=4),
)
BODIES = PLANTED | st.dictionaries(KEYS, JSON, max_size=5) | JSON


@settings(
    max_examples=int(os.environ.get("ITLR_PROXY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=BODIES)
def test_no_json_body_makes_the_proxy_answer_a_5xx(client, opensearch_demo, body) -> None:
    response = send(client, f"/{opensearch_demo.index_name}/_search", json.dumps(body))
    assert response.status_code < 500, (body, response.text[:400])
    if response.status_code >= 400:
        answer = response.json()
        assert "error" in answer and answer.get("status") == response.status_code, answer
        assert "Traceback" not in response.text
