"""The one scoring pipeline outside the engines' scripts: cosine -> truth -> program -> clamp,
plus the hard filter. The embedded engine and the evaluation methods both call `compose`; the
Painless scripts run the same steps inside a cluster (the parity tests hold them together)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from itlr.explain import explain_score
from itlr.query import Query
from itlr.scoring import Operators, TruthMap


@dataclass(frozen=True)
class Composed:
    """Per document: each term's truth (documents x terms), the score (clamped at 0: engines
    refuse negative scores) and whether the hard filter keeps it."""

    truths: np.ndarray
    scores: np.ndarray
    kept: np.ndarray


def compose(
    query: Query,
    cosines: np.ndarray,
    ops: Operators,
    truth: TruthMap,
    hard_filter: float | None = None,
) -> Composed:
    """Score documents from their (documents x query.terms) cosines."""
    terms = query.terms
    truths = truth.apply(cosines, terms)
    kept = np.ones(len(truths), dtype=bool)
    if hard_filter is not None:
        # Only NOT terms at the root's AND: a document matching one can never score well.
        for term in query.excluded_terms:
            kept &= truths[:, terms.index(term)] < hard_filter
    scores = np.maximum(query.program.compose_matrix(truths, ops), 0.0)
    return Composed(truths, scores, kept)


def explain(
    query: Query, cosines: np.ndarray, ops: Operators, truth: TruthMap
) -> list[dict[str, Any]]:
    """Each row's score as an explanation tree (itlr.explain) from its per-term cosines: the
    embedded engine's candidates and a cluster hit's returned vector go through this alike."""
    return [explain_score(query, {"cosine": row}, ops, truth) for row in np.atleast_2d(cosines)]


def explainer(
    query: Query, cosines: np.ndarray, ops: Operators, truth: TruthMap
) -> Callable[[int], dict[str, Any]]:
    """Row i's explanation on demand: an engine explains its top k, not every candidate."""
    return lambda row: explain_score(query, {"cosine": cosines[row]}, ops, truth)
