"""What a rewritten search answers (issue 53.4 and the proxy's part of 53.6), in front of a real
OpenSearch: every `itlr_` field hidden by its prefix (and the vector field) wherever a hit shows
fields, unless asked for by name; the coverage warning on every answer that carries a logical
search; an encoder that fails is a 502 / 504 with its cause; and `hits.total` the number of
documents the rest of the query matches, not the per-shard candidate budget times the shards."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from demo_backend import demo_backend
from embedding_server import EmbeddingServer, Misbehaviour
from itlr.embed import Embedder
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.answers import AnswerPlan, AsyncSearches, Rewrite, fix_answer
from parity import sharded_backend

pytestmark = pytest.mark.opensearch

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
CLAUSE = {"query_string": {"query": f"itlr:({LOGICAL})"}}
NDJSON = {"content-type": "application/x-ndjson"}
# Fields itlr writes beside a document that no list names: hidden by their prefix all the same.
UNLISTED = {"itlr_hash_was": "0123abcd", "itlr_note": "kept by some older tool"}


@pytest.fixture(scope="module")
def index(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    """The demo corpus, every document carrying itlr fields no list names, and one document
    with a text but no vector (so the coverage warning has something to say)."""
    with demo_backend(
        opensearch_url, "itlr-answers", embedder, corpus, corpus_vectors, with_fields=True
    ) as backend:
        name = backend.index_name
        lines = "".join(
            json.dumps({"update": {"_id": d.id}}) + "\n" + json.dumps({"doc": UNLISTED}) + "\n"
            for d in corpus
        )
        lines += json.dumps({"index": {"_id": "unembedded"}}) + "\n"
        lines += json.dumps({"doc_id": "unembedded", "text": "Vitamin D benefits mood."}) + "\n"
        answer = httpx.post(
            f"{opensearch_url}/{name}/_bulk?refresh=true",
            content=lines,
            headers=NDJSON,
            timeout=120,
        )
        assert answer.status_code == 200 and not answer.json()["errors"], answer.text[:300]
        yield name


def field_names(value: Any) -> set[str]:
    """Every key under the hits' `_source`, `fields` and `highlight`, inner hits included."""
    names: set[str] = set()
    if isinstance(value, list):
        for item in value:
            names |= field_names(item)
    elif isinstance(value, dict):
        for key in ("_source", "fields", "highlight"):
            if isinstance(value.get(key), dict):
                names |= set(value[key])
        for item in value.values():
            names |= field_names(item)
    return names


def hits_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text[:400]
    return list(response.json()["hits"]["hits"])


def itlr_own(names: set[str]) -> set[str]:
    return {name for name in names if name.startswith("itlr_") or name == "embedding"}


# -- hidden fields -----------------------------------------------------------------------------

# What Discover asks for (Kibana 8 adds `include_unmapped`, which OpenSearch does not take),
# and the neighbouring spellings; a pattern is not a name, so what it matches stays hidden.
ASKING = {
    "source": {"_source": True},
    "fields-api": {"_source": False, "fields": ["*"]},
    "docvalue-fields": {
        "docvalue_fields": ["doc_id", {"field": "itlr_len*"}, {"field": "itlr_token_k*"}]
    },
    "highlight-all": {"highlight": {"fields": {"*": {}}, "require_field_match": False}},
    "source-wildcard": {"_source": {"includes": ["*"]}},
    "inner-hits": {"collapse": {"field": "doc_id", "inner_hits": {"name": "same", "size": 1}}},
}


@pytest.mark.parametrize("asking", list(ASKING), ids=list(ASKING))
def test_every_itlr_field_and_the_vector_are_hidden_wherever_a_hit_shows_fields(
    client, index, opensearch_url, asking
) -> None:
    body = {"size": 20, "query": CLAUSE, **ASKING[asking]}
    shown = field_names(hits_of(client.post(f"/{index}/_search", json=body)))
    assert shown and itlr_own(shown) == set(), itlr_own(shown)
    # The same request straight to the cluster shows them: the hiding is the proxy's.
    direct = {**body, "query": {"match": {"text": "vitamin"}}}
    answer = httpx.post(f"{opensearch_url}/{index}/_search", json=direct, timeout=60)
    assert itlr_own(field_names(hits_of(answer)))


def test_a_field_asked_for_by_name_is_shown(client, index) -> None:
    body = {"size": 3, "query": CLAUSE, "_source": ["text", "itlr_hash_was", "embedding"]}
    for hit in hits_of(client.post(f"/{index}/_search", json=body)):
        assert set(hit["_source"]) == {"text", "itlr_hash_was", "embedding"}
    body = {"size": 3, "query": CLAUSE, "_source": False, "fields": ["itlr_note", "doc_id"]}
    for hit in hits_of(client.post(f"/{index}/_search", json=body)):
        assert set(hit["fields"]) == {"itlr_note", "doc_id"}


def test_hidden_fields_stay_hidden_in_every_search_of_an_msearch(client, index) -> None:
    lines = f'{{"index": "{index}"}}\n{json.dumps({"size": 5, "query": CLAUSE, "fields": ["*"]})}\n'
    response = client.post("/_msearch", content=lines, headers=NDJSON)
    assert response.status_code == 200, response.text[:300]
    (answer,) = response.json()["responses"]
    shown = field_names(answer["hits"]["hits"])
    assert shown and itlr_own(shown) == set()


# -- the coverage warning ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/_msearch", "/{index}/_msearch", "/{index}/_search"])
def test_every_answer_carrying_a_logical_search_warns_of_documents_without_a_vector(
    client, index, path
) -> None:
    search = {"size": 3, "query": CLAUSE}
    if "_msearch" in path:
        content = f'{{"index": "{index}"}}\n{json.dumps(search)}\n'
        response = client.post(path.replace("{index}", index), content=content, headers=NDJSON)
    else:
        response = client.post(path.replace("{index}", index), json=search)
    assert response.status_code == 200, response.text[:300]
    warning = response.headers.get("warning", "")
    assert warning.startswith("299 itlr ") and "1 of 339 documents" in warning, warning


# -- an encoder that fails ---------------------------------------------------------------------


@pytest.fixture()
def remote_proxy(opensearch_url, embedder, monkeypatch) -> Iterator[tuple[httpx.Client, Any]]:
    """A proxy whose terms are embedded by an OpenAI-compatible endpoint that can misbehave."""
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "0")
    monkeypatch.setenv("ITLR_ENCODER_TIMEOUT", "1")
    with EmbeddingServer(embedder, model=embedder.name) as server:
        remote = Embedder(embedder.name, encoder="openai", encoder_url=server.base_url)
        app = create_proxy_app(Connection(opensearch_url), embedder=remote)
        with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
            yield client, server


@pytest.mark.parametrize(
    ("misbehaviour", "status", "words"),
    [
        (Misbehaviour(status=500), 502, "answered 500"),
        (Misbehaviour(delay=3.0), 504, "did not answer within"),
    ],
    ids=["endpoint-500", "endpoint-slow"],
)
def test_an_encoder_failure_is_a_502_or_504_with_its_cause(
    remote_proxy, opensearch_demo, misbehaviour, status, words
) -> None:
    client, server = remote_proxy
    server.misbehave(misbehaviour)
    unseen = f'itlr:("{uuid.uuid4().hex} benefits")'  # never in the term cache
    body = {"size": 3, "query": {"query_string": {"query": unseen}}}
    response = client.post(f"/{opensearch_demo.index_name}/_search", json=body)
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert error["type"] in ("itlr_encoder_error", "itlr_encoder_timeout")
    assert words in error["reason"] and "embed" in error["reason"]


# -- hits.total --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_shards(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    backend = sharded_backend(opensearch_url, corpus, corpus_vectors, embedder, 2)
    yield backend.index_name
    backend.client.indices.delete(index=backend.index_name)


def total_of(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text[:300]
    answer = response.json()
    assert "itlr_total_hits" not in answer.get("aggregations", {})
    return answer["hits"].get("total")


def counted(opensearch_url: str, index: str, query: dict[str, Any] | None = None) -> int:
    body = {"query": query} if query else {}
    return int(httpx.post(f"{opensearch_url}/{index}/_count", json=body).json()["count"])


def test_hits_total_is_the_documents_the_rest_of_the_query_matches_on_two_shards(
    client, two_shards, opensearch_url
) -> None:
    whole = total_of(client.post(f"/{two_shards}/_search", json={"size": 10, "query": CLAUSE}))
    assert whole == {"value": counted(opensearch_url, two_shards), "relation": "eq"}
    rest = {"match": {"text": "vitamin"}}
    filtered = {"size": 10, "query": {"bool": {"must": [CLAUSE], "filter": [rest]}}}
    total = total_of(client.post(f"/{two_shards}/_search", json=filtered))
    assert total == {"value": counted(opensearch_url, two_shards, rest), "relation": "eq"}
    # A post_filter narrows the hits, so it narrows their count too; the aggregations stay.
    posted = {
        "size": 0,
        "query": CLAUSE,
        "post_filter": rest,
        "aggs": {"topics": {"terms": {"field": "metadata.topic"}}},
    }
    response = client.post(f"/{two_shards}/_search", json=posted)
    assert total_of(response)["value"] == counted(opensearch_url, two_shards, rest)
    assert list(response.json()["aggregations"]) == ["topics"]


def test_hits_total_follows_track_total_hits_and_its_int_form(
    client, two_shards, opensearch_url
) -> None:
    every = counted(opensearch_url, two_shards)
    capped = {"size": 5, "query": CLAUSE, "track_total_hits": 10}
    assert total_of(client.post(f"/{two_shards}/_search", json=capped)) == {
        "value": 10,
        "relation": "gte",
    }
    untracked = {"size": 5, "query": CLAUSE, "track_total_hits": False}
    assert total_of(client.post(f"/{two_shards}/_search", json=untracked)) is None
    in_url = client.post(
        f"/{two_shards}/_search",
        params={"track_total_hits": "true", "rest_total_hits_as_int": "true"},
        json={"size": 5, "query": CLAUSE},
    )
    assert total_of(in_url) == every
    lines = f'{{"index": "{two_shards}"}}\n{json.dumps({"size": 5, "query": CLAUSE})}\n'
    (answer,) = client.post("/_msearch", content=lines, headers=NDJSON).json()["responses"]
    assert answer["hits"]["total"] == {"value": every, "relation": "eq"}


def test_hits_total_is_counted_with_typed_keys_too(client, two_shards, opensearch_url) -> None:
    body = {"size": 5, "query": CLAUSE, "aggs": {"topics": {"terms": {"field": "metadata.topic"}}}}
    response = client.post(f"/{two_shards}/_search", params={"typed_keys": "true"}, json=body)
    assert total_of(response) == {"value": counted(opensearch_url, two_shards), "relation": "eq"}
    assert list(response.json()["aggregations"]) == ["sterms#topics"]


def test_hits_total_is_a_lower_bound_where_the_count_cannot_be_known(client, two_shards) -> None:
    # A min_score on the logical score: documents outside the candidates may pass it too.
    body = {"size": 5, "query": CLAUSE, "min_score": 0.1}
    total = total_of(client.post(f"/{two_shards}/_search", json=body))
    assert total["relation"] == "gte" and total["value"] >= 5


# -- async search (no engine here serves it: the answer's shape, fixed) ------------------------


def test_an_async_search_answer_and_its_polls_are_fixed_as_a_search_is() -> None:
    plan = AnswerPlan(vector_field="embedding", total="counted", track_total_hits=True)
    answer = {
        "id": "FmRldE8z",
        "is_running": False,
        "response": {
            "hits": {
                "total": {"value": 200, "relation": "eq"},
                "hits": [
                    {
                        "_id": "d1",
                        "_source": {"text": "t", "itlr_hash_was": "x", "embedding": [0.1]},
                        "fields": {"itlr_tokens": ["a 1"], "doc_id": ["d1"]},
                        "highlight": {"itlr_tokens": ["<em>a</em>"], "text": ["<em>t</em>"]},
                    }
                ],
            },
            "aggregations": {"itlr_total_hits": {"doc_count": 338, "matched": {"doc_count": 43}}},
        },
    }
    fix_answer(answer, {0: plan}, "_async_search")
    response = answer["response"]
    assert response["hits"]["total"] == {"value": 43, "relation": "eq"}
    assert "aggregations" not in response
    (hit,) = response["hits"]["hits"]
    assert (set(hit["_source"]), set(hit["fields"]), set(hit["highlight"])) == (
        {"text"},
        {"doc_id"},
        {"text"},
    )
    kept = AsyncSearches()
    done = Rewrite(b"", None, {0: plan}, ["demo"])
    kept.remember("FmRldE8z", done)
    assert kept.recall("FmRldE8z") is done and kept.recall("other") is None
    for number in range(AsyncSearches.MAX_KEPT):
        kept.remember(f"id-{number}", done)
    assert kept.recall("FmRldE8z") is None  # the oldest goes first
