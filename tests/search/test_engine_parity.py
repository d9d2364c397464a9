"""The parity suite, written once and run on every cluster engine: each must score, gather
candidates, ingest and check its index as the embedded engine does."""

from __future__ import annotations

import pytest

from itlr.engines.cluster import ClusterBackend
from parity import (
    check_exact_scores_match_the_embedded_engine,
    check_hard_filter_drops_what_the_embedded_engine_drops,
    check_index_recording_another_model_warns,
    check_index_with_other_dimensions_is_refused,
    check_knn_mode_matches_exact_when_the_budget_covers_the_corpus,
    check_refused_documents_are_reported_and_ingestion_resumes,
    hard_filter_cases,
    random_cases,
)

ENGINES = [
    pytest.param("opensearch", marks=pytest.mark.opensearch),
    pytest.param("elasticsearch", marks=pytest.mark.elasticsearch),
]
# Each engine keeps the 60 random cases it has always been checked on.
PARITY_CASES = {
    "opensearch": random_cases(60),
    "elasticsearch": random_cases(60, trees_first=False),
}


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine_url(engine: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{engine}_url"))


@pytest.fixture
def scoring_demo(engine: str, request: pytest.FixtureRequest) -> ClusterBackend:
    """The engine's demo index, where its Painless scripts run (the local Elasticsearch has
    none: those cases skip, or fail with ITLR_REQUIRE_ELASTICSEARCH=1)."""
    if engine == "elasticsearch":
        request.getfixturevalue("elasticsearch_painless_url")
    backend: ClusterBackend = request.getfixturevalue(f"{engine}_demo")
    return backend


def test_exact_scores_match_the_embedded_engine_on_60_random_queries(
    engine, scoring_demo, embedded, vocabulary_vectors
) -> None:
    check_exact_scores_match_the_embedded_engine(
        scoring_demo, embedded, vocabulary_vectors, PARITY_CASES[engine]
    )


def test_hard_filter_keeps_what_the_embedded_engine_keeps_under_both_rules(
    engine, scoring_demo, embedded, vocabulary_vectors
) -> None:
    check_hard_filter_drops_what_the_embedded_engine_drops(
        scoring_demo, embedded, vocabulary_vectors, hard_filter_cases(24)
    )


def test_knn_mode_matches_exact_when_the_budget_covers_the_corpus(
    engine, scoring_demo, embedded, vocabulary_vectors, corpus
) -> None:
    check_knn_mode_matches_exact_when_the_budget_covers_the_corpus(
        scoring_demo, embedded, vocabulary_vectors, corpus, PARITY_CASES[engine][:20]
    )


def test_ingestion_reports_refused_documents_and_resumes_without_duplicates(
    engine, engine_url, corpus, embedder
) -> None:
    check_refused_documents_are_reported_and_ingestion_resumes(engine, engine_url, corpus, embedder)


def test_index_with_other_dimensions_is_refused(engine, engine_url, embedder) -> None:
    check_index_with_other_dimensions_is_refused(engine, engine_url, embedder)


def test_index_recording_another_model_warns(engine, engine_url, embedder) -> None:
    check_index_recording_another_model_warns(engine, engine_url, embedder)
