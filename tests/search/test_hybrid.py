"""Hybrid truth values (truth="hybrid"): the lexical evidence of itlr.lexical, mixed with the
cosine per term, alike in numpy, the embedded engine and the Painless scripts on a real
OpenSearch (one shard and several), and the Elasticsearch script on OpenSearch's Painless."""

from __future__ import annotations

import json
import math
import random
import uuid

import numpy as np
import pytest

import itlr
from itlr.composition import compose
from itlr.engines.elasticsearch import SCORE_SCRIPT as ES_SCORE_SCRIPT
from itlr.engines.elasticsearch import ElasticsearchBackend
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.lexical_requests import read_term_statistics, term_statistics_request
from itlr.errors import ConfigurationError
from itlr.lexical import (
    K1,
    LENGTH_FIELD,
    MAX_KEYED_COUNT,
    TOKEN_KEYS_FIELD,
    TOKENS_FIELD,
    B,
    CorpusStats,
    LexicalCorpus,
    bm25_truth,
    lexical_fields,
    term_tokens,
    token_key,
    tokenize,
)
from itlr.options import SearchOptions, search_options
from itlr.scoring import Operators, TruthMap
from itlr.translation import translate_requests
from parity import VOCABULARY, assert_same_ranking, sharded_backend, term_vectors

# -- the lexical value ------------------------------------------------------------------------


def test_tokens_are_casefolded_unicode_words_without_stop_words() -> None:
    assert tokenize("The Vitamin-D of ÉTÉ, and ﬁsh") == ["vitamin", "d", "été", "fish"]
    assert tokenize("x" * 65 + " kept") == ["kept"]


def test_a_document_stores_each_token_with_its_count_and_its_length() -> None:
    fields = lexical_fields("Vitamin D, vitamin C and the sun")
    assert fields[TOKENS_FIELD] == ["c 1", "d 1", "sun 1", "vitamin 2"]
    assert fields[LENGTH_FIELD] == 5
    keyed = {token_key(t) | int(c) for t, c in (v.split() for v in fields[TOKENS_FIELD])}
    assert fields[TOKEN_KEYS_FIELD] == sorted(keyed)


def test_token_keys_are_stable_positive_longs_with_the_count_in_the_low_bits() -> None:
    # Stored documents hold these keys: a change of the digest would silently zero every
    # stored document's lexical truth until re-indexed.
    assert token_key("vitamin") == 0x7931ADA3D4C50000
    keys = [token_key(w) for w in ("a", "vitamin", "été", "x" * 64)]
    assert all(0 < k < 2**63 and k & MAX_KEYED_COUNT == 0 for k in keys)
    (capped,) = lexical_fields("spam " * 70_000)[TOKEN_KEYS_FIELD]
    assert capped == token_key("spam") | MAX_KEYED_COUNT


def lucene_bm25(tf: float, idf: float, length: float, avgdl: float) -> float:
    """Textbook BM25 of one token, with the (k1 + 1) factor Lucene's upper bound carries."""
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))


def test_lexical_truth_is_bm25_over_its_upper_bound() -> None:
    stats = CorpusStats(documents=10, total_length=100, df={"vitamin": 3, "d": 5})
    term = term_tokens("vitamin D", stats)
    counts, length = {"vitamin": 2, "d": 1}, 14
    bm25 = sum(
        lucene_bm25(counts[t], stats.idf(t), length, stats.average_length) for t in term.tokens
    )
    bound = sum(stats.idf(t) * (K1 + 1) for t in term.tokens)
    assert bm25_truth(counts, length, term, stats.average_length) == pytest.approx(bm25 / bound)
    assert stats.idf("vitamin") == pytest.approx(math.log(1 + (10 - 3 + 0.5) / (3 + 0.5)))


def test_lexical_truth_grows_with_the_count_towards_one_and_is_zero_without_a_mention() -> None:
    stats = CorpusStats(documents=4, total_length=40, df={"bone": 2})
    term = term_tokens("bone", stats)
    values = [bm25_truth({"bone": tf}, 10, term, 10.0) for tf in (0, 1, 2, 10, 1000)]
    assert values[0] == 0.0
    assert values == sorted(values)
    assert 0.99 < values[-1] < 1.0


def test_rarer_tokens_weigh_more_in_a_term() -> None:
    stats = CorpusStats(documents=100, total_length=1000, df={"vitamin": 50, "aarhus": 1})
    term = term_tokens("vitamin Aarhus", stats)
    shares = dict(zip(term.tokens, term.weights, strict=True))
    assert shares["aarhus"] > shares["vitamin"]
    assert sum(term.weights) == pytest.approx(1.0)


def test_a_term_of_stop_words_only_keeps_its_cosine() -> None:
    query = itlr.parse('"the" AND "bone"')
    corpus = LexicalCorpus(["the bone", "the the the"])
    lexical = corpus.matrix([0, 1], query.terms, corpus.full_stats)
    assert lexical[:, 0].tolist() == [0.0, 0.0]
    truth = TruthMap("hybrid", lexical=0.5)
    cosines = np.array([[0.8, 0.1], [0.6, 0.2]])
    composed = compose(query, cosines, Operators(), truth, lexical_truths=lexical)
    assert composed.truths[:, 0] == pytest.approx(cosines[:, 0])
    assert composed.truths[:, 1] == pytest.approx(0.5 * cosines[:, 1] + 0.5 * lexical[:, 1])


def test_not_evidence_chooses_the_lexical_share_of_negated_terms() -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health" AND ("sun" OR NOT NOT "fish")')
    assert query.negated_terms == {"bone health"}
    terms = query.terms
    for evidence, expected in (("lexical", 1.0), ("cosine", 0.0), ("mixed", 0.3)):
        weights = TruthMap("hybrid", lexical=0.3, not_evidence=evidence).lexical_weights(
            terms, query.negated_terms
        )
        assert weights.tolist() == [0.3, expected, 0.3, 0.3]
    assert TruthMap("clamp").lexical_weights(terms, ()).tolist() == [0.0] * 4


def test_hybrid_truth_is_the_weighted_mean_of_clamped_cosine_and_lexical_value() -> None:
    query = itlr.parse('"sun" AND NOT "fish"')
    cosines = np.array([[0.6, -0.2], [0.3, 0.7]])
    lexical = np.array([[0.4, 0.9], [0.0, 0.1]])
    truth = TruthMap("hybrid", lexical=0.25, not_evidence="lexical")
    composed = compose(query, cosines, Operators(not_strength=0.5), truth, lexical_truths=lexical)
    expected_a = 0.75 * np.clip(cosines[:, 0], 0, 1) + 0.25 * lexical[:, 0]
    expected_b = lexical[:, 1]
    assert composed.truths[:, 0] == pytest.approx(expected_a)
    assert composed.truths[:, 1] == pytest.approx(expected_b)
    assert composed.scores == pytest.approx(expected_a * (1 - 0.5 * expected_b))


def test_hybrid_options_are_checked_with_one_line_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"lexical share .* in \[0, 1\]"):
        TruthMap("hybrid", lexical=1.5)
    with pytest.raises(ConfigurationError, match="unknown NOT evidence 'bm25'"):
        search_options(truth="hybrid", not_evidence="bm25")
    with pytest.raises(ConfigurationError, match="hybrid truth values need the lexical"):
        TruthMap("hybrid").apply(np.zeros((1, 1)), ["x"])
    options = search_options(truth="hybrid", lexical=0.3, not_evidence="cosine")
    assert (options.truth.kind, options.truth.lexical, options.truth.not_evidence) == (
        "hybrid",
        0.3,
        "cosine",
    )
    assert TruthMap.from_dict(options.truth.to_dict()) == options.truth


def test_translate_without_the_index_statistics_refuses_hybrid_truths(embedder) -> None:
    options = SearchOptions(truth=TruthMap("hybrid"))
    with pytest.raises(ConfigurationError, match="token statistics, counted on the cluster"):
        translate_requests('"a" AND NOT "b"', "opensearch", "idx", options, embedder)


# -- the embedded engine ----------------------------------------------------------------------


def unit(rng: np.random.Generator, count: int, dims: int = 8) -> np.ndarray:
    vectors = rng.normal(size=(count, dims)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_embedded_hybrid_search_demotes_the_passage_that_mentions_the_excluded_term(
    tmp_path,
) -> None:
    rng = np.random.default_rng(0)
    index = EmbeddedBackend.create(tmp_path / "idx", "toy", 8)
    texts = ["aarhus is a city", "aarhus is a city in denmark", "copenhagen harbour"]
    vectors = unit(rng, 1).repeat(3, axis=0)  # one cosine for all: only the words differ
    index.add(["a", "b", "c"], texts, vectors)
    query = itlr.parse('"aarhus" AND NOT "denmark"')
    terms = np.vstack([vectors[0], unit(rng, 1)[0]])
    # BM25 alone judges the NOT term: the words decide, whatever the cosines say.
    bm25_not = TruthMap("hybrid", lexical=0.5, not_evidence="lexical")
    options = SearchOptions(k=3, mode="exact", truth=bm25_not)
    hits = index.search(query, terms, options)
    assert [h.id for h in hits][:2] == ["a", "b"]
    assert hits[0].truths["denmark"] == 0.0 and hits[1].truths["denmark"] > 0.3
    plain = index.search(query, terms, SearchOptions(k=3, mode="exact", truth=TruthMap("clamp")))
    assert plain[0].score == pytest.approx(plain[1].score)


def test_embedded_statistics_count_live_documents_only(tmp_path) -> None:
    rng = np.random.default_rng(1)
    index = EmbeddedBackend.create(tmp_path / "idx", "toy", 8)
    index.add(["a", "b"], ["bone bone", "sun"], unit(rng, 2))
    before = index.term_statistics()
    assert (before.documents, before.total_length, before.df["bone"]) == (2, 3, 1)
    index.delete(["a"])
    index.add(["b"], ["sun and fish"], unit(rng, 1))  # replaced: the old row is dead
    after = index.term_statistics()
    assert (after.documents, after.total_length, after.df.get("bone", 0)) == (1, 2, 0)


# -- OpenSearch: the same figures to 1e-4 ---------------------------------------------------


def hybrid_cases(count: int, seed: int) -> list[tuple[itlr.Query, SearchOptions]]:
    """Random trees from the demo vocabulary with random operators and hybrid parameters."""
    from itlr.benchmarks.text_corpus import random_queries

    rng = random.Random(seed)
    trees = random_queries(VOCABULARY, count, rng)
    cases = []
    for tree in trees:
        ops = Operators(
            rng.choice(["product", "sum", "min"]),
            rng.choice(["sum", "max", "probsum"]),
            not_strength=rng.choice([1.0, 0.5]),
        )
        truth = TruthMap(
            "hybrid",
            lexical=rng.choice([0.3, 0.5, 1.0]),
            not_evidence=rng.choice(["lexical", "cosine", "mixed", "max"]),
        )
        cases.append(
            (itlr.parse(str(tree)), SearchOptions(k=10, mode="exact", ops=ops, truth=truth))
        )
    return cases


@pytest.fixture(scope="module")
def one_shard(opensearch_url, corpus, corpus_vectors, embedder):
    backend = sharded_backend(opensearch_url, corpus, corpus_vectors, embedder, 1)
    yield backend
    backend.client.indices.delete(index=backend.index_name)


@pytest.fixture(scope="module")
def three_shards(opensearch_url, corpus, corpus_vectors, embedder):
    backend = sharded_backend(opensearch_url, corpus, corpus_vectors, embedder, 3)
    yield backend
    backend.client.indices.delete(index=backend.index_name)


@pytest.mark.opensearch
@pytest.mark.parametrize("shards", [1, 3])
def test_cluster_statistics_are_the_embedded_index_statistics(
    shards, one_shard, three_shards, embedded
) -> None:
    backend = one_shard if shards == 1 else three_shards
    query = itlr.parse('"vitamin D" AND NOT "bone health" AND NOT "zzyzx"')
    remote = read_term_statistics(
        dict(backend.client.search(index=backend.index_name, body=term_statistics_request(query)))
    )
    local = embedded.term_statistics()
    assert (remote.documents, remote.total_length) == (local.documents, local.total_length)
    assert remote.df == {t: local.df.get(t, 0) for t in ("vitamin", "d", "bone", "health", "zzyzx")}


@pytest.mark.opensearch
@pytest.mark.parametrize("shards", [1, 3])
def test_hybrid_scores_match_the_embedded_engine_on_40_random_queries(
    shards, one_shard, three_shards, embedded, vocabulary_vectors
) -> None:
    backend = one_shard if shards == 1 else three_shards
    for query, options in hybrid_cases(40, seed=shards):
        vectors = term_vectors(query, vocabulary_vectors)
        assert_same_ranking(
            backend.search(query, vectors, options), embedded.search(query, vectors, options)
        )


@pytest.mark.opensearch
@pytest.mark.parametrize("evidence", ["lexical", "cosine", "mixed", "max"])
def test_each_terms_hybrid_truth_matches_to_1e4_on_every_document(
    evidence, three_shards, embedded, vocabulary_vectors, corpus
) -> None:
    # A one-term program's score is that term's truth; under NOT it is 1 - truth.
    for text in ('"vitamin D"', 'NOT "bone health"', '"immune system"'):
        query = itlr.parse(text)
        vectors = term_vectors(query, vocabulary_vectors)
        truth = TruthMap("hybrid", lexical=0.4, not_evidence=evidence)
        options = SearchOptions(k=len(corpus), mode="exact", ops=Operators(), truth=truth)
        remote = {h.id: h.score for h in three_shards.search(query, vectors, options)}
        local = {h.id: h.score for h in embedded.search(query, vectors, options)}
        assert remote.keys() == local.keys()
        assert max(abs(remote[i] - local[i]) for i in local) < 1e-4


@pytest.mark.opensearch
def test_knn_mode_and_explained_truths_match_the_embedded_engine(
    one_shard, embedded, vocabulary_vectors, corpus
) -> None:
    query = itlr.parse('"vitamin D" AND NOT "bone health"')
    vectors = term_vectors(query, vocabulary_vectors)
    options = SearchOptions(
        k=10, mode="knn", candidates=len(corpus), truth=TruthMap("hybrid"), explain=True
    )
    remote, local = (
        one_shard.search(query, vectors, options),
        embedded.search(query, vectors, options),
    )
    assert_same_ranking(remote, local)
    for mine, theirs in zip(remote, local, strict=True):
        for term in query.terms:
            assert mine.truths[term] == pytest.approx(theirs.truths[term], abs=1e-4)


@pytest.mark.opensearch
def test_a_document_without_lexical_fields_keeps_its_cosine_share(
    one_shard, embedded, vocabulary_vectors
) -> None:
    # An index filled before the lexical fields existed (or by another writer): no tokens.
    doc_id = f"bare-{uuid.uuid4().hex[:6]}"
    vector = vocabulary_vectors["vitamin D"]
    one_shard.client.index(
        index=one_shard.index_name,
        id=doc_id,
        body={"doc_id": doc_id, "text": "vitamin D", "embedding": vector.tolist()},
        refresh=True,
    )
    try:
        query = itlr.parse('"vitamin D"')
        options = SearchOptions(
            k=1,
            mode="exact",
            ops=Operators(),
            truth=TruthMap("hybrid", lexical=0.5),
            filter={"term": {"doc_id": doc_id}},
        )
        (hit,) = one_shard.search(query, vector[None, :], options)
        assert hit.id == doc_id
        assert hit.score == pytest.approx(0.5, abs=1e-4)  # cosine 1, lexical 0
    finally:
        one_shard.client.delete(index=one_shard.index_name, id=doc_id, refresh=True)


@pytest.mark.opensearch
def test_es_score_script_computes_the_same_hybrid_scores_on_a_real_painless(
    three_shards, embedded, vocabulary_vectors
) -> None:
    es = ElasticsearchBackend(None, three_shards.index_name, "m", 384, version="8.19.0")
    # The ES script for OpenSearch's k-NN doc values: `.vectorValue` is `.value`.
    source = ES_SCORE_SCRIPT.source.replace("field.vectorValue", "field.value")
    for query, options in hybrid_cases(20, seed=5):
        vectors = term_vectors(query, vocabulary_vectors)
        stats = three_shards.term_statistics(query)
        body = es.dialect.search_body(query, vectors, options, stats)
        script = body["query"]["script_score"]["script"]
        body["query"]["script_score"]["script"] = {
            "source": source,
            "lang": "painless",
            "params": script["params"],
        }
        response = three_shards.client.search(
            index=three_shards.index_name, body=json.loads(json.dumps(body))
        )
        remote = three_shards.dialect.ranking(dict(response)).hits
        assert_same_ranking(remote, embedded.search(query, vectors, options))


@pytest.mark.opensearch
@pytest.mark.parametrize("stored", ["keys", "keyword values only"])
def test_both_scripts_find_tokens_whatever_their_place_among_the_stored_values(
    stored, opensearch_index, tmp_path
) -> None:
    # Tokens anywhere among a document's keys (sorted longs, binary-searched), beyond the basic
    # plane too; and in the keyword values a document written before the keys has (sorted by
    # their bytes: U+FA0E sorts before U+20000 in bytes, after it in UTF-16).
    dims = 8
    texts = [
        "alpha \ufa0e \U00020000 zebra zebra omega",
        "\U00020000 \U00020000 beta gamma delta epsilon zebra",
        "\ufa0e omega omega alpha",
        " ".join(f"w{i}" for i in range(300)) + " zebra",
    ]
    ids = [f"d{i}" for i in range(len(texts))]
    vectors = np.eye(dims, dtype=np.float32)[: len(texts)]
    backend = opensearch_index(dims)
    assert backend.add(ids, texts, vectors) == {}
    if stored == "keys":
        # Keyword values that say ten times the count: only a read of the keys scores right.
        change = (
            "List tenfold = new ArrayList(); "
            "for (String v : ctx._source[params.f]) { tenfold.add(v + '0'); } "
            "ctx._source[params.f] = tenfold;"
        )
        script = {"source": change, "params": {"f": TOKENS_FIELD}}
    else:
        script = {"source": "ctx._source.remove(params.f)", "params": {"f": TOKEN_KEYS_FIELD}}
    backend.refresh()
    changed = backend.client.update_by_query(
        index=backend.index_name, body={"script": script}, params={"refresh": "true"}
    )
    assert changed["updated"] == len(texts)
    embedded = EmbeddedBackend.create(tmp_path / "idx", "m", dims)
    embedded.add(ids, texts, vectors)
    es = ElasticsearchBackend(None, backend.index_name, "m", dims, version="8.19.0")
    es_source = ES_SCORE_SCRIPT.source.replace("field.vectorValue", "field.value")
    only_words = TruthMap("hybrid", lexical=1.0, not_evidence="lexical")
    options = SearchOptions(k=len(texts), mode="exact", ops=Operators(), truth=only_words)
    for word in ("alpha", "zebra", "omega", "\ufa0e", "\U00020000", "w150", "absent"):
        query = itlr.parse(f'"{word}"')
        term = np.ones((1, dims), dtype=np.float32)
        local = {h.id: h.score for h in embedded.search(query, term, options)}
        assert any(local.values()) or word == "absent"
        remote = {h.id: h.score for h in backend.search(query, term, options)}
        counted = backend.term_statistics(query)
        # Documents without keys are counted: only for them does the search mark mentions.
        assert counted.unkeyed == (0 if stored == "keys" else len(texts))
        marked = "constant_score" in json.dumps(
            backend.dialect.search_body(query, term, options, counted)
        )
        assert marked == (stored != "keys")
        body = es.dialect.search_body(query, term, options, counted)
        script = body["query"]["script_score"]["script"]
        script.pop("id")
        script.update(source=es_source, lang="painless")
        found = backend.client.search(index=backend.index_name, body=body)
        by_es = {h.id: h.score for h in backend.dialect.ranking(dict(found)).hits}
        for scores in (remote, by_es):
            assert max(abs(scores.get(i, 0.0) - local[i]) for i in local) < 1e-4, word


def test_a_corpus_matrix_gives_each_row_its_bm25_truth_in_any_row_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import itlr.lexical as lexical

    texts = ["zebra zebra lion", "lion", "", "zebra", "lion tiger zebra", "tiger tiger"]
    corpus = lexical.LexicalCorpus(texts)
    stats = CorpusStats(
        len(texts), sum(len(tokenize(t)) for t in texts), {"zebra": 3, "lion": 3, "tiger": 2}
    )
    terms = ["zebra", "lion tiger", "eagle"]

    def expected(rows: list[int]) -> list[list[float]]:
        return [
            [
                bm25_truth(
                    corpus.counts[r],
                    int(corpus.lengths[r]),
                    term_tokens(t, stats),
                    stats.average_length,
                )
                for t in terms
            ]
            for r in rows
        ]

    # Ascending rows go by the postings (every row, a prefix of them, others); any other order
    # (repeats too) row by row.
    for rows in ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3], [1, 4], [5, 0, 3], [4, 4, 0], [], [2]):
        found = corpus.matrix(np.array(rows, dtype=np.int64), terms, stats)
        assert found.shape == (len(rows), len(terms))
        assert np.allclose(found, np.array(expected(rows)).reshape(len(rows), len(terms)))
    monkeypatch.setattr(lexical, "POSTINGS_KEPT", 2)
    corpus.postings("zebra")  # asked for again: now the newest
    corpus.postings("whale")
    assert list(corpus._postings) == ["zebra", "whale"]


def test_the_embedded_statistics_follow_additions_updates_and_deletes_as_a_rebuild_counts_them(
    tmp_path,
) -> None:
    # Each commit writes the postings of the rows it appends; the statistics and the lexical
    # truths must equal those counted from scratch over the live rows.
    from itlr.engines.embedded import EmbeddedBackend

    dims = 8
    rng = np.random.default_rng(0)

    def vectors(count: int) -> np.ndarray:
        rows = rng.normal(size=(count, dims))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    index = EmbeddedBackend.create(tmp_path / "idx", "test-model", dims)
    index.add(["a", "b", "c"], ["zebra lion", "lion lion tiger", "eagle"], vectors(3))
    terms = ("zebra", "lion tiger", "eagle")
    index.lexical_truths(index._live_rows(), terms)  # built here, caught up below
    index.add(["d"], ["zebra zebra eagle"], vectors(1))
    index.add(["b"], ["tiger"], vectors(1))  # an update: the old row dies
    index.delete(["c"])
    live = index._live_rows()
    counted = index.term_statistics()
    fresh = LexicalCorpus([index.get(i)["text"] for i in ("a", "d", "b")]).full_stats
    counts = (counted.documents, counted.total_length)
    assert counts == (fresh.documents, fresh.total_length) == (3, 6)
    assert dict(counted.df) == dict(fresh.df) == {"zebra": 2, "lion": 1, "tiger": 1, "eagle": 1}
    expected = LexicalCorpus([index.get(i)["text"] for i in ("a", "d", "b")]).matrix(
        [0, 1, 2], terms, fresh
    )
    np.testing.assert_allclose(index.lexical_truths(live, terms), expected, atol=1e-12)
