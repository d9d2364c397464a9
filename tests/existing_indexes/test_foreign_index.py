"""Searching an index itlr did not make (mapped and `_bulk`-loaded through REST: text `body`,
vector `vec`, `year`, `topic`; no `doc_id`, no `_meta.itlr`) on a real OpenSearch: the library,
the CLI and the query-bar proxy."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import create_index, delete_index, documents
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.errors import IndexStateError
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import IndexConfig

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'


@pytest.fixture(scope="module")
def foreign(opensearch_url, corpus, embedder) -> Iterator[str]:
    docs = documents(corpus, 60)
    vectors = embedder.encode([d["body"] for d in docs])
    for doc, vector in zip(docs, vectors, strict=True):
        doc["vec"] = vector.tolist()
    name = create_index(opensearch_url, "opensearch", docs, vector_dims=embedder.dims)
    yield name
    delete_index(opensearch_url, name)


@pytest.fixture(scope="module")
def index(opensearch_url, foreign) -> itlr.Index:
    return itlr.Index.open(foreign, url=opensearch_url, vector_field="vec", text_field="body")


def test_hits_carry_the_index_own_fields_without_its_vectors(index) -> None:
    hits = index.search(QUERY, k=5).hits
    assert len(hits) == 5
    for hit in hits:
        assert set(hit.fields) == {"year", "topic"}
        assert hit.text
        assert hit.sort is not None and hit.sort[1] == hit.id  # tie-broken on _id


def test_source_fields_choose_what_comes_back(index) -> None:
    (hit,) = index.search(QUERY, k=1, source_fields=("topic",)).hits
    assert hit.fields == {"topic": hit.fields["topic"]} and hit.text == ""


def test_from_and_search_after_page_through_the_same_ranking(index) -> None:
    top = [h.id for h in index.search(QUERY, k=6, mode="exact").hits]
    page = index.search(QUERY, k=3, mode="exact", from_=3).hits
    assert [h.id for h in page] == top[3:]
    first = index.search(QUERY, k=3, mode="exact").hits
    after = index.search(QUERY, k=3, mode="exact", search_after=tuple(first[-1].sort)).hits
    assert [h.id for h in after] == top[3:]


def test_highlights_mark_the_positive_terms_words_in_the_text_field(index) -> None:
    hits = index.search('"vitamin D" AND NOT "bone"', k=3, highlight=True).hits
    fragments = [f for h in hits for f in h.highlights.get("body", [])]
    assert any("<em>vitamin</em>" in f.lower() for f in fragments)
    assert not any("<em>bone</em>" in f.lower() for f in fragments)


def test_a_filter_on_a_field_the_mapping_lacks_warns(index) -> None:
    result = index.search(QUERY, k=3, filter={"term": {"colour": "red"}})
    assert result.hits == []
    assert any("'colour'" in w and "does not map" in w for w in result.warnings)
    kept = index.search(QUERY, k=3, filter={"term": {"topic": "sleep"}})
    assert kept.warnings == () or not any("does not map" in w for w in kept.warnings)
    assert {h.fields["topic"] for h in kept.hits} == {"sleep"}


def test_cli_search_on_the_foreign_index(opensearch_url, foreign) -> None:
    args = ["search", QUERY, "--url", opensearch_url, "--index", foreign, "--json"]
    result = CliRunner().invoke(app, [*args, "--vector-field", "vec", "--text-field", "body"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["hits"] and set(answer["hits"][0]["fields"]) == {"year", "topic"}
    # No document carries the lexical fields: cosine truths, said on stderr and in the answer.
    (said,) = [w for w in answer["warnings"] if "lexical fields" in w]
    assert f"warning: {said}" in result.stderr


def test_a_model_of_another_dimension_is_refused_in_one_line(opensearch_url, corpus) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 3), vector_dims=8)
    try:
        with pytest.raises(IndexStateError, match="8-dim vectors") as refused:
            itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
        assert "\n" not in str(refused.value)
    finally:
        delete_index(opensearch_url, name)


def test_the_proxy_searches_a_foreign_index_named_in_its_index_config(
    opensearch_url, foreign, index, embedder
) -> None:
    config = IndexConfig("itlr-foreign-*", "vec", "body")
    proxy = create_proxy_app(Connection(opensearch_url), embedder=embedder, indexes=(config,))
    body = {"size": 5, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    with serving(proxy) as url:
        response = httpx.post(f"{url}/{foreign}/_search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    got = [(h["_id"], round(h["_score"], 4)) for h in response.json()["hits"]["hits"]]
    expected = [(h.id, round(h.score, 4)) for h in index.search(QUERY, k=5).hits]
    assert got == expected


def test_the_proxy_without_config_says_how_to_name_the_fields(
    opensearch_url, foreign, embedder
) -> None:
    body = {"size": 5, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        response = httpx.post(f"{url}/{foreign}/_search", json=body, timeout=60)
    assert 400 <= response.status_code < 500
    assert "--index-config" in response.text


def test_the_request_of_a_foreign_index_sorts_on_what_its_mapping_offers(index) -> None:
    # No doc_id in this mapping: OpenSearch's fallback tie-break, learnt when the index opened.
    assert index.request(QUERY)["sort"] == [{"_score": "desc"}, {"_id": "asc"}]


def test_translate_for_a_foreign_index_runs_on_it_as_the_library_does(
    opensearch_url, foreign, index
) -> None:
    args = ["translate", QUERY, "--index", foreign, "--format", "json", "--k", "5"]
    args += ["--vector-field", "vec", "--text-field", "body", "--tiebreak", "_id"]
    args += ["--url", opensearch_url]  # where hybrid truths count the index's statistics
    printed = CliRunner().invoke(app, args)
    assert printed.exit_code == 0, printed.output
    expected = [(h.id, round(h.score, 4)) for h in index.search(QUERY, k=5).hits]  # scripts in
    answer = httpx.post(
        f"{opensearch_url}/{foreign}/_search", json=json.loads(printed.stdout), timeout=60
    )
    assert answer.status_code == 200, answer.text
    got = [(h["_id"], round(h["_score"], 4)) for h in answer.json()["hits"]["hits"]]
    assert got == expected


def test_the_json_service_searches_a_foreign_index(index) -> None:
    from fastapi.testclient import TestClient

    from itlr.service.app import create_app

    with TestClient(create_app(index)) as client:
        answer = client.post("/search", json={"query": QUERY, "k": 3})
    assert answer.status_code == 200, answer.text
    hits = answer.json()["hits"]
    assert hits and set(hits[0]["fields"]) == {"year", "topic"}
