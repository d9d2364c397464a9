"""The one scoring pipeline outside the engines' scripts: cosine -> truth -> program -> clamp,
plus the hard filter. The embedded engine and the evaluation methods both call `compose`; the
Painless scripts run the same steps inside a cluster (the parity tests hold them together)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
