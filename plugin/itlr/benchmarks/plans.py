"""Candidate recall of each candidate plan, per query shape (itlr.candidates)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from itlr.benchmarks.latency import CandidateRecall, candidate_recall
from itlr.candidates import Plan, branches
from itlr.query import Query

if TYPE_CHECKING:
    from itlr.engines import Backend

SHAPES = (
    "one positive term",
    "one conjunction",
    "disjunction of terms",
    "disjunction with conjunctions",
    "more than 8 conjunctions",
    "not anchored",
)


def query_shape(query: Query) -> str:
    """Which of SHAPES a query has, read from its positive terms' OR-of-AND form."""
    if not query.anchored:
        return "not anchored"
    found = branches(query)
    if found is None:
        return "more than 8 conjunctions"
    if len(found) == 1:
        return "one positive term" if len(found[0]) == 1 else "one conjunction"
    if all(len(branch) == 1 for branch in found):
        return "disjunction of terms"
    return "disjunction with conjunctions"


def recall_by_plan_and_shape(
    index: Backend,
    term_vectors_for: Callable[[Query], np.ndarray],
    queries: Sequence[Query],
    budgets: list[int],
    plans: Sequence[Plan],
    k: int = 10,
) -> dict[tuple[str, str], tuple[int, dict[int, CandidateRecall]]]:
    """{(shape, plan): (number of queries, {budget: recall})} for every shape present."""
    by_shape: dict[str, list[Query]] = {}
    for query in queries:
        by_shape.setdefault(query_shape(query), []).append(query)
    table: dict[tuple[str, str], tuple[int, dict[int, CandidateRecall]]] = {}
    for shape in SHAPES:
        group = by_shape.get(shape)
        if not group:
            continue
        for plan in plans:
            recall = candidate_recall(index, term_vectors_for, group, budgets, k, plan=plan)
            table[(shape, plan)] = (len(group), recall)
    return table
