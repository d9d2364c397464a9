"""The one scoring pipeline outside the engines' scripts: cosine -> truth -> program -> clamp,
plus the hard filter. The embedded engine and the evaluation methods both call `compose`; the
Painless scripts run the same steps inside a cluster (the parity tests hold them together)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from itlr.explain import explain_score
from itlr.hard_filter import HardFilter
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
    hard_filter: HardFilter | float | None = None,
    lexical_truths: np.ndarray | None = None,
) -> Composed:
    """Score documents from their (documents x query.terms) cosines, and for hybrid truths
    their lexical truths (itlr.lexical, same shape). `hard_filter`: the filter on root-level
    NOT terms (itlr.hard_filter; a bare threshold takes the default rule)."""
    terms = query.terms
    weights = truth.lexical_weights(terms, query.negated_terms)
    truths = truth.apply(cosines, terms, lexical_truths, weights)
    kept = np.ones(len(truths), dtype=bool)
    if hard_filter is not None and query.excluded_terms:
        # Only NOT terms at the root's AND, judged as the engines' exclusion script judges
        # them (the cosine evidence, clamped, for hybrid truths); `exclude_lexical` is the
        # lexical filter.
        hard = hard_filter if isinstance(hard_filter, HardFilter) else HardFilter(hard_filter)
        kept = hard.kept(query, HardFilter.evidence(cosines, truths, truth))
    scores = np.maximum(query.program.compose_matrix(truths, ops), 0.0)
    return Composed(truths, scores, kept)


def explain(
    query: Query,
    cosines: np.ndarray,
    ops: Operators,
    truth: TruthMap,
    lexical_truths: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Each row's score as an explanation tree (itlr.explain) from its per-term cosines (and
    lexical truths, for hybrid truth values): the embedded engine's candidates and a cluster
    hit's returned vector go through this alike."""
    explained = explainer(query, np.atleast_2d(cosines), ops, truth, lexical_truths)
    return [explained(row) for row in range(len(np.atleast_2d(cosines)))]


def explainer(
    query: Query,
    cosines: np.ndarray,
    ops: Operators,
    truth: TruthMap,
    lexical_truths: np.ndarray | None = None,
) -> Callable[[int], dict[str, Any]]:
    """Row i's explanation on demand: an engine explains its top k, not every candidate."""
    if lexical_truths is None:
        return lambda row: explain_score(query, {"cosine": cosines[row]}, ops, truth)
    return lambda row: explain_score(
        query, {"cosine": cosines[row], "lexical": lexical_truths[row]}, ops, truth
    )
