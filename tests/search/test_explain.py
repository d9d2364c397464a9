"""A real explain: every hit's score as a tree that adds up to it, the same on the embedded
engine and on a real OpenSearch, and a pasted request whose engine explain shows no vectors."""

from __future__ import annotations

import copy
import json

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.explain import recompute
from itlr.lexical import LEXICAL_FIELDS
from itlr.options import search_options
from itlr.query import parse
from itlr.service import create_app
from itlr.service.server import serving
from itlr.translation import translate_requests

runner = CliRunner()

# Every node kind and operator family: weights under AND and OR, NOT, nesting, truth maps.
CASES: list[tuple[str, dict]] = [
    ('"vitamin D" AND NOT "bone health"', {}),
    ('("vitamin D"^0.5 OR sunlight) AND NOT "bone health"^0.8', {}),
    ('"vitamin D" AND "immune system"^0.3', {"and_": "min", "or_": "max"}),
    ('sunlight OR NOT "vitamin D"', {"truth": "sigmoid", "tau": 0.3, "lam": 8.0}),
    ('"vitamin D" AND NOT (calcium OR "bone health")', {"not_": "reciprocal", "truth": "shift"}),
    ('"privacy law" AND consent', {"and_": "lukasiewicz", "or_": "probsum", "not_strength": 1}),
]


def _leaves(node: dict) -> list[dict]:
    if node["itlr"]["node"] == "term":
        return [node]
    return [leaf for child in node["details"] for leaf in _leaves(child)]


def _options(names: dict, **extra) -> object:
    return search_options(k=5, mode="exact", explain=True, **names, **extra)


@pytest.mark.parametrize(("query", "names"), CASES)
def test_embedded_explanations_add_up_to_each_hit_score(embedded, embedder, query, names) -> None:
    parsed = parse(query)
    hits = embedded.search(parsed, embedder.encode(list(parsed.terms)), _options(names))
    assert hits
    for hit in hits:
        tree = hit.explanation
        assert tree is not None
        assert abs(tree["value"] - hit.score) < 1e-9
        assert abs(recompute(tree) - hit.score) < 1e-6
        # One leaf per term occurrence, each with the hit's truth and its cosine input.
        for leaf in _leaves(tree):
            term = leaf["itlr"]["term"]
            assert abs(leaf["value"] - hit.truths[term]) < 1e-9
            assert "cosine" in leaf["itlr"]["inputs"]


def test_explanation_names_the_mapping_weights_and_not_strength(embedded, embedder) -> None:
    parsed = parse('("vitamin D"^0.5 OR sunlight) AND NOT "bone health"')
    options = _options({"truth": "sigmoid", "tau": 0.4, "lam": 9.0, "not_strength": 0.5})
    (hit, *_) = embedded.search(parsed, embedder.encode(list(parsed.terms)), options)

    kinds = {n["itlr"]["node"] for n in _walk(hit.explanation)}
    assert kinds == {"score", "and", "or", "weight", "not", "term", "input"}
    weight = next(n for n in _walk(hit.explanation) if n["itlr"]["node"] == "weight")
    assert weight["itlr"]["weight"] == 0.5
    negation = next(n for n in _walk(hit.explanation) if n["itlr"]["node"] == "not")
    assert negation["itlr"]["strength"] == 0.5 and "1 - 0.5 * x" in negation["description"]
    leaf = _leaves(hit.explanation)[0]
    assert leaf["itlr"]["truth"] == {"kind": "sigmoid", "tau": 0.4, "lam": 9.0}


def _walk(node: dict) -> list[dict]:
    return [node, *[n for child in node["details"] for n in _walk(child)]]


def test_a_tree_that_does_not_add_up_recomputes_to_another_score(embedded, embedder) -> None:
    parsed = parse('"vitamin D" AND NOT "bone health"')
    (hit, *_) = embedded.search(parsed, embedder.encode(list(parsed.terms)), _options({}))
    tampered = copy.deepcopy(hit.explanation)
    _leaves(tampered)[0]["itlr"]["inputs"]["cosine"] -= 0.2
    assert abs(recompute(tampered) - hit.score) > 1e-3


def test_no_explanation_unless_asked(embedded, embedder) -> None:
    parsed = parse('"vitamin D" AND NOT "bone health"')
    options = search_options(k=3)
    hits = embedded.search(parsed, embedder.encode(list(parsed.terms)), options)
    assert hits and all(h.explanation is None for h in hits)
    assert all("explanation" not in h.to_dict() for h in hits)


def test_front_door_cli_and_service_carry_the_tree(embedded) -> None:
    query = '"vitamin D" AND NOT "bone health"'
    index = itlr.Index.open(str(embedded.path), create=False)
    result = index.search(query, k=3, explain=True)
    assert all(abs(recompute(h.explanation) - h.score) < 1e-6 for h in result.hits)

    as_json = runner.invoke(
        app, ["search", query, "--index", str(embedded.path), "-k", "3", "--explain", "--json"]
    )
    assert as_json.exit_code == 0, as_json.output
    hits = json.loads(as_json.stdout)["hits"]
    assert [h["explanation"]["value"] for h in hits] == [h.score for h in result.hits]

    as_text = runner.invoke(
        app, ["search", query, "--index", str(embedded.path), "-k", "1", "--explain"]
    )
    assert as_text.exit_code == 0, as_text.output
    assert "AND (product) of 2" in as_text.stdout
    assert "NOT (complement): 1 - 0.5 * x" in as_text.stdout
    # The default NOT evidence: the larger of the cosine and what the passage mentions.
    assert '"bone health": truth max(max(0, cosine), lexical)' in as_text.stdout

    with serving(create_app(index)) as url:
        answer = httpx.post(f"{url}/search", json={"query": query, "k": 3, "explain": True})
    assert answer.status_code == 200, answer.text
    served = answer.json()["hits"]
    assert [h["explanation"] for h in served] == [h["explanation"] for h in hits]


# -- a real OpenSearch -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def opensearch_backend(opensearch_demo) -> OpenSearchBackend:
    """The session's read-only demo index (the whole corpus with its fields)."""
    return opensearch_demo


@pytest.mark.opensearch
@pytest.mark.parametrize(("query", "names"), CASES)
def test_opensearch_explanations_match_its_scores_and_the_embedded_engine(
    opensearch_backend, embedded, embedder, query, names
) -> None:
    parsed = parse(query)
    vectors = embedder.encode(list(parsed.terms))
    options = _options(names)
    remote = opensearch_backend.search(parsed, vectors, options)
    local = {h.id: h for h in embedded.search(parsed, vectors, options)}
    assert remote and not remote.warnings
    for hit in remote:
        tree = hit.explanation
        assert tree is not None
        assert abs(recompute(tree) - tree["value"]) < 1e-6
        assert abs(tree["value"] - hit.score) < 1e-4  # Painless float32 against numpy float64
        if hit.id in local:
            assert abs(tree["value"] - local[hit.id].explanation["value"]) < 1e-4
            for mine, theirs in zip(_leaves(tree), _leaves(local[hit.id].explanation), strict=True):
                assert abs(mine["value"] - theirs["value"]) < 1e-4


@pytest.mark.opensearch
def test_opensearch_explanation_that_disagrees_with_the_score_is_a_warning(
    opensearch_backend, embedder
) -> None:
    parsed = parse('"vitamin D" AND NOT "bone health"')
    vectors = embedder.encode(list(parsed.terms))
    options = _options({})
    lexical = opensearch_backend.term_statistics(parsed)  # what hybrid truths read
    body = opensearch_backend.dialect.search_body(parsed, vectors, options, lexical)
    response = opensearch_backend.client.search(index=opensearch_backend.index_name, body=body)
    # The engine scored these vectors; explaining its hits with other ones cannot add up.
    others = embedder.encode(["football", "opera"])
    hits = opensearch_backend.dialect.ranking(dict(response), parsed, others, options, lexical)
    assert hits.warnings
    assert "the engine scored" in hits.warnings[0] and "explanation adds up to" in hits.warnings[0]


@pytest.mark.opensearch
def test_pasted_request_with_engine_explain_shows_truths_not_vectors(
    opensearch_backend, opensearch_url, embedder
) -> None:
    opensearch_backend.install_scripts()
    options = search_options(k=3, explain=True)
    query = parse('"vitamin D" AND NOT "bone health"')
    (request,) = translate_requests(
        query,
        "opensearch",
        opensearch_backend.index_name,
        options,
        embedder,
        statistics=opensearch_backend.term_statistics(query),  # what hybrid truths read
    )
    assert request.body["explain"] is True
    assert request.body["_source"] == {"excludes": ["embedding", *LEXICAL_FIELDS]}
    answer = httpx.post(f"{opensearch_url}/{request.path}", json=request.body, timeout=60)
    assert answer.status_code == 200, answer.text
    hits = answer.json()["hits"]["hits"]
    assert len(hits) == 3
    for hit in hits:
        explanation = json.dumps(hit["_explanation"])
        assert len(explanation) < 600, explanation
        assert "per-term truths" in explanation
        assert "vectors=" not in explanation
        assert "embedding" not in hit["_source"]


@pytest.mark.opensearch
def test_query_bar_explain_through_the_proxy_is_short_and_per_term(
    opensearch_backend, opensearch_url, embedder
) -> None:
    from itlr.proxy import create_proxy_app
    from itlr.proxy import serving as serve_proxy

    body = {
        "size": 3,
        "explain": True,
        "query": {"query_string": {"query": 'itlr:("vitamin D" AND NOT "bone health")'}},
    }
    with serve_proxy(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        answer = httpx.post(f"{url}/{opensearch_backend.index_name}/_search", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    hits = answer.json()["hits"]["hits"]
    assert len(hits) == 3
    for hit in hits:
        # Elasticsearch's own shape, which Kibana / Dashboards show as they are.
        explanation = hit["_explanation"]
        assert set(explanation) == {"value", "description", "details"}
        assert abs(explanation["value"] - hit["_score"]) < 1e-6
        assert "per-term truths" in explanation["description"]
        assert len(json.dumps(explanation)) < 600
