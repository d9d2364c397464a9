"""`--encoder openai` and prompts on a real OpenSearch: the prompts recorded in `_meta.itlr`,
searches through `itlr.Index`, the query-bar proxy and the HTTP service that agree with the
local encoder, and the mapped dimension checked in one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

import itlr
from embedding_server import EmbeddingServer
from itlr.embed import get_embedder
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError, IndexStateError
from itlr.proxy import create_proxy_app, serving
from itlr.resources import data_file
from itlr.service import create_app

pytestmark = pytest.mark.opensearch

DEMO_QUERIES = [case["query"] for case in json.loads(data_file("demo", "queries.json").read_text())]
PROMPTS = {"query_prompt": "query: ", "passage_prompt": "passage: "}


@pytest.fixture(scope="module")
def server(embedder) -> Iterator[EmbeddingServer]:
    with EmbeddingServer(embedder) as running:
        yield running


@pytest.fixture(scope="module")
def remote_index(opensearch_url, server, corpus) -> Iterator[str]:
    """The demo corpus ingested into OpenSearch through the endpoint, with E5-style prompts."""
    name = f"itlr-openai-{uuid.uuid4().hex[:8]}"
    index = itlr.Index.open(
        name,
        url=opensearch_url,
        create=True,
        encoder="openai",
        encoder_url=server.base_url,
        **PROMPTS,
    )
    index.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus])
    yield name
    Connection(opensearch_url).opensearch().indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, corpus) -> itlr.Index:
    """The same documents and prompts embedded by the local encoder, in the embedded engine."""
    index = itlr.Index.open(tmp_path_factory.mktemp("reference") / "idx", **PROMPTS)
    index.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus])
    return index


def ranked(index: itlr.Index, query: str) -> tuple[list[str], list[float]]:
    hits = index.search(query, k=10, mode="exact").hits
    return [hit.id for hit in hits], [hit.score for hit in hits]


def test_the_cluster_index_records_its_prompts_in_meta(opensearch_url, remote_index) -> None:
    mapping = Connection(opensearch_url).opensearch().indices.get_mapping(index=remote_index)
    meta = mapping[remote_index]["mappings"]["_meta"]["itlr"]
    assert (meta["query_prompt"], meta["passage_prompt"]) == ("query: ", "passage: ")


def test_searches_through_the_endpoint_use_the_recorded_prompts_and_match_the_local_encoder(
    opensearch_url, remote_index, local_reference, server
) -> None:
    index = itlr.Index.open(
        remote_index, url=opensearch_url, encoder="openai", encoder_url=server.base_url
    )
    assert index.embedder.query_prompt == "query: "
    for query in DEMO_QUERIES:
        (expected, expected_scores), (found, scores) = (
            ranked(local_reference, query),
            ranked(index, query),
        )
        assert found == expected, query
        assert np.allclose(scores, expected_scores, atol=1e-4), query


def test_other_prompts_for_the_cluster_index_are_refused(opensearch_url, remote_index) -> None:
    with pytest.raises(ConfigurationError, match="passage prompt 'passage: ', not ''"):
        itlr.Index.open(remote_index, url=opensearch_url, passage_prompt="")


def test_an_endpoint_of_another_dimension_is_refused_against_the_mapping(
    opensearch_url, remote_index, embedder
) -> None:
    class Truncated:
        def encode(self, texts):
            return embedder.encode(texts)[:, :256]

    with EmbeddingServer(Truncated()) as small, pytest.raises(IndexStateError) as failure:
        itlr.Index.open(
            remote_index, url=opensearch_url, encoder="openai", encoder_url=small.base_url
        )
    message = str(failure.value)
    assert "holds 384-dim vectors but model 'all-MiniLM-L6-v2' makes 256-dim ones" in message
    assert "\n" not in message


def test_the_query_bar_proxy_encodes_with_the_endpoint_and_the_indexs_prompt(
    opensearch_url, remote_index, local_reference, server
) -> None:
    embedder = get_embedder("all-MiniLM-L6-v2", "openai", server.base_url)
    # Terms no earlier test searched: the term cache would answer those without the endpoint.
    query = '"vitamin D through the proxy" AND NOT "bone health through the proxy"'
    body = {"size": 10, "query": {"query_string": {"query": f"itlr:({query})"}}}
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as proxy:
        before = len(server.requests)
        response = httpx.post(f"{proxy}/{remote_index}/_search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    sent = [text for inputs in server.requests[before:] for text in inputs]
    assert sorted(sent) == [
        "query: bone health through the proxy",
        "query: vitamin D through the proxy",
    ]
    expected = itlr.Index.open(
        remote_index, url=opensearch_url, encoder="openai", encoder_url=server.base_url
    ).search(query, k=10)
    hits = response.json()["hits"]["hits"]
    assert [hit["_id"] for hit in hits] == [hit.id for hit in expected.hits]
    assert np.allclose([hit["_score"] for hit in hits], [h.score for h in expected.hits], atol=1e-4)


def test_the_http_service_searches_with_the_endpoint(
    opensearch_url, remote_index, local_reference, server
) -> None:
    index = itlr.Index.open(
        remote_index, url=opensearch_url, encoder="openai", encoder_url=server.base_url
    )
    client = TestClient(create_app(index))
    health = client.get("/healthz").json()
    assert health["encoder"] == "openai"
    query = DEMO_QUERIES[1]
    found = client.post("/search", json={"query": query, "k": 10, "mode": "exact"}).json()
    expected_ids, expected_scores = ranked(local_reference, query)
    assert [hit["id"] for hit in found["hits"]] == expected_ids
    assert np.allclose([hit["score"] for hit in found["hits"]], expected_scores, atol=1e-4)
