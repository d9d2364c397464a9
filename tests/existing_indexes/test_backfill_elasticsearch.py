"""Back-fill and search of an index made through REST on a real Elasticsearch. The local node
has no Painless, so the logical query is checked by its body and the search by dense kNN."""

from __future__ import annotations

import numpy as np
import pytest

import itlr
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.engines.connection import Connection
from itlr.engines.elasticsearch import ElasticsearchBackend
from itlr.engines.layout import IndexLayout
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import LEXICAL_FIELDS
from itlr.options import SearchOptions

pytestmark = pytest.mark.elasticsearch


def test_backfill_in_place_then_dense_search_finds_each_document_by_its_text(
    elasticsearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 30)
    name = create_index(elasticsearch_url, "elasticsearch", docs)
    try:
        report = itlr.Index.backfill(
            name,
            url=elasticsearch_url,
            text_field="body",
            vector_field="vec",
            engine="elasticsearch",
        )
        assert (report.embedded, report.failed) == (30, {})
        changed = {**docs[4], "body": "Penguins huddle together on the Antarctic ice in winter."}
        bulk(elasticsearch_url, name, [changed])
        again = itlr.Index.backfill(
            name,
            url=elasticsearch_url,
            text_field="body",
            vector_field="vec",
            engine="elasticsearch",
        )
        assert (again.embedded, again.skipped) == (1, 29)

        sources = all_sources(elasticsearch_url, name)
        ids = sorted(sources)
        texts = [sources[i]["body"] for i in ids]
        stored = np.asarray([sources[i]["vec"] for i in ids], dtype=np.float32)
        assert np.allclose(stored, embedder.encode(texts), atol=1e-5)
        assert [sources[i][HASH_FIELD] for i in ids] == [
            content_hash(t, embedder.name) for t in texts
        ]

        backend = ElasticsearchBackend(
            Connection(elasticsearch_url).elasticsearch(),
            name,
            embedder.name,
            embedder.dims,
            layout=IndexLayout("vec", "body"),
            url=elasticsearch_url,
        )
        backend.check_index()
        (vector,) = embedder.encode(["penguins on the ice"])
        hits = backend.search_vector(vector, k=1)
        assert [h.id for h in hits] == [changed["_id"]]

        query = itlr.parse('"vitamin D" AND NOT "bone health"')
        body = backend.build_request(
            query, embedder.encode(list(query.terms)), SearchOptions(k=5, from_=5)
        )
        assert body["sort"] == [{"_score": "desc"}, {"_doc": "asc"}]
        assert body["from"] == 5
        assert body["_source"] == {"excludes": ["vec", *LEXICAL_FIELDS]}
    finally:
        delete_index(elasticsearch_url, name)


def test_follow_embeds_documents_written_since_and_coverage_counts_them(
    elasticsearch_url, corpus, embedder
) -> None:
    import threading
    import time

    import httpx

    docs = documents(corpus, 12)
    name = create_index(elasticsearch_url, "elasticsearch", docs[:8])
    stop = threading.Event()

    def hashed() -> int:
        httpx.post(f"{elasticsearch_url}/{name}/_refresh", timeout=30)
        query = {"query": {"exists": {"field": HASH_FIELD}}}
        return httpx.post(f"{elasticsearch_url}/{name}/_count", json=query, timeout=30).json()[
            "count"
        ]

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 120
        while hashed() != count:
            assert time.monotonic() < deadline
            time.sleep(0.2)

    follower = threading.Thread(
        target=itlr.Index.follow,
        args=(name,),
        kwargs={
            "url": elasticsearch_url,
            "text_field": "body",
            "vector_field": "vec",
            "engine": "elasticsearch",
            "stop": stop,
            "interval": 0.2,
        },
        daemon=True,
    )
    try:
        follower.start()
        wait_for(8)
        bulk(elasticsearch_url, name, docs[8:])
        wait_for(12)
        stop.set()
        follower.join(60)
        backend = ElasticsearchBackend(
            Connection(elasticsearch_url).elasticsearch(),
            name,
            embedder.name,
            embedder.dims,
            layout=IndexLayout("vec", "body"),
            url=elasticsearch_url,
        )
        assert backend.coverage().without_vector == 0
        bulk(elasticsearch_url, name, [{**docs[0], "_id": "unembedded"}])
        backend.coverage_cache.forget()
        assert backend.coverage().without_vector == 1
    finally:
        stop.set()
        delete_index(elasticsearch_url, name)
