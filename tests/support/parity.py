"""What the OpenSearch and Elasticsearch test suites share: the demo vocabulary, random logical
queries with random operators and truth maps, hostile terms, and the parity assertion."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import numpy as np
import pytest

import itlr
from itlr import Operators, TruthMap
from itlr.benchmarks.text_corpus import DEMO_PHRASES, random_queries, random_tree
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec, open_backend, remote_backend
from itlr.engines.opensearch import OpenSearchBackend
from itlr.errors import IndexStateError
from itlr.ingest import ingest
from itlr.options import SearchOptions
from itlr.query import Query

VOCABULARY = DEMO_PHRASES

# Terms that would break out of a script or a JSON string if they were ever spliced into one.
HOSTILE_TERMS = [
    '"; return 1e9; //',
    '\\"}}]} params.vectors.clear(); \\u0000',
    "doc['embedding'] + ' OR \" AND )(",
    "{{mustache}} ${injection} </script>",
]


def random_options(rng: random.Random) -> SearchOptions:
    """Exact search with random operators and a random truth map."""
    ops = Operators(
        rng.choice(["product", "sum", "min", "lukasiewicz"]),
        rng.choice(["sum", "max", "probsum"]),
        rng.choice(["complement", "reciprocal"]),
        not_strength=rng.choice([1.0, 0.5, 0.25]),
    )
    truth = rng.choice(
        [TruthMap("clamp"), TruthMap("shift"), TruthMap("sigmoid", tau=0.3, lam=8.0)]
    )
    return SearchOptions(k=10, mode="exact", ops=ops, truth=truth)


def random_cases(
    count: int, seed: int = 7, *, trees_first: bool = True
) -> list[tuple[Query, SearchOptions]]:
    """Random trees (NOT, weights, nesting) with random operators and truth maps.

    `trees_first` draws every tree before any options; otherwise each case draws its tree and
    then its options. The two orders give different (but each reproducible) cases.
    """
    rng = random.Random(seed)
    if trees_first:
        trees = random_queries(VOCABULARY, count, rng)
        return [(itlr.parse(str(tree)), random_options(rng)) for tree in trees]
    cases = []
    for _ in range(count):
        query = itlr.parse(str(Query(random_tree(rng, VOCABULARY))))
        cases.append((query, random_options(rng)))
    return cases


def hard_filter_cases(count: int, seed: int = 5) -> list[tuple[Query, SearchOptions]]:
    """Random trees ANDed with one or two root-level NOT terms, each with a random truth map
    (hybrid, the default, included), hard-filter threshold and rule, in exact mode."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        excluded = rng.sample(VOCABULARY, rng.choice([1, 2]))
        tree = Query(random_tree(rng, VOCABULARY))
        text = f"({tree})" + "".join(f' AND NOT "{term}"' for term in excluded)
        truth = rng.choice(
            [TruthMap(), TruthMap("clamp"), TruthMap("shift"), TruthMap("sigmoid", 0.3, 8.0)]
        )
        theta = rng.choice([0.2, 0.3, 0.45]) if truth.kind != "shift" else 0.65
        options = SearchOptions(
            k=40,
            mode="exact",
            truth=truth,
            hard_filter=theta,
            hard_filter_rule=rng.choice(["relative", "absolute"]),
        )
        cases.append((itlr.parse(text), options))
    return cases


def term_vectors(query: Query, vocabulary_vectors) -> np.ndarray:
    return np.stack([vocabulary_vectors[t] for t in query.terms])


def assert_same_ranking(remote, local, rel: float = 1e-4) -> None:
    """Same scores rank by rank; ids may differ only where two scores tie."""
    assert len(remote) == len(local)
    for mine, theirs in zip(remote, local, strict=True):
        assert mine.score == pytest.approx(theirs.score, rel=rel, abs=1e-6)


# -- contracts every cluster backend keeps, run by each engine's suite ------------------------


def check_refused_documents_are_reported_and_ingestion_resumes(
    engine: str, url: str, corpus, embedder
) -> None:
    documents = corpus[:40]
    broken = list(documents)
    # A real mapping conflict: metadata.topic is a keyword, this one is an object.
    broken[17] = type(broken[17])(broken[17].id, broken[17].text, {"topic": {"nested": "x"}})
    spec = EngineSpec(engine, f"itlr-ingest-{uuid.uuid4().hex[:8]}", Connection(url))
    backend = open_backend(spec, embedder, create=True)
    first = ingest(broken, backend, embedder, batch_size=16)
    assert first.failed.keys() == {documents[17].id}
    assert "metadata.topic" in first.failed[documents[17].id]
    assert backend.count() == 39
    second = ingest(documents, backend, embedder, batch_size=16)
    assert (second.added, second.skipped, second.failed) == (1, 39, {})
    assert backend.count() == 40


def check_index_with_other_dimensions_is_refused(engine: str, url: str, embedder) -> None:
    name = f"itlr-dims-{uuid.uuid4().hex[:8]}"
    remote_backend(EngineSpec(engine, name, Connection(url)), "tiny-model", 8).ensure_index()
    with pytest.raises(IndexStateError, match="8-dim vectors"):
        open_backend(EngineSpec(engine, name, Connection(url)), embedder)


def check_index_recording_another_model_warns(engine: str, url: str, embedder) -> None:
    name = f"itlr-model-{uuid.uuid4().hex[:8]}"
    spec = EngineSpec(engine, name, Connection(url))
    remote_backend(spec, "someone-elses-model", embedder.dims).ensure_index()
    with pytest.warns(UserWarning, match="someone-elses-model"):
        open_backend(spec, embedder)


def check_exact_scores_match_the_embedded_engine(
    backend, embedded, vocabulary_vectors, cases: list[tuple[Query, SearchOptions]]
) -> None:
    identical_top10 = 0
    for query, options in cases:
        vectors = term_vectors(query, vocabulary_vectors)
        remote = backend.search(query, vectors, options)
        local = embedded.search(query, vectors, options)
        assert_same_ranking(remote, local)
        identical_top10 += [h.id for h in remote] == [h.id for h in local]
    assert identical_top10 >= len(cases) - 5


def check_hard_filter_drops_what_the_embedded_engine_drops(
    backend, embedded, vocabulary_vectors, cases: list[tuple[Query, SearchOptions]]
) -> None:
    """Both rules keep the same documents with the same scores (1e-4) as the embedded engine,
    and the cases do drop documents (the relative rule fewer than the absolute one)."""
    dropped = {"relative": 0, "absolute": 0}
    for query, options in cases:
        vectors = term_vectors(query, vocabulary_vectors)
        remote = backend.search(query, vectors, options)
        local = embedded.search(query, vectors, options)
        assert_same_ranking(remote, local)
        assert {h.id for h in remote} == {h.id for h in local}, (str(query), options)
        unfiltered = embedded.search(query, vectors, replace(options, hard_filter=None))
        dropped[options.hard_filter_rule] += len({h.id for h in unfiltered} - {h.id for h in local})
    assert dropped["relative"] > 0 and dropped["absolute"] > 0, dropped


def check_knn_mode_matches_exact_when_the_budget_covers_the_corpus(
    backend, embedded, vocabulary_vectors, corpus, cases: list[tuple[Query, SearchOptions]]
) -> None:
    for query, options in cases:
        if not query.has_positive_term:
            continue
        vectors = term_vectors(query, vocabulary_vectors)
        knn = SearchOptions(**{**options.__dict__, "mode": "knn", "candidates": len(corpus)})
        assert_same_ranking(
            backend.search(query, vectors, knn), embedded.search(query, vectors, options)
        )


def sharded_backend(url: str, corpus, corpus_vectors, embedder, shards: int) -> OpenSearchBackend:
    """A throw-away OpenSearch index of the demo corpus with this many primary shards."""
    backend = OpenSearchBackend(
        Connection(url).opensearch(),
        f"itlr-hybrid-{shards}-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=url,
    )
    mapping = backend.dialect.mapping(embedder.dims, embedder.name)
    mapping["settings"]["index"]["number_of_shards"] = shards
    backend.client.indices.create(index=backend.index_name, body=mapping)
    failures = backend.add(
        [d.id for d in corpus], [d.text for d in corpus], corpus_vectors, [d.fields for d in corpus]
    )
    assert failures == {}
    backend.refresh()
    return backend


def candidate_bool(body: dict) -> dict:
    """The bool of a logical search body that gathers its candidates (filter, must_not, the kNN
    clauses): with hybrid truths it sits under a bool whose `should` marks the documents that
    mention a query token (dialect.MENTION_SCORE)."""
    scored = body["query"]["script_score"]["query"]["bool"]
    must = scored.get("must", [])
    if len(must) == 1 and "bool" in must[0] and "constant_score" in str(scored.get("should")):
        return must[0]["bool"]
    return scored
