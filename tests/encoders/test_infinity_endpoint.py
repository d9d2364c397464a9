"""`--encoder openai` against a real OpenAI-compatible embedding server from PyPI: Infinity
(tests/support/infinity_fixture.py), serving the bundled model from its folder, offline, on loopback.

Infinity has no rate limit to provoke, so 429s and 5xx are tested against the scripted server
(tests/encoders/test_openai_encoder.py); here the scores, the time-out and a wrong URL. Infinity answers
for its one model whatever name a request gives, so the name is not checked here."""

from __future__ import annotations

import json

import numpy as np
import pytest

import itlr
from itlr.embed import Embedder
from itlr.errors import EmbeddingError
from itlr.resources import data_file

DEMO_QUERIES = [case["query"] for case in json.loads(data_file("demo", "queries.json").read_text())]


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, corpus):
    path = tmp_path_factory.mktemp("demo") / "idx"
    itlr.Index.open(path).add([{"id": d.id, "text": d.text, **d.fields} for d in corpus])
    return path


def ranked(index: itlr.Index, query: str) -> tuple[list[str], list[float]]:
    hits = index.search(query, k=10).hits
    return [hit.id for hit in hits], [hit.score for hit in hits]


def test_scores_through_infinity_equal_the_local_encoders_on_the_demo_queries(
    demo_index, infinity_url
) -> None:
    local = itlr.Index.open(demo_index)
    served = itlr.Index.open(demo_index, encoder="openai", encoder_url=infinity_url)
    for query in DEMO_QUERIES:
        (expected, expected_scores), (found, scores) = ranked(local, query), ranked(served, query)
        assert found == expected, query
        assert np.allclose(scores, expected_scores, atol=1e-4), query


def test_documents_ingested_through_infinity_score_as_local_ones(
    tmp_path, corpus, demo_index, infinity_url
) -> None:
    served = itlr.Index.open(tmp_path / "idx", encoder="openai", encoder_url=infinity_url)
    served.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus], batch_size=32)
    local = itlr.Index.open(demo_index)
    for query in DEMO_QUERIES:
        (expected, expected_scores), (found, scores) = ranked(local, query), ranked(served, query)
        assert found == expected, query
        assert np.allclose(scores, expected_scores, atol=1e-4), query


def test_a_call_slower_than_the_time_out_fails_in_one_line(infinity_url, monkeypatch) -> None:
    encoder = Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=infinity_url)
    encoder._model._client = encoder._model._client.with_options(timeout=0.0005, max_retries=1)
    encoder._model.timeout, encoder._model.retries = 0.0005, 1
    with pytest.raises(EmbeddingError) as failure:
        encoder.encode(["a passage that takes the server longer than half a millisecond"] * 4)
    message = str(failure.value)
    # The time-out is the whole call's: its one attempt used it up, so no retry was made.
    assert "did not answer within 0.0005 s (1 attempt in" in message and "\n" not in message


def test_a_url_without_the_api_path_is_the_servers_404_in_one_line(
    infinity_url, monkeypatch
) -> None:
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "0")
    bare = infinity_url.removesuffix("/v1")
    with pytest.raises(EmbeddingError) as failure:
        Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=bare)
    message = str(failure.value)
    assert message.startswith(
        f"the embedding endpoint {bare} (model 'all-MiniLM-L6-v2') answered 404"
    )
    assert f"try --encoder-url {bare}/v1" in message
    assert "\n" not in message
