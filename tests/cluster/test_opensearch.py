"""Against a real OpenSearch: the engine must agree with the embedded engine to 1e-4."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec, open_backend
from itlr.engines.opensearch import EXCLUDE_SCRIPT, SCORE_SCRIPT, OpenSearchBackend
from itlr.errors import EngineError
from itlr.lexical import LEXICAL_FIELDS
from itlr.options import SearchOptions
from itlr.resources import data_file
from itlr.scoring import TruthMap
from parity import (
    HOSTILE_TERMS,
    assert_same_ranking,
    candidate_bool,
    term_vectors,
)

pytestmark = pytest.mark.opensearch


@pytest.fixture(scope="session")
def client(opensearch_url: str):
    return Connection(opensearch_url).opensearch()


@pytest.mark.parametrize("rule", ["relative", "absolute"])
def test_hard_filter_drops_the_same_documents(
    opensearch_demo, embedded, vocabulary_vectors, rule
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health" AND NOT "immune system"')
    vectors = term_vectors(query, vocabulary_vectors)
    for theta in (0.25, 0.4):
        # The hard filter judges the clamped cosine: with cosine truths, the truth itself.
        options = SearchOptions(
            k=50,
            mode="exact",
            hard_filter=theta,
            hard_filter_rule=rule,
            explain=True,
            truth=TruthMap("clamp"),
        )
        remote = opensearch_demo.search(query, vectors, options)
        local = embedded.search(query, vectors, options)
        assert [h.id for h in remote] == [h.id for h in local]
        if rule == "absolute":
            assert all(h.truths["bone health"] < theta for h in remote)


def test_user_filters_apply_inside_knn_and_outside(
    opensearch_demo, embedded, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" OR "coffee and sleep"')
    vectors = term_vectors(query, vocabulary_vectors)
    topic_filter = {"term": {"metadata.topic": "coffee"}}
    for mode in ("knn", "exact"):
        options = SearchOptions(k=10, mode=mode, filter=topic_filter)
        remote = opensearch_demo.search(query, vectors, options)
        assert remote and all(h.fields["topic"] == "coffee" for h in remote)
        assert_same_ranking(remote, embedded.search(query, vectors, options))


def test_lexical_exclusion_drops_documents_containing_the_phrase(
    opensearch_demo, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    options = SearchOptions(k=30, exclude_lexical=True)
    hits = opensearch_demo.search(query, term_vectors(query, vocabulary_vectors), options)
    assert hits and not any("bone health" in h.text.lower() for h in hits)


def test_hits_carry_truths_without_explain_and_never_their_vectors(
    opensearch_demo, vocabulary_vectors, embedded
) -> None:
    # Issue 53, item 6: on a cluster hits' truths were {} unless explained; the embedded
    # engine's hits always carry them.
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    for truth in ("hybrid", "clamp"):
        options = SearchOptions(k=5, truth=TruthMap(truth))
        plain = opensearch_demo.search(query, vectors, options)
        explained = opensearch_demo.search(query, vectors, replace(options, explain=True))
        local = {h.id: h for h in embedded.search(query, vectors, replace(options, mode="exact"))}
        assert [h.id for h in plain] == [h.id for h in explained]
        for hit, same in zip(plain, explained, strict=True):
            assert set(hit.truths) == {"vitamin D", "bone health"}
            assert hit.truths == pytest.approx(same.truths, abs=1e-9)
            assert hit.truths == pytest.approx(local[hit.id].truths, abs=1e-4)
            assert not any(k == "embedding" or k.startswith("itlr_") for k in hit.fields)
    chosen = opensearch_demo.search(query, vectors, SearchOptions(k=3, source_fields=()))
    assert all(h.fields == {} and len(h.truths) == 2 for h in chosen)
    # A request built for someone else (translate, the proxy) brings no vector back.
    translated = itlr.Index.open("translated-truths").request(query, k=3, engine="opensearch")
    assert translated["_source"] == {"excludes": ["embedding", *LEXICAL_FIELDS]}


def test_hostile_terms_change_nothing_but_their_vectors(opensearch_demo, embedder) -> None:
    text = " AND ".join(
        '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in HOSTILE_TERMS
    )
    query = itlr.parse(text)
    assert query.terms == tuple(HOSTILE_TERMS)
    vectors = embedder.encode(list(query.terms))
    body = opensearch_demo.build_request(query, vectors, SearchOptions(hard_filter=0.5))
    script = body["query"]["script_score"]["script"]
    assert set(script) == {"id", "params"} and script["id"] == SCORE_SCRIPT.id
    serialized = json.dumps(body)
    assert not any(t in serialized or json.dumps(t)[1:-1] in serialized for t in HOSTILE_TERMS)
    hits = opensearch_demo.search(query, vectors, SearchOptions(k=5))
    assert len(hits) == 5


def test_term_vectors_travel_packed_as_the_exact_float32_values(opensearch_demo, embedder) -> None:
    query = itlr.parse('("vitamin D" OR "sleep") AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    body = opensearch_demo.build_request(query, vectors, SearchOptions(hard_filter=0.5))
    params = body["query"]["script_score"]["script"]["params"]
    unpacked = np.frombuffer(base64.b64decode(params["vectors"]), "<f4")
    assert params["dims"] == embedder.dims
    assert np.array_equal(unpacked.reshape(len(query.terms), -1), vectors.astype(np.float32))
    exclusion = candidate_bool(body)["must_not"][0]["script_score"]["script"]["params"]
    excluded = np.frombuffer(base64.b64decode(exclusion["vectors"]), "<f4").reshape(3, -1)
    # The excluded term's vector, then the positive terms' it must outweigh (relative rule).
    chosen = [query.terms.index(t) for t in ("bone health", "vitamin D", "sleep")]
    assert np.array_equal(excluded, vectors[chosen].astype(np.float32))
    # A fifth of a list of numbers' length: what the engine parses for every search.
    assert len(params["vectors"]) * 4 < len(json.dumps(vectors.tolist()))


def test_inline_mode_sends_the_fixed_source(opensearch_demo, embedder) -> None:
    inline = OpenSearchBackend(
        opensearch_demo.client,
        opensearch_demo.index_name,
        embedder.name,
        embedder.dims,
        inline_script=True,
    )
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    body = inline.build_request(query, vectors, SearchOptions(hard_filter=0.5))
    assert body["query"]["script_score"]["script"]["source"] == SCORE_SCRIPT.source
    exclusion = candidate_bool(body)["must_not"][0]["script_score"]
    assert exclusion["script"]["source"] == EXCLUDE_SCRIPT.source
    stored = opensearch_demo.search(query, vectors, SearchOptions(k=5))
    assert [h.id for h in inline.search(query, vectors, SearchOptions(k=5))] == [
        h.id for h in stored
    ]


def test_install_is_idempotent(opensearch_demo) -> None:
    opensearch_demo.install_scripts()
    assert opensearch_demo.install_scripts() == []
    assert opensearch_demo.client.get_script(id=SCORE_SCRIPT.id)["found"]


def test_unreachable_engine_is_one_actionable_line(embedder) -> None:
    spec = EngineSpec("opensearch", "x", Connection("http://127.0.0.1:9"))
    with pytest.raises(EngineError, match=r"cannot reach OpenSearch at http://127\.0\.0\.1:9"):
        open_backend(spec, embedder)


# -- the CLI against the server ----------------------------------------------------------

runner = CliRunner()


def test_cli_search_on_opensearch_returns_the_embedded_ranking(opensearch_url, tmp_path) -> None:
    source = data_file("demo", "corpus.jsonl")
    name = f"itlr-cli-{uuid.uuid4().hex[:8]}"
    ingested = runner.invoke(app, ["ingest", str(source), "--url", opensearch_url, "--index", name])
    assert ingested.exit_code == 0, ingested.output
    runner.invoke(app, ["ingest", str(source), "--index", str(tmp_path / "local")])
    query = '"vitamin D benefits" AND NOT "bone health"'
    remote = runner.invoke(
        app, ["search", query, "--url", opensearch_url, "--index", name, "--json"]
    )
    local = runner.invoke(app, ["search", query, "--index", str(tmp_path / "local"), "--json"])
    assert remote.exit_code == 0, remote.output
    remote_ids = [h["id"] for h in json.loads(remote.stdout)["hits"]]
    assert remote_ids == [h["id"] for h in json.loads(local.stdout)["hits"]]
    auto = runner.invoke(
        app,
        ["search", query, "--engine", "auto", "--url", opensearch_url, "--index", name, "--json"],
    )
    assert [h["id"] for h in json.loads(auto.stdout)["hits"]] == remote_ids


def test_cli_errors_exit_2_with_one_line(opensearch_url) -> None:
    missing = runner.invoke(
        app,
        [
            "search",
            "x",
            "--url",
            opensearch_url,
            "--engine",
            "opensearch",
            "--index",
            "no-such-index",
        ],
    )
    assert missing.exit_code == 2
    assert "does not exist" in missing.stderr and "itlr ingest" in missing.stderr
    down = runner.invoke(app, ["search", "x", "--url", "http://127.0.0.1:9", "--index", "demo"])
    assert down.exit_code == 2 and "cannot reach" in down.stderr
    assert "Traceback" not in missing.output + down.output


def test_a_refused_document_whose_id_and_reason_hold_brackets_is_printed_literally(
    opensearch_url, tmp_path
) -> None:
    path = tmp_path / "docs.jsonl"
    records = [
        {"id": "fine", "text": "Vitamin D supports the immune system.", "topic": "health"},
        {"id": "[bold]odd[/bold]", "text": "Roman roads.", "topic": {"nested": "x"}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    name = f"itlr-brackets-{uuid.uuid4().hex[:8]}"
    common = ("--engine", "opensearch", "--url", opensearch_url, "--index", name)
    result = CliRunner().invoke(app, ["ingest", str(path), *common, "--batch-size", "1"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    failure = next(line for line in result.stderr.splitlines() if line.startswith("failed"))
    assert failure.startswith("failed [bold]odd[/bold]: ")
    assert "[metadata.topic]" in failure
    # The summary ends, as back-fill's and the follower's do, with the first failure.
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("added 1, updated 0, unchanged 0, deleted 0, ")
    assert "failed 1; index now holds 1 documents; first failure [bold]odd[/bold]: " in summary
