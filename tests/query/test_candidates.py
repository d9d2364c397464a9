"""Candidate plans: which kNN searches gather the documents knn mode rescores."""

from __future__ import annotations

import numpy as np
import pytest

import itlr
from itlr.candidates import PLANS, branches, plan_candidates
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions


def unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a", [("a",)]),
        ("a AND b AND NOT c", [("a", "b")]),
        ("(a OR b) AND NOT c", [("a",), ("b",)]),
        ("(a OR b) AND c", [("a", "c"), ("b", "c")]),
        ("a OR (a AND b)", [("a",)]),  # the conjunction adds nothing a's own search misses
        ("NOT (NOT a OR NOT b)", [("a", "b")]),  # De Morgan
        ("a AND b^0", [("a",)]),  # a term weighted 0 under an AND requires nothing
    ],
)
def test_branches_are_the_query_as_an_or_of_conjunctions_of_positive_terms(
    text: str, expected: list[tuple[str, ...]]
) -> None:
    assert branches(itlr.parse(text)) == expected


@pytest.mark.parametrize("text", ["a OR NOT b", "NOT a", "NOT (a AND b)"])
def test_a_query_that_is_not_anchored_has_no_branches(text: str) -> None:
    assert branches(itlr.parse(text)) is None


def test_too_many_branches_give_none() -> None:
    query = itlr.parse("(a OR b OR c) AND (d OR e OR f) AND (g OR h)")  # 18 conjunctions
    assert branches(query) is None


def test_every_plan_shares_the_per_term_budget_among_its_searches() -> None:
    query = itlr.parse('("a" OR "b") AND "c" AND NOT "d"')
    vectors = unit(4, seed=1)
    for plan in PLANS:
        searches = plan_candidates(query, vectors, 100, plan)
        assert sum(s.budget for s in searches) == 300, plan
    assert len(plan_candidates(query, vectors, 100, "per-term")) == 3
    assert len(plan_candidates(query, vectors, 100, "per-branch")) == 2
    assert len(plan_candidates(query, vectors, 100, "combined")) == 1


def test_a_combined_search_uses_the_normalised_sum_of_the_positive_terms() -> None:
    query = itlr.parse('"a" AND "b" AND NOT "c"')
    vectors = unit(3, seed=2)
    (search,) = plan_candidates(query, vectors, 50, "combined")
    expected = (vectors[0] + vectors[1]) / np.linalg.norm(vectors[0] + vectors[1])
    np.testing.assert_allclose(search.vector, expected, rtol=1e-6)
    assert search.terms == ("a", "b") and search.budget == 100


def test_a_weighted_combined_vector_is_the_float32_weighted_sum_scaled_to_length_one() -> None:
    # Bit for bit: the kNN clause sends these numbers, and the embedded engine searches with
    # the same plan, so a change in how they are computed must not change them.
    query = itlr.parse('("a"^0.5 OR "b") AND NOT "c" AND "d"^2')
    vectors = unit(4, seed=7)
    (search,) = plan_candidates(query, vectors, 100, "combined")
    summed = np.asarray([0.5, 1.0, 2.0], dtype=np.float32) @ vectors[[0, 1, 3]]
    expected = summed / np.float32(np.sqrt(float(summed @ summed)))
    assert search.vector.dtype == np.float32
    assert np.array_equal(search.vector, expected)
    assert search.terms == ("a", "b", "d") and search.weights == (0.5, 1.0, 2.0)


def test_a_single_term_search_sends_the_term_vector_unchanged() -> None:
    query = itlr.parse('"a" AND NOT "b"')
    vectors = unit(2, seed=3) * 3.0  # not unit: the request must still carry it as given
    (search,) = plan_candidates(query, vectors, 10)
    assert np.array_equal(search.vector, vectors[0])


def test_auto_combines_anchored_queries_and_keeps_per_term_for_the_others() -> None:
    vectors = unit(2, seed=4)
    assert len(plan_candidates(itlr.parse("a OR b"), vectors, 10, "auto")) == 1
    assert len(plan_candidates(itlr.parse("a OR NOT b"), vectors, 10, "auto")) == 1
    assert plan_candidates(itlr.parse("a OR NOT b"), vectors, 10, "auto")[0].terms == ("a",)
    unanchored = itlr.parse("a OR b OR NOT a")
    assert len(plan_candidates(unanchored, vectors, 10, "auto")) == 2


def test_a_plan_whose_searches_exceed_the_engine_limit_falls_back_to_per_term() -> None:
    query = itlr.parse("a AND b AND c")
    searches = plan_candidates(query, unit(3, seed=5), 5000, "combined", limit=10_000)
    assert [s.budget for s in searches] == [5000, 5000, 5000]


def test_a_query_without_positive_terms_plans_no_search() -> None:
    assert plan_candidates(itlr.parse("NOT a"), unit(1, seed=6), 10) == ()


def test_an_unknown_plan_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match="per-branch"):
        SearchOptions(plan="fastest")  # type: ignore[arg-type]


def test_every_plan_finds_the_exact_top_hits_on_real_text(embedded, embedder) -> None:
    """On the demo corpus with the real model, the default budget loses nothing in any plan."""
    for text in [
        '"vitamin D" AND "immune system" AND NOT "bone health"',
        '("electric car" OR "charging stations") AND NOT "purchase price"',
        '("coffee" AND "sleep") OR ("Paris" AND "museums")',
    ]:
        query = itlr.parse(text)
        vectors = embedder.encode(list(query.terms))
        exact = embedded.search(query, vectors, SearchOptions(k=10, mode="exact"))
        for plan in PLANS:
            found = embedded.search(query, vectors, SearchOptions(k=10, mode="knn", plan=plan))
            assert [(h.id, h.score) for h in found] == [(h.id, h.score) for h in exact], (
                text,
                plan,
            )
