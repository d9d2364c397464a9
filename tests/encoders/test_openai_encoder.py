"""`--encoder openai`: vectors from an OpenAI-compatible /v1/embeddings endpoint, and the
per-model prompts every encoder puts before query terms and passages.

The endpoint here is tests/support/embedding_server.py: real HTTP on loopback with the real bundled model
behind it (the local encoder) and scripted misbehaviour in front of it (429s, 5xx, slow answers,
bad bodies). tests/encoders/test_infinity_endpoint.py runs the same model behind a real server from PyPI.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from embedding_server import EmbeddingServer, Misbehaviour
from itlr.cli import app
from itlr.embed import Embedder, get_embedder
from itlr.errors import ConfigurationError, EmbeddingError, IndexStateError
from itlr.resources import data_file

DEMO_QUERIES = [case["query"] for case in json.loads(data_file("demo", "queries.json").read_text())]
runner = CliRunner()


@pytest.fixture(scope="module")
def server(embedder):
    with EmbeddingServer(embedder) as running:
        yield running


@pytest.fixture()
def quick(monkeypatch):
    """Fewer retries than the default, so a failing test fails sooner; the behaviour is the
    same."""
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "2")


@pytest.fixture()
def remote(server, quick):
    return Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, corpus, embedder):
    """The demo corpus in an embedded index, embedded by the local encoder."""
    path = tmp_path_factory.mktemp("demo") / "idx"
    index = itlr.Index.open(path)
    index.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus])
    return path


def hits_of(index: itlr.Index, query: str) -> list[tuple[str, float]]:
    return [(hit.id, hit.score) for hit in index.search(query, k=10).hits]


def test_endpoint_scores_equal_the_local_encoders_on_the_demo_queries(
    demo_index, server, quick
) -> None:
    local = itlr.Index.open(demo_index)
    through = itlr.Index.open(demo_index, encoder="openai", encoder_url=server.base_url)
    assert through.embedder.encoder == "openai"
    for query in DEMO_QUERIES:
        expected, found = hits_of(local, query), hits_of(through, query)
        assert [h for h, _ in found] == [h for h, _ in expected], query
        assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-4), query


def test_documents_ingested_through_the_endpoint_score_as_local_ones(
    tmp_path, corpus, demo_index, server, quick
) -> None:
    through = itlr.Index.open(tmp_path / "remote", encoder="openai", encoder_url=server.base_url)
    through.add([{"id": d.id, "text": d.text, **d.fields} for d in corpus], batch_size=16)
    local = itlr.Index.open(demo_index)
    for query in DEMO_QUERIES:
        expected, found = hits_of(local, query), hits_of(through, query)
        assert [h for h, _ in found] == [h for h, _ in expected], query
        assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-4), query


def test_documents_go_to_the_endpoint_in_batches(tmp_path, corpus, server, quick) -> None:
    index = itlr.Index.open(tmp_path / "idx", encoder="openai", encoder_url=server.base_url)
    before = len(server.requests)
    index.add([{"id": d.id, "text": d.text} for d in corpus[:40]], batch_size=16)
    sizes = [len(inputs) for inputs in server.requests[before:]]
    assert sum(sizes) == 40 and max(sizes) <= 16 and len(sizes) >= 3


def test_repeated_query_terms_come_from_the_term_cache(demo_index, server, quick) -> None:
    index = itlr.Index.open(demo_index, encoder="openai", encoder_url=server.base_url)
    query = '"rare cached term one" AND NOT "rare cached term two"'
    index.search(query)
    before = len(server.requests)
    index.search(query)
    assert len(server.requests) == before


def test_429_and_5xx_are_retried_with_back_off(remote, server) -> None:
    server.misbehave(Misbehaviour(status=429), Misbehaviour(status=503))
    before = len(server.requests)
    vectors = remote.encode(["vitamin D"])
    assert vectors.shape == (1, 384)
    assert len(server.requests) - before == 3


def test_429_that_does_not_stop_fails_in_one_line_after_the_bounded_retries(remote, server) -> None:
    server.misbehave(*[Misbehaviour(status=429)] * 3)
    before = len(server.requests)
    with pytest.raises(EmbeddingError) as failure:
        remote.encode(["vitamin D"])
    message = str(failure.value)
    assert "answered 429 after 2 retries" in message and "\n" not in message
    assert len(server.requests) - before == 3  # the first call and 2 retries, no more


def test_a_server_that_does_not_answer_in_time_fails_in_one_line(
    server, quick, monkeypatch
) -> None:
    monkeypatch.setenv("ITLR_ENCODER_TIMEOUT", "0.5")
    impatient = Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)
    server.misbehave(Misbehaviour(delay=1.5))
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as failure:
        impatient.encode(["vitamin D"])
    assert "did not answer within 0.5 s (1 attempt in" in str(failure.value)
    assert "ITLR_ENCODER_TIMEOUT is the time for the whole call" in str(failure.value)
    # The time-out is the whole call's: no attempt after it, whatever the retries allow.
    assert time.monotonic() - started < 1.4


# -- issue 53, item 5: one deadline per call, retries said, a hint for a URL without /v1 ----------


def test_retries_share_the_calls_deadline_and_each_is_said_on_stderr(
    server, monkeypatch, capfd
) -> None:
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "10")
    monkeypatch.setenv("ITLR_ENCODER_TIMEOUT", "3")
    slow = Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)
    capfd.readouterr()
    server.misbehave(*[Misbehaviour(status=503, delay=0.4)] * 10)
    before = len(server.requests)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"answered 503 after \d retries: scripted 503"):
        slow.encode(["vitamin D"])
    spent = time.monotonic() - started
    assert spent < 3.5, spent  # 3 s for everything, not 11 attempts of 0.4 s plus back-off
    attempts = len(server.requests) - before
    assert 2 <= attempts < 10
    retried = [line for line in capfd.readouterr().err.splitlines() if "retry" in line]
    assert len(retried) == attempts - 1
    assert "answered 503; retry 1 of 10 in 0.5 s" in retried[0] and "left of 3 s" in retried[0]
    with server._lock:  # the script's steps the deadline left unused
        server._script.clear()


def test_an_answer_trickling_in_is_cut_at_the_deadline(server, quick, monkeypatch) -> None:
    monkeypatch.setenv("ITLR_ENCODER_TIMEOUT", "1")
    impatient = Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)
    server.misbehave(Misbehaviour(trickle=0.05))  # 384 numbers at 20 bytes a second
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"did not answer within 1 s \(1 attempt"):
        impatient.encode(["vitamin D"])
    assert time.monotonic() - started < 1.6


def test_a_404_at_a_url_without_v1_says_where_the_endpoint_answers(server, quick) -> None:
    without = server.base_url.removesuffix("/v1")
    with pytest.raises(EmbeddingError) as failure:
        Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=without)
    message = str(failure.value)
    assert "answered 404" in message and "\n" not in message
    assert "the URL has no /v1" in message and f"try --encoder-url {without}/v1" in message
    assert Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=f"{without}/v1").dims


def test_an_endpoint_that_is_not_running_fails_in_one_line(quick, monkeypatch) -> None:
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "0")
    with pytest.raises(EmbeddingError, match="cannot reach the embedding endpoint"):
        Embedder("m", encoder="openai", encoder_url="http://127.0.0.1:9/v1")


def test_credentials_in_the_url_never_show_in_errors(quick, monkeypatch) -> None:
    monkeypatch.setenv("ITLR_ENCODER_RETRIES", "0")
    with pytest.raises(EmbeddingError) as failure:
        Embedder("m", encoder="openai", encoder_url="http://user:s3cret@127.0.0.1:9/v1")
    assert "s3cret" not in str(failure.value) and "127.0.0.1:9/v1" in str(failure.value)


def answer_of(*rows: list, indexes: tuple[int, ...] = ()) -> str:
    """An /v1/embeddings body with these rows (NaN written as JSON's NaN)."""
    numbered = indexes or tuple(range(len(rows)))
    data = [{"index": n, "embedding": row} for n, row in zip(numbered, rows, strict=True)]
    return json.dumps({"data": data})


ONE = [0.05] * 384
BAD_ANSWERS = {
    "not JSON": ("<html>busy</html>", "is not JSON"),
    "no data": ('{"object": "list"}', "no `data` list"),
    "too few": (answer_of(ONE), "returned 1 embeddings for 2 inputs"),
    "NaN": (answer_of([math.nan, *ONE[1:]], ONE), "not JSON (NaN is not a number)"),
    "infinite": (answer_of(ONE, ONE).replace("0.05", "1e999", 1), "NaN or infinite"),
    "strings": (answer_of(["a"] * 384, ONE), "no `embedding` list of numbers"),
    "other lengths": (answer_of(ONE, ONE[:100]), "different lengths"),
    "wrong dimension": (answer_of([1, 2], [1, 3]), "returned 2-dim embeddings, 384 before"),
    "zero vector": (answer_of([0.0] * 384, ONE), "all-zero"),
    "numbered twice": (answer_of(ONE, ONE, indexes=(0, 0)), "numbered [0, 0]"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_bad_answer_is_one_line_and_nothing_is_written(case, tmp_path, server, quick) -> None:
    body, expected = BAD_ANSWERS[case]
    index = itlr.Index.open(tmp_path / "idx", encoder="openai", encoder_url=server.base_url)
    index.add([{"id": "kept", "text": "a document written before"}])
    server.misbehave(Misbehaviour(body=body))
    with pytest.raises(EmbeddingError) as failure:
        index.add([{"id": "a", "text": "first"}, {"id": "b", "text": "second"}])
    assert expected in str(failure.value) and "\n" not in str(failure.value)
    reopened = itlr.Index.open(tmp_path / "idx", encoder="openai", encoder_url=server.base_url)
    assert reopened.count() == 1


def test_answers_out_of_order_are_put_back_in_order(remote, server, embedder) -> None:
    texts = ["vitamin D", "bone health", "electric cars"]
    answer = server.answer(texts)
    answer["data"].reverse()
    server.misbehave(Misbehaviour(body=json.dumps(answer)))
    assert np.allclose(remote.encode(texts), embedder.encode(texts), atol=1e-6)


def test_a_dimension_unlike_the_indexes_is_refused_when_opening(tmp_path, embedder, quick) -> None:
    class Truncated:
        def encode(self, texts):
            return embedder.encode(texts)[:, :128]

    itlr.Index.open(tmp_path / "idx").add([{"id": "a", "text": "vitamin D"}])
    with EmbeddingServer(Truncated()) as small, pytest.raises(IndexStateError) as failure:
        itlr.Index.open(tmp_path / "idx", encoder="openai", encoder_url=small.base_url)
    assert "holds 384-dim vectors" in str(failure.value)
    assert "makes 128-dim ones" in str(failure.value)


def test_the_openai_encoder_needs_a_url(monkeypatch) -> None:
    monkeypatch.delenv("ITLR_ENCODER_URL", raising=False)
    with pytest.raises(ConfigurationError, match="needs the endpoint's URL"):
        get_embedder("m", "openai")


def test_without_the_openai_package_the_error_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # what an install without it gives
    with pytest.raises(EmbeddingError) as failure:
        Embedder("m", encoder="openai", encoder_url="http://127.0.0.1:9/v1")
    assert "pip install 'itlr[llm]'" in str(failure.value)


def test_importing_itlr_does_not_import_openai() -> None:
    probe = "import sys, itlr, itlr.cli, itlr.embed; print('openai' in sys.modules)"
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "False"


def test_the_api_key_comes_from_its_env_var(server, quick, monkeypatch) -> None:
    monkeypatch.setenv("ITLR_ENCODER_API_KEY", "sk-test-key")
    Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)
    assert server.authorizations[-1] == "Bearer sk-test-key"


# -- prompts ------------------------------------------------------------------------------


def test_prompts_go_before_passages_and_query_terms(tmp_path, server, quick) -> None:
    index = itlr.Index.open(
        tmp_path / "idx",
        encoder="openai",
        encoder_url=server.base_url,
        query_prompt="query: ",
        passage_prompt="passage: ",
    )
    before = len(server.requests)
    index.add([{"id": "a", "text": "Vitamin D and the immune system."}])
    index.search('"prompted term only here"')
    sent = [text for inputs in server.requests[before:] for text in inputs]
    assert sent == ["passage: Vitamin D and the immune system.", "query: prompted term only here"]


def test_the_index_records_its_prompts_and_search_uses_them(tmp_path, embedder) -> None:
    made = itlr.Index.open(tmp_path / "idx", query_prompt="query: ", passage_prompt="passage: ")
    made.add([{"id": "a", "text": "Vitamin D and the immune system."}])
    opened = itlr.Index.open(tmp_path / "idx")
    assert (opened.embedder.query_prompt, opened.embedder.passage_prompt) == (
        "query: ",
        "passage: ",
    )
    hit = opened.search('"vitamin D"', truth="clamp").hits[0]
    document = embedder.encode(["passage: Vitamin D and the immune system."])[0]
    term = embedder.encode(["query: vitamin D"])[0]
    assert hit.truths["vitamin D"] == pytest.approx(float(document @ term), abs=1e-5)
    unprompted = embedder.encode(["vitamin D"])[0]
    assert abs(float(document @ unprompted) - float(document @ term)) > 1e-3


def test_prompts_unlike_the_indexes_are_refused_in_one_line(tmp_path) -> None:
    itlr.Index.open(tmp_path / "idx", query_prompt="query: ").add([{"id": "a", "text": "x"}])
    with pytest.raises(ConfigurationError) as failure:
        itlr.Index.open(tmp_path / "idx", query_prompt="search_query: ")
    message = str(failure.value)
    assert "embedded with query prompt 'query: ', not 'search_query: '" in message
    assert "\n" not in message
    # The same prompt given again is no conflict.
    assert itlr.Index.open(tmp_path / "idx", query_prompt="query: ").embedder.query_prompt


def test_an_index_made_without_prompts_refuses_prompts(tmp_path) -> None:
    itlr.Index.open(tmp_path / "idx").add([{"id": "a", "text": "x"}])
    with pytest.raises(ConfigurationError, match="passage prompt '', not 'passage: '"):
        itlr.Index.open(tmp_path / "idx", passage_prompt="passage: ")


def test_the_cli_takes_the_encoder_flags_and_env_vars(tmp_path, server, quick) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(row)
            for row in (
                {"id": "imm", "text": "Vitamin D supports the immune system."},
                {"id": "bone", "text": "Vitamin D keeps bones strong with calcium."},
            )
        )
    )
    index = str(tmp_path / "idx")
    ingested = runner.invoke(
        app,
        [
            "ingest",
            str(corpus),
            "--index",
            index,
            "--encoder",
            "openai",
            "--encoder-url",
            server.base_url,
            "--query-prompt",
            "query: ",
            "--passage-prompt",
            "passage: ",
        ],
    )
    assert ingested.exit_code == 0, ingested.output
    before = len(server.requests)
    env = {"ITLR_ENCODER": "openai", "ITLR_ENCODER_URL": server.base_url}
    found = runner.invoke(app, ["search", "immune system", "--index", index, "--json"], env=env)
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["hits"][0]["id"] == "imm"
    assert ["query: immune system"] in server.requests[before:]
    refused = runner.invoke(
        app,
        ["search", "immune", "--index", index, "--query-prompt", "other: "],
        env=env,
    )
    assert refused.exit_code == 2
    assert "embedded with query prompt 'query: ', not 'other: '" in refused.stderr


def test_the_cli_says_a_bad_endpoint_in_one_line(tmp_path, quick) -> None:
    result = runner.invoke(
        app,
        ["search", "x", "--index", str(tmp_path / "none")],
        env={
            "ITLR_ENCODER": "openai",
            "ITLR_ENCODER_URL": "http://127.0.0.1:9/v1",
            "ITLR_ENCODER_RETRIES": "0",
        },
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot reach the embedding endpoint")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_proxy_index_config_names_the_encoder_and_prompt_of_its_indexes(tmp_path, server):
    from itlr.proxy.upstream import index_vectors, load_index_configs

    config = tmp_path / "indexes.json"
    entry = {"vector_field": "vec", "text_field": "body", "model": "bge-small-en-v1.5"}
    remote = {"encoder": "openai", "encoder_url": server.base_url, "query_prompt": "query: "}
    config.write_text(json.dumps({"logs-*": {**entry, **remote}, "*": {**entry, "model": None}}))
    configs = load_index_configs(config)
    mapping = {"mappings": {"properties": {"vec": {"type": "knn_vector", "dimension": 384}}}}
    logs = index_vectors("logs-1", {"logs-1": mapping}, configs)
    assert (logs.model, logs.encoder, logs.encoder_url, logs.query_prompt) == (
        "bge-small-en-v1.5",
        "openai",
        server.base_url,
        "query: ",
    )
    other = index_vectors("notes", {"notes": mapping}, configs)
    assert (other.model, other.encoder, other.query_prompt) == ("all-MiniLM-L6-v2", None, "")


def test_a_proxy_index_config_with_the_openai_encoder_needs_its_url(tmp_path, monkeypatch):
    from itlr.proxy.upstream import load_index_configs

    monkeypatch.delenv("ITLR_ENCODER_URL", raising=False)
    config = tmp_path / "indexes.json"
    entry = {"vector_field": "vec", "text_field": "body", "encoder": "openai"}
    config.write_text(json.dumps({"logs-*": entry}))
    with pytest.raises(ConfigurationError, match="needs the endpoint's URL"):
        load_index_configs(config)


def test_an_endpoint_url_for_a_local_encoder_is_refused(monkeypatch) -> None:
    from itlr.embed import set_default_encoder

    monkeypatch.delenv("ITLR_ENCODER", raising=False)
    with pytest.raises(ConfigurationError, match="`encoder_url` is for the openai encoder"):
        get_embedder(None, "onnx", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigurationError, match="not onnx"):
        set_default_encoder(None, "http://127.0.0.1:9/v1")
    result = runner.invoke(
        app, ["search", "x", "--index", "none"], env={"ITLR_ENCODER_URL": "http://h/v1"}
    )
    assert result.exit_code == 2
    assert "--encoder-url is for the openai encoder" in result.stderr
