"""The term-vector cache: a repeated query does not reach the encoder, the bound holds, models
keep their own entries, and the counters show in the service's /healthz and /metrics and the
proxy's /_itlr/metrics. The encoder is the real bundled model, spied on, never replaced."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

import itlr
from itlr.embed import Embedder, get_embedder
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError
from itlr.proxy import create_proxy_app
from itlr.service import create_app
from itlr.service.server import serving
from itlr.term_cache import (
    SIZE_ENV,
    cache_for,
    set_term_cache_size,
    term_cache_size,
    term_cache_stats,
)


class EncoderSpy:
    """Counts the texts the real sentence-transformers models are asked to encode."""

    def __init__(self, embedders: list[Embedder], monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        for model in {id(e._model): e._model for e in embedders}.values():
            self._spy(model, monkeypatch)

    def _spy(self, model, monkeypatch: pytest.MonkeyPatch) -> None:
        real = model.encode

        def counted(sentences, *args, **kwargs):
            self.texts += list(sentences)
            return real(sentences, *args, **kwargs)

        monkeypatch.setattr(model, "encode", counted)


@pytest.fixture
def spy(embedder, monkeypatch) -> EncoderSpy:
    return EncoderSpy([embedder, get_embedder(embedder.name)], monkeypatch)


def test_every_spelling_of_a_model_is_one_loaded_embedder(embedder) -> None:
    # One copy in memory, one term cache, whoever asks (service, proxy, Index, CLI).
    spellings = [None, embedder.name, f"sentence-transformers/{embedder.name}"]
    assert all(get_embedder(name) is embedder for name in spellings)
    assert get_embedder() is embedder


@pytest.fixture(autouse=True)
def restore_size() -> Iterator[None]:
    size = term_cache_size()
    yield
    set_term_cache_size(size)


def fresh(word: str) -> str:
    """A term no other test has cached."""
    return f"{word} {uuid.uuid4().hex[:6]}"


def test_a_repeated_query_is_served_from_the_cache(embedded, embedder, spy) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    query = f'"{fresh("vitamin D")}" AND NOT "{fresh("bone health")}"'
    before = cache_for(embedder.name).stats()
    first = index.search(query, k=5)
    assert len(spy.texts) == 2
    second = index.search(query, k=5)
    assert len(spy.texts) == 2  # the encoder was not asked again
    after = cache_for(embedder.name).stats()
    assert (after.misses - before.misses, after.hits - before.hits) == (2, 2)
    assert [(h.id, h.score) for h in second.hits] == [(h.id, h.score) for h in first.hits]


def test_cached_vectors_are_the_encoders_and_only_misses_are_encoded(embedder, spy) -> None:
    known, new = fresh("sunlight"), fresh("calcium")
    first = embedder.encode_terms([known])
    both = embedder.encode_terms([new, known])
    assert spy.texts == [known, new]
    np.testing.assert_allclose(both[1], first[0], atol=0)
    np.testing.assert_allclose(both, embedder.encode([new, known]), atol=1e-6)
    both[1] = 0.0  # the caller owns its copy: the cached vector stays as encoded
    np.testing.assert_allclose(embedder.encode_terms([known])[0], first[0], atol=0)


def test_the_bound_is_respected_least_recently_used_first(embedder, spy) -> None:
    set_term_cache_size(3)
    cache = cache_for(embedder.name)
    terms = [fresh(f"term{i}") for i in range(5)]
    evicted_before = cache.stats().evictions
    for term in terms:
        embedder.encode_terms([term])
    embedder.encode_terms([terms[2]])  # the oldest left is now the most recent
    stats = cache.stats()
    assert stats.entries == 3 and stats.capacity == 3
    assert stats.evictions - evicted_before >= 2
    spy.texts.clear()
    embedder.encode_terms([terms[2], terms[3], terms[4]])
    assert spy.texts == []
    embedder.encode_terms([terms[0]])
    assert spy.texts == [terms[0]]


def test_size_zero_turns_the_cache_off(embedder, spy) -> None:
    set_term_cache_size(0)
    term = fresh("insomnia")
    embedder.encode_terms([term])
    embedder.encode_terms([term])
    assert spy.texts == [term, term]
    assert cache_for(embedder.name).stats().entries == 0


def test_a_different_model_does_not_share_entries(embedder, spy) -> None:
    # The bundled weights loaded by path: another model name, so another cache.
    other = Embedder(_bundled_path())
    assert other.name != embedder.name
    term = fresh("exercise")
    embedder.encode_terms([term])
    other_before = cache_for(other.name).stats()
    other.encode_terms([term])
    other_after = cache_for(other.name).stats()
    assert (other_after.misses - other_before.misses, other_after.hits - other_before.hits) == (
        1,
        0,
    )
    assert spy.texts == [term]  # the first model's encoder was not asked for the second


def _bundled_path() -> str:
    from itlr.embed import resolve_model

    return resolve_model(None)[1]  # the folder the default model's files are read from


def test_a_bad_size_in_the_environment_is_one_clear_error(monkeypatch) -> None:
    import itlr.term_cache as term_cache

    monkeypatch.setenv(SIZE_ENV, "lots")
    monkeypatch.setattr(term_cache, "_size", None)
    with pytest.raises(ConfigurationError, match=f"{SIZE_ENV}='lots': give .*an integer >= 0"):
        term_cache.cache_for(fresh("model"))
    monkeypatch.setenv(SIZE_ENV, "7")
    assert term_cache.term_cache_size() == 7


def test_service_healthz_and_metrics_show_the_counters(embedded, embedder) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    query = f'"{fresh("sleep quality")}"'
    with serving(create_app(index)) as url, httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(2):
            assert client.post("/search", json={"query": query}).status_code == 200
        health = client.get("/healthz").json()
        metrics = client.get("/metrics")
    (mine,) = [s for s in health["term_cache"] if s["model"] == embedder.name]
    assert mine["hits"] >= 1 and mine["misses"] >= 1
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    stats = {s.model: s for s in term_cache_stats()}[embedder.name]
    assert f'itlr_term_cache_hits_total{{model="{embedder.name}"}} {stats.hits}' in metrics.text
    assert "# TYPE itlr_term_cache_misses_total counter" in metrics.text


@pytest.mark.opensearch
def test_proxy_repeated_query_bar_search_hits_the_cache(
    opensearch_url, embedder, corpus, corpus_vectors, spy
) -> None:
    from itlr.engines.opensearch import OpenSearchBackend

    backend = OpenSearchBackend(
        Connection(opensearch_url).opensearch(),
        f"itlr-cache-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=opensearch_url,
    )
    backend.ensure_index()
    backend.add([d.id for d in corpus], [d.text for d in corpus], corpus_vectors)
    backend.refresh()
    term = fresh("vitamin D")
    body = {"query": {"query_string": {"query": f'itlr:("{term}")'}}}
    try:
        app = create_proxy_app(Connection(opensearch_url), embedder=embedder, token="s3cret")
        with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
            headers = {"X-Itlr-Token": "s3cret"}
            answers = [
                client.post(f"/{backend.index_name}/_search", json=body, headers=headers)
                for _ in range(3)
            ]
            metrics = client.get("/_itlr/metrics", headers=headers)
            refused = client.get("/_itlr/metrics")
    finally:
        backend.client.indices.delete(index=backend.index_name)
    assert [a.status_code for a in answers] == [200, 200, 200]
    hits = [[h["_id"] for h in a.json()["hits"]["hits"]] for a in answers]
    assert hits[0] and hits[0] == hits[1] == hits[2]
    assert spy.texts == [term]
    assert metrics.status_code == 200 and "itlr_term_cache_hits_total" in metrics.text
    assert refused.status_code == 401
