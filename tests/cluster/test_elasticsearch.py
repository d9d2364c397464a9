"""The Elasticsearch backend: request bodies (no server), a real Elasticsearch for what it can run,
and the Elasticsearch Painless script on a real Painless interpreter.

Three tiers, because not every Elasticsearch runs Painless:
- no server: the request bodies, checked structurally for each version that changes them;
- `elasticsearch_url` (any real Elasticsearch, incl. the Maven Central integ-test-zip that has no
  lang-painless): mapping, bulk ingestion, resumption, kNN candidates, the dense baseline;
- `elasticsearch_painless_url` (a full Elasticsearch: Docker, or ITLR_ELASTICSEARCH_URL): the
  parity suite, exact scores == embedded engine to 1e-4;
- `opensearch_url`: the Elasticsearch score/exclude scripts run on OpenSearch's Painless (the
  same language, descended from Elasticsearch's), with the one vector accessor swapped. This is
  what proves the script's arithmetic on a real interpreter where no Painless Elasticsearch is
  available.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.request
import uuid
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr import IndexStateError, Operators, TruthMap
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.engines.elasticsearch import (
    EXCLUDE_SCRIPT,
    MAX_NUM_CANDIDATES,
    SCORE_SCRIPT,
    Capabilities,
    ElasticsearchBackend,
    version_refusal,
)
from itlr.engines.factory import EngineSpec, open_backend, remote_backend
from itlr.engines.layout import IndexLayout, derive_mapping
from itlr.engines.painless import render_painless
from itlr.engines.script_params import score_params
from itlr.errors import EngineError
from itlr.lexical import LEXICAL_FIELDS
from itlr.options import SearchOptions
from itlr.resources import data_file, painless_file
from parity import (
    HOSTILE_TERMS,
    assert_same_ranking,
    random_cases,
    term_vectors,
)

DIMS = 384


def cosine_options(**given: Any) -> SearchOptions:
    """Options with cosine truths: these cases check request shapes and the cosine scripts
    (hybrid truths on Elasticsearch bodies: tests/search/test_hybrid.py)."""
    return SearchOptions(truth=TruthMap("clamp"), **given)


def offline(version: str | None = "8.19.0", **kwargs) -> ElasticsearchBackend:
    """A backend with no client: only build_request can run."""
    return ElasticsearchBackend(None, "idx", "m", DIMS, version=version, **kwargs)


def unit_vectors(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def knn_clauses(body: dict) -> list[dict]:
    return [c["knn"] for c in body["query"]["script_score"]["query"]["bool"].get("should", [])]


def strip_comments(painless: str) -> str:
    return "\n".join(line.split("//", 1)[0] for line in painless.splitlines())


# -- request bodies, no server --------------------------------------------------------------


@pytest.mark.parametrize("filename", ["itlr_score.painless", "itlr_exclude.painless"])
def test_both_engines_run_one_painless_source_differing_only_in_the_vector_accessor(
    filename: str,
) -> None:
    source = painless_file(filename).read_text()
    opensearch = render_painless(source, "opensearch")
    elasticsearch = render_painless(source, "elasticsearch")
    assert "{{" not in opensearch and "{{" not in elasticsearch
    assert opensearch.count("field.value;") == 1
    assert elasticsearch.replace("field.vectorValue;", "field.value;") == opensearch


def test_an_unknown_painless_placeholder_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="unknown Painless placeholder"):
        render_painless("return doc[params.field].{{magnitude}};", "opensearch")


def test_mapping_is_an_indexed_cosine_dense_vector_under_the_layouts_names() -> None:
    layout = IndexLayout(vector_field="vec", text_field="body")
    body = derive_mapping("elasticsearch", layout, 768, "my-model")
    properties = body["mappings"]["properties"]
    assert properties["vec"] == {
        "type": "dense_vector",
        "dims": 768,
        "index": True,
        "similarity": "cosine",
        "index_options": {"type": "hnsw", "m": 16, "ef_construction": 128},
    }
    assert properties["body"] == {"type": "text"}
    assert properties["doc_id"] == {"type": "keyword"}
    meta = body["mappings"]["_meta"]["itlr"]
    assert (meta["model"], meta["dims"], meta["vector_field"]) == ("my-model", 768, "vec")
    (template,) = body["mappings"]["dynamic_templates"]
    assert template["metadata_strings_as_keywords"]["mapping"] == {"type": "keyword"}


def test_same_field_names_as_the_opensearch_mapping() -> None:
    layout = IndexLayout()
    es = derive_mapping("elasticsearch", layout, DIMS, "m")["mappings"]
    os_ = derive_mapping("opensearch", layout, DIMS, "m")["mappings"]
    assert set(es["properties"]) == set(os_["properties"])
    assert es["dynamic_templates"] == os_["dynamic_templates"]
    assert es["_meta"] == os_["_meta"]


def test_knn_candidates_sit_in_bool_should_one_per_positive_term_with_k_and_filter() -> None:
    query = itlr.parse('("vitamin D" OR "coffee") AND NOT "bone health"')
    vectors = unit_vectors(3)
    topic = {"term": {"metadata.topic": "health"}}
    body = offline("8.19.0").build_request(
        query, vectors, cosine_options(k=10, candidates=150, filter=topic, plan="per-term")
    )
    inner = body["query"]["script_score"]["query"]["bool"]
    assert inner["minimum_should_match"] == 1
    assert inner["filter"] == [topic]
    clauses = knn_clauses(body)
    assert len(clauses) == 2  # the NOT term gathers no candidates
    for term, knn in zip(query.positive_terms, clauses, strict=True):
        assert knn["field"] == "embedding"
        assert knn["k"] == 150
        assert knn["num_candidates"] >= knn["k"]
        assert knn["num_candidates"] <= MAX_NUM_CANDIDATES
        assert knn["filter"] == topic
        expected = vectors[query.terms.index(term)]
        assert np.allclose(knn["query_vector"], expected)
    assert body["sort"] == [{"_score": "desc"}, {"doc_id": "asc"}]


def test_before_8_15_the_knn_query_has_no_k_and_num_candidates_is_the_budget() -> None:
    query = itlr.parse('"vitamin D" AND "sleep"')
    options = cosine_options(candidates=120, plan="per-term")
    body = offline("8.13.4").build_request(query, unit_vectors(2), options)
    for knn in knn_clauses(body):
        assert "k" not in knn
        assert knn["num_candidates"] == 120


def test_knn_mode_before_8_12_is_refused_in_one_line_and_exact_mode_still_works() -> None:
    backend = offline("8.10.2")
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    with pytest.raises(EngineError) as refused:
        backend.build_request(query, unit_vectors(2), cosine_options(mode="knn"))
    message = str(refused.value)
    assert "8.10.2" in message and "8.12" in message and '`mode="exact"`' in message
    assert "\n" not in message
    body = backend.build_request(query, unit_vectors(2), cosine_options(mode="exact"))
    assert body["query"]["script_score"]["query"]["bool"]["must"] == [{"match_all": {}}]


def test_elasticsearch_7_is_refused_with_the_reason() -> None:
    assert "8.0" in (version_refusal("7.17.9") or "")
    assert version_refusal("8.0.0") is None
    assert version_refusal("9.5.3") is None


def test_versions_decide_the_knn_features() -> None:
    assert not Capabilities("8.11.4").knn_query
    assert Capabilities("8.12.0").knn_query and not Capabilities("8.14.3").knn_query_k
    assert Capabilities("8.15.0").knn_query_k and Capabilities("9.5.3").knn_query_k
    assert Capabilities(None).knn_query_k  # no server to ask: the newest


def test_a_budget_beyond_the_num_candidates_limit_is_capped_with_a_warning() -> None:
    backend = offline()
    query = itlr.parse('"vitamin D"')
    options = cosine_options(candidates=50_000)
    request = backend.dialect.search_request(query, unit_vectors(1), options)
    body, notes = request.body, request.warnings
    (knn,) = knn_clauses(body)
    assert knn["k"] == knn["num_candidates"] == MAX_NUM_CANDIDATES
    assert any("num_candidates" in w for w in notes)
    assert backend.warnings == []  # a search's warning travels with it, never on the backend


def test_hard_filter_is_one_script_score_in_must_not_with_the_excluded_then_positive_vectors() -> (
    None
):
    query = itlr.parse('("vitamin D" OR calcium) AND NOT "bone health" AND NOT "sleep"')
    vectors = unit_vectors(4)
    for rule, rivals in (("relative", ("vitamin D", "calcium")), ("absolute", ())):
        options = cosine_options(hard_filter=0.4, hard_filter_rule=rule, exclude_lexical=True)
        body = offline().build_request(query, vectors, options)
        must_not = body["query"]["script_score"]["query"]["bool"]["must_not"]
        (clause,) = [c["script_score"] for c in must_not if "script_score" in c]
        # min_score = base + theta: a score of 0 (nothing beats the positive terms) never drops.
        assert clause["min_score"] == pytest.approx(1.4)
        assert clause["script"]["id"] == EXCLUDE_SCRIPT.id
        params = clause["script"]["params"]
        assert params["excluded"] == 2 and params["base"] == 1.0
        chosen = ["bone health", "sleep", *rivals]
        packed = np.frombuffer(base64.b64decode(params["vectors"]), "<f4")
        packed = packed.reshape(len(chosen), -1)
        assert np.array_equal(packed, vectors[[query.terms.index(t) for t in chosen]])
        phrases = [c["match_phrase"]["text"] for c in must_not if "match_phrase" in c]
        assert phrases == ["bone health", "sleep"]


def test_requests_carry_only_the_stored_script_id_and_params() -> None:
    text = " AND ".join(
        '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in HOSTILE_TERMS
    )
    query = itlr.parse(text)
    body = offline().build_request(query, unit_vectors(len(query.terms)), cosine_options())
    script = body["query"]["script_score"]["script"]
    assert set(script) == {"id", "params"} and script["id"] == SCORE_SCRIPT.id
    serialized = json.dumps(body)
    assert not any(t in serialized or json.dumps(t)[1:-1] in serialized for t in HOSTILE_TERMS)


def test_inline_mode_sends_the_fixed_elasticsearch_source() -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    body = offline(inline_script=True).build_request(
        query, unit_vectors(2), cosine_options(hard_filter=0.5)
    )
    assert body["query"]["script_score"]["script"]["source"] == SCORE_SCRIPT.source
    exclusion = body["query"]["script_score"]["query"]["bool"]["must_not"][0]["script_score"]
    assert exclusion["script"]["source"] == EXCLUDE_SCRIPT.source


def test_script_ids_are_versioned_and_differ_from_the_opensearch_ones() -> None:
    from itlr.engines import opensearch

    assert re.fullmatch(r"itlr-score-es-v\d+-[0-9a-f]{10}", SCORE_SCRIPT.id)
    assert SCORE_SCRIPT.id != opensearch.SCORE_SCRIPT.id


def test_scripts_compute_cosines_themselves_instead_of_class_bound_functions() -> None:
    # cosineSimilarity/dotProduct/l2norm are per-call-site class bindings in ES Painless: in a
    # loop over terms they would reuse the first term's vector.
    for script in (SCORE_SCRIPT, EXCLUDE_SCRIPT):
        code = strip_comments(script.source)
        assert not re.search(r"\b(cosineSimilarity|dotProduct|l1norm|l2norm)\s*\(", code)
        assert "vectorValue" in code


def test_both_engines_scripts_differ_only_in_how_they_read_the_vector() -> None:
    from itlr.engines import opensearch

    def code(source: str) -> list[str]:
        return [line for line in strip_comments(source).splitlines() if line.strip()]

    for es, os_ in (
        (SCORE_SCRIPT, opensearch.SCORE_SCRIPT),
        (EXCLUDE_SCRIPT, opensearch.EXCLUDE_SCRIPT),
    ):
        pairs = zip(code(es.source), code(os_.source), strict=True)
        differing = [(a, b) for a, b in pairs if a != b]
        assert differing == [("float[] v = field.vectorValue;", "float[] v = field.value;")]


def test_explain_returns_vectors_and_asks_9_2_for_them_explicitly() -> None:
    query = itlr.parse('"vitamin D"')
    plain = offline("8.19.0").build_request(query, unit_vectors(1), cosine_options())
    assert plain["_source"] == {"excludes": ["embedding", *LEXICAL_FIELDS]}
    old = offline("8.19.0").build_request(query, unit_vectors(1), cosine_options(explain=True))
    assert old["_source"] == {"includes": ["*"]}
    new = offline("9.2.0").build_request(query, unit_vectors(1), cosine_options(explain=True))
    assert new["_source"] == {"includes": ["*"], "exclude_vectors": False}


def test_engine_elasticsearch_opens_its_backend_without_contacting_the_cluster() -> None:
    spec = EngineSpec("elasticsearch", "idx", Connection("http://127.0.0.1:9"))
    backend = remote_backend(spec, "m", DIMS)
    assert isinstance(backend, ElasticsearchBackend)
    assert backend.url == "http://127.0.0.1:9"


# -- the ES script on a real Painless interpreter (OpenSearch's) ---------------------------------


def on_opensearch_painless(source: str) -> str:
    """The Elasticsearch script for OpenSearch's k-NN doc values: `.vectorValue` is `.value`."""
    assert source.count("field.vectorValue") == 1
    return source.replace("field.vectorValue", "field.value")


def run_es_script_on_opensearch(backend, body: dict) -> list:
    """Swap the ES scripts' sources (inline) into an ES request body and run it on OpenSearch."""
    from itlr.engines.response import ranking_from_response

    text = json.dumps(body)
    sources = {
        SCORE_SCRIPT.id: on_opensearch_painless(SCORE_SCRIPT.source),
        EXCLUDE_SCRIPT.id: on_opensearch_painless(EXCLUDE_SCRIPT.source),
    }

    def inline(node):
        if isinstance(node, dict):
            if set(node) == {"id", "params"} and node["id"] in sources:
                return {"source": sources[node["id"]], "lang": "painless", "params": node["params"]}
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    response = backend.client.search(index=backend.index_name, body=inline(json.loads(text)))
    return ranking_from_response(response, None, None, None, backend.layout).hits


@pytest.mark.opensearch
def test_es_score_script_on_a_real_painless_matches_the_embedded_engine_on_60_queries(
    opensearch_demo, embedded, vocabulary_vectors, embedder
) -> None:
    es = offline("8.19.0")
    for query, options in random_cases(60, seed=11, trees_first=False):
        vectors = term_vectors(query, vocabulary_vectors)
        remote = run_es_script_on_opensearch(
            opensearch_demo, es.build_request(query, vectors, options)
        )
        assert_same_ranking(remote, embedded.search(query, vectors, options))


@pytest.mark.opensearch
@pytest.mark.parametrize("rule", ["relative", "absolute"])
def test_es_exclude_script_on_a_real_painless_drops_what_the_embedded_engine_drops(
    opensearch_demo, embedded, vocabulary_vectors, rule
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health" AND NOT "immune system"')
    vectors = term_vectors(query, vocabulary_vectors)
    for theta in (0.25, 0.4):
        options = cosine_options(k=50, mode="exact", hard_filter=theta, hard_filter_rule=rule)
        remote = run_es_script_on_opensearch(
            opensearch_demo, offline().build_request(query, vectors, options)
        )
        assert [h.id for h in remote] == [h.id for h in embedded.search(query, vectors, options)]


def single_term_body(query, vectors: np.ndarray, term_index: int) -> dict:
    """An exact-mode request whose program is just PUSH term_index: the score is that term's
    truth (shift: (1 + cos) / 2, so no cosine is clamped away)."""
    options = SearchOptions(k=400, mode="exact", truth=TruthMap("shift"))
    body = offline().build_request(query, vectors, options)
    body["query"]["script_score"]["script"]["params"]["program"] = [0, term_index]
    return body


def assert_two_terms_get_two_similarities(hits_first, hits_second, corpus_vectors, corpus, vectors):
    index_of = {d.id: i for i, d in enumerate(corpus)}
    first = {h.id: h.score for h in hits_first}
    second = {h.id: h.score for h in hits_second}
    assert first.keys() == second.keys() and len(first) == len(corpus)
    differing = 0
    for doc_id, score in first.items():
        unit = corpus_vectors[index_of[doc_id]] / np.linalg.norm(corpus_vectors[index_of[doc_id]])
        cosines = vectors @ unit
        assert score == pytest.approx((1 + cosines[0]) / 2, rel=1e-4)
        assert second[doc_id] == pytest.approx((1 + cosines[1]) / 2, rel=1e-4)
        differing += abs(score - second[doc_id]) > 1e-3
    assert differing > 0.9 * len(first)


@pytest.mark.opensearch
def test_two_terms_get_two_different_similarities_on_the_same_document_painless(
    opensearch_demo, corpus, corpus_vectors, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" OR "electric car batteries"')
    vectors = term_vectors(query, vocabulary_vectors)
    hits = [
        run_es_script_on_opensearch(opensearch_demo, single_term_body(query, vectors, i))
        for i in (0, 1)
    ]
    assert_two_terms_get_two_similarities(*hits, corpus_vectors, corpus, vectors)


# -- a real Elasticsearch, with or without Painless ------------------------------------------


def server_version(url: str) -> str:
    with urllib.request.urlopen(f"{url}/_nodes/_local?filter_path=nodes.*.version") as answer:
        (node,) = json.load(answer)["nodes"].values()
    return node["version"]


@pytest.mark.elasticsearch
def test_the_backend_learns_the_server_version_even_where_get_root_is_refused(
    elasticsearch_demo, elasticsearch_url
) -> None:
    # The integ-test-zip node answers GET / with 405: the version comes from the local node.
    assert elasticsearch_demo.capabilities.version == server_version(elasticsearch_url)
    assert elasticsearch_demo.count() == 338


@pytest.mark.elasticsearch
def test_index_is_created_from_the_elasticsearch_mapping(elasticsearch_demo, embedder) -> None:
    mapping = elasticsearch_demo.client.indices.get_mapping(index=elasticsearch_demo.index_name)[
        elasticsearch_demo.index_name
    ]["mappings"]
    vector = mapping["properties"]["embedding"]
    assert (vector["type"], vector["dims"], vector["similarity"]) == (
        "dense_vector",
        embedder.dims,
        "cosine",
    )
    assert vector.get("index", True) is True
    assert mapping["_meta"]["itlr"]["model"] == embedder.name
    assert mapping["properties"]["metadata"]["properties"]["topic"]["type"] == "keyword"


@pytest.mark.elasticsearch
def test_knn_candidates_are_the_union_of_each_terms_nearest_neighbours(
    elasticsearch_demo, corpus, corpus_vectors, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" AND "coffee and sleep" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    budget = 25
    body = elasticsearch_demo.build_request(
        query, vectors, cosine_options(candidates=budget, plan="per-term")
    )
    candidate_query = body["query"]["script_score"]["query"]
    response = elasticsearch_demo.client.search(
        index=elasticsearch_demo.index_name, query=candidate_query, size=500, source=False
    )
    found = {h["_id"] for h in response["hits"]["hits"]}
    units = corpus_vectors / np.linalg.norm(corpus_vectors, axis=1, keepdims=True)
    expected: set[str] = set()
    for term in query.positive_terms:
        cosines = units @ vectors[query.terms.index(term)]
        expected |= {corpus[i].id for i in np.argsort(-cosines)[:budget]}
    assert len(found & expected) >= 0.95 * len(expected)
    assert len(found) <= len(expected)


@pytest.mark.elasticsearch
def test_user_filter_applies_inside_knn_so_candidates_all_match_it(
    elasticsearch_demo, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" OR "coffee and sleep"')
    vectors = term_vectors(query, vocabulary_vectors)
    topic = {"term": {"metadata.topic": "coffee"}}
    body = elasticsearch_demo.build_request(
        query, vectors, cosine_options(candidates=30, filter=topic)
    )
    response = elasticsearch_demo.client.search(
        index=elasticsearch_demo.index_name, query=body["query"]["script_score"]["query"], size=100
    )
    hits = response["hits"]["hits"]
    assert hits and all(h["_source"]["metadata"]["topic"] == "coffee" for h in hits)


@pytest.mark.elasticsearch
def test_dense_baseline_returns_the_exact_nearest_neighbours(
    elasticsearch_demo, corpus, corpus_vectors, embedder
) -> None:
    vector = embedder.encode(["vitamin D and the immune system"])[0]
    hits = elasticsearch_demo.search_vector(vector, 10)
    units = corpus_vectors / np.linalg.norm(corpus_vectors, axis=1, keepdims=True)
    exact = [corpus[i].id for i in np.argsort(-(units @ vector))[:10]]
    assert len({h.id for h in hits} & set(exact)) >= 9
    assert all(h.text and not h.truths for h in hits)


@pytest.mark.elasticsearch
def test_missing_index_is_one_actionable_line(elasticsearch_url, embedder) -> None:
    spec = EngineSpec("elasticsearch", "no-such-index", Connection(elasticsearch_url))
    with pytest.raises(IndexStateError, match=r"does not exist.*itlr ingest"):
        open_backend(spec, embedder)


def test_unreachable_elasticsearch_is_one_actionable_line(embedder) -> None:
    spec = EngineSpec("elasticsearch", "x", Connection("http://127.0.0.1:9"))
    with pytest.raises(EngineError, match=r"cannot reach Elasticsearch at http://127\.0\.0\.1:9"):
        open_backend(spec, embedder)


@pytest.mark.elasticsearch
def test_a_node_without_painless_says_so_in_one_line(elasticsearch_demo, elasticsearch_url) -> None:
    from opensearch_fixture import has_painless

    if has_painless(elasticsearch_url):
        pytest.skip("this Elasticsearch has Painless")
    query = itlr.parse('"vitamin D"')
    with pytest.raises(EngineError, match="no lang-painless module") as refused:
        elasticsearch_demo.search(query, np.ones((1, DIMS), dtype=np.float32), cosine_options())
    assert "\n" not in str(refused.value)


runner = CliRunner()


@pytest.mark.elasticsearch
def test_cli_ingests_into_elasticsearch_and_resumes(elasticsearch_url) -> None:
    source = data_file("demo", "corpus.jsonl")
    name = f"itlr-cli-{uuid.uuid4().hex[:8]}"
    args = ["ingest", str(source), "--engine", "elasticsearch", "--url", elasticsearch_url]
    first = runner.invoke(app, [*args, "--index", name])
    assert first.exit_code == 0, first.output
    assert "added 338" in first.stdout
    again = runner.invoke(app, [*args, "--index", name])
    assert again.exit_code == 0 and "added 0, updated 0, unchanged 338" in again.stdout


# -- a real Elasticsearch with Painless: the parity suite --------------------------------------


@pytest.fixture(scope="module")
def painless_demo(elasticsearch_painless_url, elasticsearch_demo) -> ElasticsearchBackend:
    return elasticsearch_demo


@pytest.mark.elasticsearch
def test_two_terms_get_two_different_similarities_on_the_same_document(
    painless_demo, corpus, corpus_vectors, vocabulary_vectors
) -> None:
    from itlr.engines.response import ranking_from_response

    query = itlr.parse('"vitamin D" OR "electric car batteries"')
    vectors = term_vectors(query, vocabulary_vectors)
    painless_demo.install_scripts()
    hits = []
    for i in (0, 1):
        response = painless_demo.client.search(
            index=painless_demo.index_name, body=single_term_body(query, vectors, i)
        )
        hits.append(
            ranking_from_response(dict(response), None, None, None, painless_demo.layout).hits
        )
    assert_two_terms_get_two_similarities(*hits, corpus_vectors, corpus, vectors)


@pytest.mark.elasticsearch
@pytest.mark.parametrize("rule", ["relative", "absolute"])
def test_hard_filter_drops_the_same_documents(
    painless_demo, embedded, vocabulary_vectors, rule
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health" AND NOT "immune system"')
    vectors = term_vectors(query, vocabulary_vectors)
    for theta in (0.25, 0.4):
        options = cosine_options(
            k=50, mode="exact", hard_filter=theta, hard_filter_rule=rule, explain=True
        )
        remote = painless_demo.search(query, vectors, options)
        local = embedded.search(query, vectors, options)
        assert [h.id for h in remote] == [h.id for h in local]
        if rule == "absolute":
            assert all(h.truths["bone health"] < theta for h in remote)


@pytest.mark.elasticsearch
def test_user_filters_and_lexical_exclusion_match_the_embedded_engine(
    painless_demo, embedded, vocabulary_vectors
) -> None:
    query = itlr.parse('"vitamin D" OR "coffee and sleep"')
    vectors = term_vectors(query, vocabulary_vectors)
    topic = {"term": {"metadata.topic": "coffee"}}
    for mode in ("knn", "exact"):
        options = cosine_options(k=10, mode=mode, filter=topic)
        remote = painless_demo.search(query, vectors, options)
        assert remote and all(h.fields["topic"] == "coffee" for h in remote)
        assert_same_ranking(remote, embedded.search(query, vectors, options))
    negated = itlr.parse('"vitamin D" AND NOT "bone health"')
    hits = painless_demo.search(
        negated,
        term_vectors(negated, vocabulary_vectors),
        cosine_options(k=30, exclude_lexical=True),
    )
    assert hits and not any("bone health" in h.text.lower() for h in hits)


@pytest.mark.elasticsearch
def test_inline_and_stored_scripts_rank_alike_and_install_is_idempotent(
    painless_demo, embedder
) -> None:
    inline = ElasticsearchBackend(
        painless_demo.client,
        painless_demo.index_name,
        embedder.name,
        embedder.dims,
        inline_script=True,
    )
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    stored = painless_demo.search(query, vectors, cosine_options(k=5))
    assert [h.id for h in inline.search(query, vectors, cosine_options(k=5))] == [
        h.id for h in stored
    ]
    painless_demo.install_scripts()
    assert painless_demo.install_scripts() == []


@pytest.mark.elasticsearch
def test_explained_hits_carry_each_terms_truth(painless_demo, vocabulary_vectors) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    assert all(h.truths == {} for h in painless_demo.search(query, vectors, cosine_options(k=3)))
    explained = painless_demo.search(query, vectors, cosine_options(k=3, explain=True))
    assert set(explained[0].truths) == {"vitamin D", "bone health"}


@pytest.mark.elasticsearch
def test_cli_search_on_elasticsearch_returns_the_embedded_ranking(
    elasticsearch_painless_url, tmp_path
) -> None:
    source = data_file("demo", "corpus.jsonl")
    name = f"itlr-cli-{uuid.uuid4().hex[:8]}"
    url = elasticsearch_painless_url
    ingested = runner.invoke(
        app, ["ingest", str(source), "--engine", "elasticsearch", "--url", url, "--index", name]
    )
    assert ingested.exit_code == 0, ingested.output
    runner.invoke(app, ["ingest", str(source), "--index", str(tmp_path / "local")])
    query = '"vitamin D benefits" AND NOT "bone health"'
    local = runner.invoke(app, ["search", query, "--index", str(tmp_path / "local"), "--json"])
    local_ids = [h["id"] for h in json.loads(local.stdout)["hits"]]
    for engine in ("elasticsearch", "auto"):
        remote = runner.invoke(
            app, ["search", query, "--engine", engine, "--url", url, "--index", name, "--json"]
        )
        assert remote.exit_code == 0, remote.output
        assert [h["id"] for h in json.loads(remote.stdout)["hits"]] == local_ids


def test_score_params_are_the_shared_layout(vocabulary_vectors) -> None:
    # Same params as OpenSearch: one program, one evaluator contract.
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    options = cosine_options(ops=Operators("min", "max", "reciprocal"))
    body = offline().build_request(query, vectors, options)
    assert body["query"]["script_score"]["script"]["params"] == score_params(
        query, vectors, options, IndexLayout()
    )
