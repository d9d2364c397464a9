"""Candidate plans: which kNN searches gather the documents that knn mode rescores.

A logical query is scored exactly on the union of its candidates, so the plan decides only
which documents get a chance. Each kNN search costs one graph walk on a cluster (and one ANN
probe on the embedded engine), so fewer searches are faster, as long as the best documents are
still among the candidates.

Plans:
    per-term    one search per positive term (the most searches; `auto` keeps it for a query
                that is not anchored).
    per-branch  the query as an OR of conjunctions of positive terms (negated terms gather
                nothing); one search per conjunction, with the normalised sum of its terms'
                vectors. `"a" AND "b" AND NOT "c"` is one search, `("a" OR "b") AND "c"` two.
    combined    one search with the normalised sum of every positive term's vector.
    auto        combined for anchored queries, per-term for the others (see below).

Every plan gathers about as many candidates: the budget is per positive term, and a plan with
fewer searches gives each a larger share (`combined` on three positive terms is one search for
3 x budget neighbours). One graph walk for 3k neighbours costs less than three for k each.

Why a sum of vectors finds conjunctions: for unit vectors, the cosine of a document with the
normalised sum of the terms' vectors is proportional to the sum of its cosines with each term.
Documents high on every term of a conjunction are high on that sum; the default OR (x + y) ranks
by that very sum.

Why `auto` chooses so (docs/benchmarks.md, "Candidate plans"): on real text, one combined search
with the whole budget matched or beat one search per term in candidate recall for every anchored
query shape (single conjunctions, disjunctions, disjunctions of conjunctions). For a query that
is not anchored (a NOT under an OR) the best documents need not be near any positive term, and
a combined vector lies nearer none of them than each term's own does: it keeps per-term.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Literal

import numpy as np

from itlr.query import Query
from itlr.tree import Term, fold_nnf

Plan = Literal["auto", "per-term", "per-branch", "combined"]
PLANS: tuple[Plan, ...] = ("auto", "per-term", "per-branch", "combined")
DEFAULT_PLAN: Plan = "auto"
# Conjunctions of positive terms, or None when the query cannot be written as few of them.
Branches = list[frozenset[str]] | None
# Past this many conjunctions the expansion costs more searches than per-term would.
MAX_BRANCHES = 8


@dataclass(frozen=True)
class CandidateSearch:
    """One kNN search: the unit vector to search with, how many neighbours, and the positive
    terms it stands for, with the weight each has in the vector (the query's term weights)."""

    terms: tuple[str, ...]
    vector: np.ndarray
    budget: int
    weights: tuple[float, ...] = ()

    @property
    def term_weights(self) -> tuple[float, ...]:
        return self.weights or (1.0,) * len(self.terms)


def branches(query: Query) -> list[tuple[str, ...]] | None:
    """The query as an OR of conjunctions of positive terms, or None when some way of scoring
    well needs no positive term (the query is not anchored) or the expansion is too large.

    Negations are pushed inward (itlr.tree.fold_nnf); a negated term contributes
    no requirement, and a term weighted 0 under an AND none either.
    """

    def literal(term: Term, negated: bool) -> Branches:
        return [frozenset() if negated or term.weight == 0 else frozenset([term.text])]

    def junction(conjunction: bool, parts: list[Branches]) -> Branches:
        present = [part for part in parts if part is not None]
        if len(present) < len(parts):
            return None
        if conjunction:
            combos = [frozenset[str]().union(*choice) for choice in product(*present)]
        else:
            combos = [branch for part in present for branch in part]
        return combos if len(combos) <= MAX_BRANCHES else None

    expanded = fold_nnf(query.root, literal, junction)
    if expanded is None or any(not branch for branch in expanded):
        return None
    order = {term: i for i, term in enumerate(query.terms)}
    distinct: dict[tuple[str, ...], None] = {}
    for branch in expanded:
        distinct.setdefault(tuple(sorted(branch, key=order.__getitem__)))
    # A branch that contains another adds nothing: its documents are near the smaller one too.
    kept = [b for b in distinct if not any(set(o) < set(b) for o in distinct)]
    return kept


def plan_candidates(
    query: Query,
    term_vectors: np.ndarray,
    budget: int,
    plan: Plan = DEFAULT_PLAN,
    limit: int | None = None,
) -> tuple[CandidateSearch, ...]:
    """The kNN searches for a query whose terms (query.terms order) are embedded as
    term_vectors, `budget` neighbours per positive term shared among them. Empty when the query
    has no positive term (then every document is scored). See `plan_searches`."""
    vectors = np.asarray(term_vectors, dtype=np.float32)
    return tuple(search.of(vectors) for search in plan_searches(query, budget, plan, limit))


@dataclass(frozen=True, eq=False)
class PlannedSearch:
    """One kNN search of a plan before the query's terms are embedded: which terms, with which
    weights, and how many neighbours. `row`: its coefficient per query term (query.terms
    order), or None for a single term's own vector (`index`)."""

    terms: tuple[str, ...]
    budget: int
    weights: tuple[float, ...]
    index: int
    row: np.ndarray | None

    def of(self, vectors: np.ndarray) -> CandidateSearch:
        """The search with the query's term vectors (float32, query.terms order)."""
        if self.row is None:
            # The term's own vector: a cosine search does not care for its norm, and
            # single-term requests stay byte for byte what they were.
            return CandidateSearch(self.terms, vectors[self.index], self.budget)
        # One product of the row (0 for the query's other terms) with the encoder's unit
        # vectors: the group's rows need no gathering first.
        return CandidateSearch(self.terms, _unit(self.row @ vectors), self.budget, self.weights)


def plan_searches(
    query: Query, budget: int, plan: Plan = DEFAULT_PLAN, limit: int | None = None
) -> tuple[PlannedSearch, ...]:
    """`plan_candidates` before the vectors: the same for every search of a query.

    A plan that does not apply falls back to per-term: per-branch on a query that is not
    anchored, and any plan whose searches would exceed `limit` neighbours (an engine's largest
    k), since fewer, capped searches would gather fewer candidates than per-term."""
    positive = query.positive_terms
    if not positive:
        return ()
    if plan == "auto":
        plan = "combined" if query.anchored else "per-term"
    groups: list[tuple[str, ...]] | None = None
    if plan == "combined":
        groups = [positive]
    elif plan == "per-branch":
        groups = branches(query)
    if groups is None or plan == "per-term":
        groups = [(term,) for term in positive]
    share = budget * len(positive) // len(groups)
    if limit is not None and share > limit:
        groups, share = [(term,) for term in positive], budget
    return tuple(_planned(query, group, share) for group in groups)


def _planned(query: Query, terms: Sequence[str], budget: int) -> PlannedSearch:
    if len(terms) == 1:
        return PlannedSearch(tuple(terms), budget, (), query.terms.index(terms[0]), None)
    # Weighted like the query: `"a"^0.5 AND "b"` is scored mostly by b, so its best documents
    # lie nearer b than the plain sum (the first-order change of a weighted product).
    weights = query.positive_weights
    coefficients = tuple(weights.get(t, 1.0) for t in terms)
    row = np.zeros(len(query.terms), dtype=np.float32)
    for term, coefficient in zip(terms, coefficients, strict=True):
        row[query.terms.index(term)] = coefficient
    same = all(c == 1.0 for c in coefficients)
    return PlannedSearch(tuple(terms), budget, () if same else coefficients, -1, row)


def _unit(vector: np.ndarray) -> np.ndarray:
    """The vector scaled to length 1 (float32 stays float32), in place; zero stays zero."""
    norm = math.sqrt(float(vector @ vector))
    if norm > 0:
        np.divide(vector, norm, out=vector)
    return vector


__all__ = [
    "DEFAULT_PLAN",
    "PLANS",
    "CandidateSearch",
    "Plan",
    "PlannedSearch",
    "branches",
    "plan_candidates",
    "plan_searches",
]
