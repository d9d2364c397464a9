"""Against the real Elasticsearch of the suite: a kNN candidate search gathers its depth on every
shard of a sharded index (its `num_candidates` and `k` are per shard), as on OpenSearch."""

from __future__ import annotations

import uuid

import pytest

import itlr
from itlr.engines.connection import Connection
from itlr.engines.elasticsearch import ElasticsearchBackend
from itlr.options import SearchOptions

pytestmark = pytest.mark.elasticsearch

SHARDS = 3


def test_a_knn_clause_gathers_its_depth_on_every_shard(
    elasticsearch_url, embedder, corpus, corpus_vectors
) -> None:
    client = Connection(elasticsearch_url).elasticsearch()
    backend = ElasticsearchBackend(
        client,
        f"itlr-es-shards-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=elasticsearch_url,
    )
    body = backend.dialect.mapping(embedder.dims, embedder.name)
    body["settings"]["index"].update(number_of_shards=SHARDS, number_of_replicas=0)
    client.indices.create(index=backend.index_name, **body)
    try:
        assert (
            backend.add(
                [d.id for d in corpus],
                [d.text for d in corpus],
                corpus_vectors,
                [d.fields for d in corpus],
            )
            == {}
        )
        backend.refresh()
        query = itlr.parse('"vitamin D"')
        budget = 20
        options = SearchOptions(k=10, candidates=budget, plan="per-term")
        vectors = embedder.encode(list(query.terms))
        lexical = backend.term_statistics(query)
        (search,) = backend.dialect.search_request(query, vectors, options, lexical).searches
        found = client.search(
            index=backend.index_name,
            query=backend.dialect.knn_clause(search, None),
            size=1000,
            source=False,
        )["hits"]["hits"]
        assert len(found) == SHARDS * budget
    finally:
        client.indices.delete(index=backend.index_name)
