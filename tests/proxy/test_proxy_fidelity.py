"""What a query-bar UI gets back for a logical query (issue 41.5), through the proxy in front of
a real OpenSearch: Discover's `highlight` block comes back with highlights in the UI's own tags
for the hits that mention a positive term (it came back empty: the logical query is a script
the highlighter cannot read), `_source` carries none of itlr's own fields unless the request
names them (the vector and the token fields reached the UI), and `"model": null` in an index
config is the default model (every search failed with 502 `embedded with 'None'`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from foreign_index import create_index, delete_index, documents
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import load_index_configs

pytestmark = pytest.mark.opensearch

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
PRE, POST = (
    "@opensearch-dashboards-highlighted-field@",
    "@/opensearch-dashboards-highlighted-field@",
)
# Discover's highlight block, as OpenSearch Dashboards sends it.
DISCOVER_HIGHLIGHT = {
    "pre_tags": [PRE],
    "post_tags": [POST],
    "fields": {"*": {}},
    "fragment_size": 2147483647,
}
ITLR_FIELDS = {"embedding", "itlr_hash", "itlr_tokens", "itlr_token_keys", "itlr_length"}


def search(url: str, index: str, **body: Any) -> list[dict[str, Any]]:
    query = {"query_string": {"query": f"itlr:({LOGICAL})"}}
    response = httpx.post(f"{url}/{index}/_search", json={"query": query, **body}, timeout=60)
    assert response.status_code == 200, response.text[:400]
    return response.json()["hits"]["hits"]


def mentions_a_positive_word(text: str) -> bool:
    return re.search(r"\b(vitamin|d|benefits)\b", text, re.IGNORECASE) is not None


@pytest.mark.parametrize(
    "highlight",
    [DISCOVER_HIGHLIGHT, {**DISCOVER_HIGHLIGHT, "fields": {"text": {}}}],
    ids=["every-field", "named-field"],
)
def test_discover_highlights_come_back_for_hits_that_mention_a_positive_term(
    proxy_url, opensearch_demo, highlight
) -> None:
    hits = search(proxy_url, opensearch_demo.index_name, size=10, highlight=highlight)
    mentioning = [hit for hit in hits if mentions_a_positive_word(hit["_source"]["text"])]
    assert len(mentioning) >= 5
    for hit in mentioning:
        fragments = hit.get("highlight", {}).get("text")
        assert fragments, hit["_id"]
        assert PRE in fragments[0] and POST in fragments[0]
        marked = re.findall(re.escape(PRE) + "(.*?)" + re.escape(POST), " ".join(fragments))
        assert {word.lower() for word in marked} <= {"vitamin", "d", "benefits"}


def test_hits_carry_no_itlr_field_in_source_unless_the_request_names_it(
    proxy_url, opensearch_demo
) -> None:
    for source in ({}, {"_source": True}, {"_source": {"excludes": []}}, {"_source": ["*"]}):
        for hit in search(proxy_url, opensearch_demo.index_name, size=5, **source):
            assert "text" in hit["_source"]
            assert not ITLR_FIELDS & set(hit["_source"]), source
    named = search(proxy_url, opensearch_demo.index_name, size=3, _source=["doc_id", "itlr_hash"])
    assert all(set(hit["_source"]) == {"doc_id", "itlr_hash"} for hit in named)
    assert (
        search(proxy_url, opensearch_demo.index_name, size=3, _source=False)[0].get("_source")
        is None
    )


def test_a_null_model_in_an_index_config_is_the_default_model(
    opensearch_url, corpus, embedder, tmp_path: Path
) -> None:
    docs = documents(corpus, 30)
    for doc, vector in zip(docs, embedder.encode([d["body"] for d in docs]), strict=True):
        doc["vec"] = vector.tolist()
    name = create_index(opensearch_url, "opensearch", docs, vector_dims=embedder.dims)
    config = tmp_path / "indexes.json"
    config.write_text(
        json.dumps({"itlr-foreign-*": {"vector_field": "vec", "text_field": "body", "model": None}})
    )
    try:
        indexes = load_index_configs(config)
        assert indexes[0].model is None
        app = create_proxy_app(Connection(opensearch_url), embedder=embedder, indexes=indexes)
        with serving(app) as url:
            query = {"query_string": {"query": f"itlr:({LOGICAL})"}}
            response = httpx.post(f"{url}/{name}/_search", json={"query": query}, timeout=60)
        assert response.status_code == 200, response.text[:400]
        hits = response.json()["hits"]["hits"]
        assert hits and all("vec" not in hit["_source"] for hit in hits)
    finally:
        delete_index(opensearch_url, name)
