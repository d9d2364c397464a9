"""The proxy's term cache tells no index's users what another's searched (issue 57.6): its
entries are scoped by the indexes a search resolved to, so a term searched on one index is not a
cache hit (a faster answer) on another; and its counters are shown only behind the proxy's
token. Before, one process-wide cache per model served every index and user, and
`/_itlr/metrics` showed its counters to anyone. The encoder is the real bundled model, spied on
(never replaced); the cluster a real OpenSearch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from demo_backend import demo_backend
from itlr.embed import get_embedder
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving

pytestmark = pytest.mark.opensearch

TOKEN = "a-client-token-of-32-characters!"


class EncoderSpy:
    """The texts the real model is asked to encode."""

    def __init__(self, embedder, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        for model in {id(e._model): e._model for e in (embedder, get_embedder())}.values():
            real = model.encode

            def counted(sentences, *args, _real=real, **kwargs):
                self.texts += list(sentences)
                return _real(sentences, *args, **kwargs)

            monkeypatch.setattr(model, "encode", counted)


@pytest.fixture(scope="module")
def two_indexes(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[list[str]]:
    docs, vectors = corpus[:30], corpus_vectors[:30]
    with (
        demo_backend(opensearch_url, "itlr-cache-scope", embedder, docs, vectors) as first,
        demo_backend(opensearch_url, "itlr-cache-scope", embedder, docs, vectors) as second,
    ):
        yield [first.index_name, second.index_name]


def logical(term: str) -> dict:
    return {"size": 3, "query": {"query_string": {"query": f'itlr:("{term}")'}}}


def test_a_term_searched_on_one_index_is_not_a_cache_hit_on_another(
    opensearch_url, embedder, two_indexes, monkeypatch
) -> None:
    spy = EncoderSpy(embedder, monkeypatch)
    term = f"vitamin D {uuid.uuid4().hex[:6]}"
    first, second = two_indexes
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        for name in (first, first, second, second):
            answer = httpx.post(f"{url}/{name}/_search", json=logical(term), timeout=60)
            assert answer.status_code == 200, answer.text[:300]
    # Once per index: the repeat on each index is a hit, the other index's search is not.
    assert spy.texts == [term, term]


def test_the_term_cache_counters_need_the_proxys_token(opensearch_url, embedder, two_indexes):
    term = f"sleep {uuid.uuid4().hex[:6]}"
    name = two_indexes[0]
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        assert httpx.post(f"{url}/{name}/_search", json=logical(term), timeout=60).is_success
        open_metrics = httpx.get(f"{url}/_itlr/metrics", timeout=60)
    assert open_metrics.status_code == 200
    assert "itlr_term_cache_hits_total{" not in open_metrics.text
    assert f'itlr_index_documents{{index="{name}"}} 30' in open_metrics.text
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, token=TOKEN)
    with serving(app) as url:
        headers = {"x-itlr-token": TOKEN}
        searched = httpx.post(
            f"{url}/{name}/_search", json=logical(term), headers=headers, timeout=60
        )
        assert searched.status_code == 200, searched.text[:300]
        shown = httpx.get(f"{url}/_itlr/metrics", headers=headers, timeout=60)
        refused = httpx.get(f"{url}/_itlr/metrics", timeout=60)
    assert shown.status_code == 200 and "itlr_term_cache_hits_total{" in shown.text
    assert refused.status_code == 401 and "itlr_term_cache" not in refused.text
