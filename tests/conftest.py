from __future__ import annotations

import os
from pathlib import Path

import pytest

# Real servers: fixtures `opensearch_url`, `elasticsearch_url`, `elasticsearch_painless_url`;
# a real headless Chromium: `browser`.
pytest_plugins = [
    "opensearch_fixture",
    "elasticsearch_fixture",
    "secured_elasticsearch",
    "infinity_fixture",
    "chromium_fixture",
]

# Tests never touch the user's indexes or caches.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def itlr_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.getbasetemp() / "itlr-home"
    monkeypatch.setenv("ITLR_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory):
    """The real bundled model, loaded once for the whole run."""
    from itlr.embed import get_embedder

    # Session fixtures run before the per-test ITLR_HOME: the default encoder's ONNX export
    # (itlr.onnx_encoder) must land in the run's home, never the user's.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ITLR_HOME", str(tmp_path_factory.getbasetemp() / "itlr-home"))
        return get_embedder()


# -- the demo corpus, shared by the OpenSearch and Elasticsearch parity suites ----------------


@pytest.fixture(scope="session")
def corpus():
    from itlr.documents import read_jsonl
    from itlr.resources import data_file

    return list(read_jsonl(data_file("demo", "corpus.jsonl")))


@pytest.fixture(scope="session")
def corpus_vectors(corpus, embedder):
    return embedder.encode([d.text for d in corpus])


@pytest.fixture(scope="session")
def vocabulary_vectors(embedder):
    from parity import VOCABULARY

    return dict(zip(VOCABULARY, embedder.encode(VOCABULARY), strict=True))


@pytest.fixture(scope="session")
def embedded(tmp_path_factory, corpus, corpus_vectors, embedder):
    """The embedded engine over the demo corpus: the reference the remote engines must match."""
    from itlr.engines.embedded import EmbeddedBackend

    index = EmbeddedBackend.create(
        tmp_path_factory.mktemp("parity") / "idx", embedder.name, embedder.dims
    )
    index.add(
        [d.id for d in corpus], [d.text for d in corpus], corpus_vectors, [d.fields for d in corpus]
    )
    return index


@pytest.fixture()
def opensearch_index(opensearch_url: str):
    """A factory of empty OpenSearch indexes with itlr's mapping (`make(dims)`), deleted after
    the test."""
    import uuid

    from itlr.engines.connection import Connection
    from itlr.engines.opensearch import OpenSearchBackend

    made = []

    def make(dims: int) -> OpenSearchBackend:
        backend = OpenSearchBackend(
            Connection(opensearch_url).opensearch(),
            f"itlr-test-{uuid.uuid4().hex[:8]}",
            "test-model",
            dims,
            url=opensearch_url,
        )
        backend.ensure_index()
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.client.indices.delete(index=backend.index_name, ignore_unavailable=True)


@pytest.fixture(scope="session")
def opensearch_demo(opensearch_url, corpus, corpus_vectors, embedder):
    """The demo corpus in one OpenSearch index for the whole run: read-only, shared by the
    OpenSearch, proxy, Elasticsearch-script and warning tests (one ingest, not one per file)."""
    import uuid

    from itlr.engines.connection import Connection
    from itlr.engines.opensearch import OpenSearchBackend

    backend = OpenSearchBackend(
        Connection(opensearch_url).opensearch(),
        f"itlr-demo-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=opensearch_url,
    )
    backend.ensure_index()
    ids, texts = [d.id for d in corpus], [d.text for d in corpus]
    assert backend.add(ids, texts, corpus_vectors, [d.fields for d in corpus]) == {}
    backend.refresh()
    yield backend
    backend.client.indices.delete(index=backend.index_name, ignore_unavailable=True)


@pytest.fixture(scope="session")
def elasticsearch_demo(elasticsearch_url, corpus, corpus_vectors, embedder):
    """The demo corpus in one Elasticsearch index for the whole run (read-only)."""
    import uuid

    from itlr.engines.connection import Connection
    from itlr.engines.elasticsearch import ElasticsearchBackend

    backend = ElasticsearchBackend(
        Connection(elasticsearch_url).elasticsearch(),
        f"itlr-demo-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=elasticsearch_url,
    )
    assert backend.ensure_index()
    ids, texts = [d.id for d in corpus], [d.text for d in corpus]
    assert backend.add(ids, texts, corpus_vectors, [d.fields for d in corpus]) == {}
    backend.refresh()
    return backend


@pytest.fixture(scope="module")
def demo_index(embedded):
    """The demo corpus in the embedded engine, opened through the front door by its path."""
    import itlr

    return itlr.Index.open(str(embedded.path), create=False)


@pytest.fixture(scope="module")
def service(demo_index):
    """An HTTP client of `itlr serve` (the JSON service) over `demo_index`, on loopback."""
    import httpx

    from itlr.service import create_app
    from itlr.service.server import serving

    with serving(create_app(demo_index)) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client
