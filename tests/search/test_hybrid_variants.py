"""NOT evidence "max" for hybrid truths (issue 23, second ablation round): a NOT term's truth is
max(max(0, cos), lexical), mentioned OR semantically close. The same figures in numpy, the
embedded engine, the OpenSearch script (demo index and three shards) and the Elasticsearch
script on OpenSearch's Painless."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import itlr
from itlr.composition import compose, explain
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.opensearch import OpenSearchBackend
from itlr.explain import recompute
from itlr.options import OPTIONS, SearchOptions, search_options
from itlr.scoring import MAX_EVIDENCE, Operators, TruthMap
from parity import VOCABULARY, assert_same_ranking, sharded_backend, term_vectors

MAX_NOT = TruthMap("hybrid", lexical=0.3, not_evidence="max")


def test_a_not_term_with_max_evidence_takes_the_larger_of_cosine_and_bm25() -> None:
    query = itlr.parse('"aarhus" AND NOT "denmark"')
    cosines = np.array([[0.7, 0.6], [0.7, 0.1], [0.7, -0.3]])
    lexical = np.array([[0.2, 0.4], [0.2, 0.8], [0.2, 0.0]])
    composed = compose(query, cosines, Operators(not_strength=0.5), MAX_NOT, lexical_truths=lexical)
    assert composed.truths[:, 1] == pytest.approx([0.6, 0.8, 0.0])
    # The positive term keeps its weighted mean at the share.
    assert composed.truths[:, 0] == pytest.approx(0.7 * 0.7 + 0.3 * 0.2)
    assert composed.scores == pytest.approx(
        composed.truths[:, 0] * (1 - 0.5 * np.array([0.6, 0.8, 0.0]))
    )


def test_max_evidence_applies_to_negated_terms_only_and_never_to_stop_word_terms() -> None:
    query = itlr.parse(
        '"vitamin D" AND NOT "bone health" AND NOT "the" AND ("sun" OR NOT NOT "fish")'
    )
    weights = MAX_NOT.lexical_weights(query.terms, query.negated_terms)
    assert weights.tolist() == [0.3, MAX_EVIDENCE, 0.0, 0.3, 0.3]


def test_the_explain_tree_shows_the_max_and_adds_up() -> None:
    query = itlr.parse('"aarhus" AND NOT "denmark"')
    cosines = np.array([[0.7, 0.1]])
    lexical = np.array([[0.2, 0.8]])
    (tree,) = explain(query, cosines, Operators(not_strength=0.5), MAX_NOT, lexical)
    composed = compose(query, cosines, Operators(not_strength=0.5), MAX_NOT, lexical_truths=lexical)
    assert recompute(tree) == pytest.approx(tree["value"]) == pytest.approx(composed.scores[0])
    rendered = json.dumps(tree)
    assert '"denmark\\": truth max(max(0, cosine), lexical)' in rendered
    assert '"aarhus\\": truth 0.7 * max(0, cosine) + 0.3 * lexical' in rendered


def test_max_is_a_not_evidence_choice_of_every_front_end() -> None:
    options = search_options(truth="hybrid", lexical=0.3, not_evidence="max")
    assert options.truth == MAX_NOT
    assert TruthMap.from_dict(MAX_NOT.to_dict()) == MAX_NOT
    (option,) = [o for o in OPTIONS if o.name == "not_evidence"]
    assert "max" in option.choices


def unit(rng: np.random.Generator, count: int, dims: int = 8) -> np.ndarray:
    vectors = rng.normal(size=(count, dims)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_embedded_max_not_demotes_both_the_mention_and_the_semantically_close_passage(
    tmp_path,
) -> None:
    rng = np.random.default_rng(3)
    index = EmbeddedBackend.create(tmp_path / "idx", "toy", 8)
    topic, excluded = unit(rng, 2)
    close = excluded + 0.3 * topic
    close /= np.linalg.norm(close)
    # a: on topic only; b: mentions the excluded word; c: about it without naming it.
    texts = ["aarhus harbour", "aarhus denmark", "aarhus harbour"]
    vectors = np.vstack([topic, topic, 0.5 * topic + close])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index.add(["a", "b", "c"], texts, vectors)
    query = itlr.parse('"aarhus" AND NOT "denmark"')
    terms = np.vstack([topic, excluded])
    search = SearchOptions(k=3, mode="exact", truth=MAX_NOT)
    hits = {h.id: h for h in index.search(query, terms, search)}
    assert hits["a"].score > hits["b"].score and hits["a"].score > hits["c"].score
    assert hits["b"].truths["denmark"] > 0.4  # the mention, whatever its cosine
    assert hits["c"].truths["denmark"] == pytest.approx(float(np.clip(vectors[2] @ excluded, 0, 1)))


# -- OpenSearch: the same figures to 1e-4 ---------------------------------------------------


def max_cases(count: int, seed: int) -> list[tuple[itlr.Query, SearchOptions]]:
    """Random trees from the demo vocabulary, random operators, NOT evidence max."""
    from itlr.benchmarks.text_corpus import random_queries

    rng = random.Random(seed)
    cases = []
    for tree in random_queries(VOCABULARY, count, rng):
        ops = Operators(
            rng.choice(["product", "sum", "min"]),
            rng.choice(["sum", "max", "probsum"]),
            not_strength=rng.choice([1.0, 0.5]),
        )
        truth = TruthMap("hybrid", lexical=rng.choice([0.3, 0.5, 1.0]), not_evidence="max")
        cases.append(
            (itlr.parse(str(tree)), SearchOptions(k=10, mode="exact", ops=ops, truth=truth))
        )
    return cases


@pytest.fixture(scope="module")
def three_shards(opensearch_url, corpus, corpus_vectors, embedder):
    backend = sharded_backend(opensearch_url, corpus, corpus_vectors, embedder, 3)
    yield backend
    backend.client.indices.delete(index=backend.index_name)


@pytest.fixture(params=["demo", "three shards"])
def cluster(request, opensearch_demo, three_shards) -> OpenSearchBackend:
    return opensearch_demo if request.param == "demo" else three_shards


@pytest.mark.opensearch
def test_max_not_scores_match_the_embedded_engine_on_30_random_queries(
    cluster, embedded, vocabulary_vectors
) -> None:
    for query, options in max_cases(30, seed=23):
        vectors = term_vectors(query, vocabulary_vectors)
        assert_same_ranking(
            cluster.search(query, vectors, options), embedded.search(query, vectors, options)
        )


@pytest.mark.opensearch
def test_explained_max_truths_of_cluster_hits_match_the_embedded_engine(
    three_shards, embedded, vocabulary_vectors, corpus
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    options = SearchOptions(k=10, mode="exact", truth=MAX_NOT, explain=True)
    remote = three_shards.search(query, vectors, options)
    local = embedded.search(query, vectors, options)
    assert_same_ranking(remote, local)
    assert not remote.warnings  # every explanation adds up to the engine's score
    for mine, theirs in zip(remote, local, strict=True):
        assert mine.explanation is not None
        assert recompute(mine.explanation) == pytest.approx(mine.score, abs=1e-4)
        for term in query.terms:
            assert mine.truths[term] == pytest.approx(theirs.truths[term], abs=1e-4)


def test_the_cli_searches_with_max_not_evidence_and_refuses_an_unknown_one(tmp_path) -> None:
    from typer.testing import CliRunner

    from itlr.cli import app

    runner = CliRunner()
    corpus = tmp_path / "docs.jsonl"
    rows = [
        {"id": "city", "text": "Aarhus has a large harbour and a university."},
        {"id": "named", "text": "Aarhus is the second city of Denmark."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert runner.invoke(app, ["ingest", str(corpus), "--index", "maxnot"]).exit_code == 0
    args = ["search", '"Aarhus" AND NOT "Denmark"', "--index", "maxnot", "--truth", "hybrid"]
    result = runner.invoke(app, [*args, "--not-evidence", "max", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert [h["id"] for h in hits] == ["city", "named"]
    assert hits[1]["truths"]["Denmark"] > hits[0]["truths"]["Denmark"]
    refused = runner.invoke(app, [*args, "--not-evidence", "most"])
    assert refused.exit_code == 2 and "most" in refused.stderr


def test_the_json_service_takes_max_not_evidence_and_refuses_an_unknown_one_with_a_422(
    embedded, vocabulary_vectors
) -> None:
    import httpx

    from itlr.service import create_app
    from itlr.service.server import serving

    index = itlr.Index.open(str(embedded.path), create=False)
    body = {"query": '"vitamin D" AND NOT "bone health"', "truth": "hybrid", "k": 5}
    with serving(create_app(index)) as url, httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/search", json={**body, "not_evidence": "max", "lexical_share": 0.3})
        refused = client.post("/search", json={**body, "not_evidence": "most"})
    assert answer.status_code == 200, answer.text
    query = itlr.parse(body["query"])
    local = embedded.search(
        query, term_vectors(query, vocabulary_vectors), SearchOptions(k=5, truth=MAX_NOT)
    )
    assert [h["id"] for h in answer.json()["hits"]] == [h.id for h in local]
    assert [h["score"] for h in answer.json()["hits"]] == pytest.approx(
        [h.score for h in local], abs=1e-6
    )
    message = refused.json()["error"]
    assert refused.status_code == 422 and "not_evidence" in message and "\n" not in message
