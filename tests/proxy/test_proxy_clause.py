"""The query-bar proxy's pure parts: finding the itlr clause in what Kibana and Dashboards send,
and rewriting the body around it (no server involved)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from itlr.candidates import plan_candidates
from itlr.engines.dialect import Dialect
from itlr.engines.factory import dialect_for
from itlr.errors import ConfigurationError
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.proxy import ClauseError, check_exposure, find_logical_search
from itlr.proxy.answers import COUNT_AGGREGATION
from itlr.proxy.clause import LogicalSearch
from itlr.proxy.rewrite import rewrite_body
from itlr.query import parse
from parity import candidate_bool

FIXTURES = Path(__file__).parent / "fixtures" / "query_bar"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def searched_body(fixture: dict[str, Any]) -> dict[str, Any]:
    return fixture["body"] if "body" in fixture else fixture["lines"][1]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_logical_query_and_the_rest_are_found_in_what_the_ui_sends(name: str) -> None:
    fixture = load(name)
    found = find_logical_search(searched_body(fixture)["query"], "itlr")
    assert found is not None
    assert str(found.query) == str(parse(fixture["expected_query"]))
    assert found.rest == fixture["expected_rest"]


def test_the_field_name_is_configurable() -> None:
    query = {"query_string": {"query": 'meaning:("a" AND NOT "b")'}}
    assert find_logical_search(query, "itlr") is None
    found = find_logical_search(query, "meaning")
    assert found is not None and str(found.query) == '("a" AND NOT "b")'
    assert found.rest is None


def test_a_query_without_the_virtual_field_is_left_alone() -> None:
    body = load("dashboards_lucene_msearch.json")["lines"][3]
    assert find_logical_search(body["query"], "itlr") is None
    assert find_logical_search({"match": {"text": "itlr:(a)"}}, "itlr") is None


def test_a_lucene_syntax_error_points_into_the_query_bar_text() -> None:
    text = 'lang:en AND itlr:("vitamin D" AND AND "bone")'
    with pytest.raises(ClauseError) as caught:
        find_logical_search({"query_string": {"query": text}}, "itlr")
    assert caught.value.position == text.index("AND AND") + 4
    assert caught.value.to_dict()["query"] == text


def test_an_unclosed_clause_is_refused_at_its_bracket() -> None:
    with pytest.raises(ClauseError) as caught:
        find_logical_search({"query_string": {"query": "itlr:(a AND (b)"}}, "itlr")
    assert caught.value.position == 5


@pytest.mark.parametrize(
    "text",
    ["lang:en OR itlr:(a)", "itlr:(a) OR lang:en", "NOT itlr:(a)", "-itlr:(a)", "itlr:(a) || x:1"],
)
def test_a_clause_joined_by_or_or_negated_from_outside_is_refused(text: str) -> None:
    with pytest.raises(ClauseError, match="joined to the rest of the query with AND"):
        find_logical_search({"query_string": {"query": text}}, "itlr")


def test_two_lucene_clauses_are_refused() -> None:
    with pytest.raises(ClauseError, match="2 itlr"):
        find_logical_search({"query_string": {"query": "itlr:(a) AND itlr:(b)"}}, "itlr")


def test_a_kql_clause_under_an_or_with_other_fields_is_refused() -> None:
    mixed = {
        "bool": {
            "should": [
                {"bool": {"should": [{"match_phrase": {"itlr": "a"}}], "minimum_should_match": 1}},
                {"bool": {"should": [{"match": {"lang": "en"}}], "minimum_should_match": 1}},
            ],
            "minimum_should_match": 1,
        }
    }
    with pytest.raises(ClauseError, match="joined to the rest"):
        find_logical_search(mixed, "itlr")


def test_kibana_filters_in_must_clause_are_read_as_and() -> None:
    term = {"bool": {"should": [{"match_phrase": {"itlr": "a"}}], "minimum_should_match": 1}}
    other = {"bool": {"should": [{"match_phrase": {"itlr": "b"}}], "minimum_should_match": 1}}
    found = find_logical_search({"bool": {"must": [term, other]}}, "itlr")
    assert found is not None and str(found.query) == '("a" AND "b")'


def test_numbers_and_object_form_match_values_are_terms() -> None:
    query = {
        "bool": {
            "filter": [
                {"bool": {"should": [{"match": {"itlr": 1984}}], "minimum_should_match": 1}},
                {"match_phrase": {"itlr": {"query": "big brother"}}},
            ]
        }
    }
    found = find_logical_search(query, "itlr")
    assert found is not None and found.query.terms == ("1984", "big brother")


# -- rewriting -----------------------------------------------------------------------------


def _dialect(engine: str) -> Dialect:
    return dialect_for(engine, server_version="8.19.0" if engine == "elasticsearch" else None)


# What the proxy counts upstream for hybrid truths (the body's shape does not depend on it).
STATISTICS = CorpusStats(documents=10, total_length=100, df={"a": 2})


@pytest.mark.parametrize("engine", ["opensearch", "elasticsearch"])
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_rewritten_body_keeps_what_the_ui_sent_and_ranks_by_the_logical_score(
    name: str, engine: str
) -> None:
    body = searched_body(load(name))
    found = find_logical_search(body["query"], "itlr")
    assert found is not None
    vectors = np.eye(len(found.query.terms), 4, dtype=np.float32)
    rewritten = rewrite_body(body, found, _dialect(engine), vectors, SearchOptions(), STATISTICS)
    for kept in ("size", "fields", "docvalue_fields"):
        assert rewritten.get(kept) == body.get(kept)
    # The UI's aggregations are kept; the proxy's own counts hits.total (itlr.proxy.answers).
    aggregations = dict(rewritten.get("aggs") or {})
    assert "global" in aggregations.pop(COUNT_AGGREGATION)
    assert aggregations == (body.get("aggs") or {})
    # _source keeps what the UI excluded and leaves out itlr's own fields besides.
    if body.get("_source", True) is False:  # Kibana 8 reads `fields` instead
        assert rewritten["_source"] is False
    else:
        excluded = rewritten["_source"]["excludes"]
        itlr_fields = {"embedding", "itlr_hash", "itlr_tokens", "itlr_token_keys", "itlr_length"}
        assert itlr_fields <= set(excluded)
        assert all(name in excluded for name in body.get("_source", {}).get("excludes", []))
    # The UI's highlight block is kept whole, with a highlight_query for the positive terms.
    if "highlight" in body:
        highlight = dict(rewritten["highlight"])
        should = highlight.pop("highlight_query")["bool"]["should"]
        assert highlight == body["highlight"]
        words = " ".join(found.query.positive_terms)
        assert {"match": {"text": {"query": words, "lenient": True}}} in should
    script_score = rewritten["query"]["script_score"]
    assert script_score["script"]["id"].startswith("itlr-score")
    inner = candidate_bool(rewritten)
    assert inner["filter"] == [found.rest]
    # One kNN clause per search of the default candidate plan.
    assert len(inner["should"]) == len(plan_candidates(found.query, vectors, 100))
    # The logical score ranks; the UI's time sort only breaks ties.
    assert rewritten["sort"][0] == {"_score": "desc"}
    assert rewritten["sort"][1:] == body["sort"]
    # No user text in script source: terms reach the cluster as vectors in params only.
    assert "source" not in script_score["script"]


def test_the_candidate_budget_covers_the_page_the_ui_asks_for() -> None:
    found = LogicalSearch(parse('"a" AND NOT "b"'), None)
    body = {"from": 40, "size": 20, "query": {}}
    vectors = np.eye(2, 4, dtype=np.float32)
    rewritten = rewrite_body(
        body, found, _dialect("opensearch"), vectors, SearchOptions(), STATISTICS
    )
    knn = candidate_bool(rewritten)["should"][0]["knn"]["embedding"]
    assert knn["k"] == SearchOptions(k=60).candidate_budget
    assert (rewritten["from"], rewritten["size"]) == (40, 20)
    assert rewritten["sort"] == [{"_score": "desc"}, {"doc_id": "asc"}]


def test_the_proxy_refuses_to_listen_beyond_loopback_without_a_token() -> None:
    check_exposure("127.0.0.1", None)
    check_exposure("localhost", None)
    check_exposure("::1", None)
    check_exposure("0.0.0.0", "a-token")
    with pytest.raises(ConfigurationError, match="client token"):
        check_exposure("0.0.0.0", None)


def test_serve_proxy_refuses_a_public_address_without_a_token_before_loading_anything() -> None:
    import typer

    from itlr.cli.serve_proxy import serve_proxy

    with pytest.raises(typer.Exit) as stopped:
        serve_proxy("http://127.0.0.1:9", host="0.0.0.0", port=0, token=None)
    assert stopped.value.exit_code == 2


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/itlr-demo/_search", "_search"),
        ("/itlr-*,logs/_search", "_search"),
        ("/_msearch", "_msearch"),
        ("/itlr-demo/_msearch", "_msearch"),
        ("/itlr-demo/_async_search", "_async_search"),
        ("/_async_search/FmRldE8zREVEUzA2ZVpUeGs2ejJFUFEaMkZ5QVVrb3BTS2E1X21FTDJ0ZjRQUQ==", None),
        ("/itlr-demo/_doc/1", None),
        ("/_search/scroll", None),
    ],
)
def test_searches_and_async_submits_are_rewritten_but_polls_pass_through(
    path: str, api: str | None
) -> None:
    from itlr.proxy.app import SEARCH_PATH

    match = SEARCH_PATH.match(path)
    assert (match.group("api") if match else None) == api
