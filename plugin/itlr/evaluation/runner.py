"""Run every method over every query and turn the scores into ir-measures runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from itlr.evaluation.methods import Case, Method

Runs = dict[str, dict[str, dict[str, float]]]


@dataclass(frozen=True)
class VectorCorpus:
    """Document ids and their unit vectors, one row each."""

    ids: tuple[str, ...]
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if len(self.ids) != self.vectors.shape[0]:
            raise ValueError("one vector per document id")

    @property
    def id_order(self) -> np.ndarray:
        """Each document's position in id order: the tie-break, as in the embedded engine."""
        order = np.empty(len(self.ids), dtype=np.int64)
        order[np.argsort(np.array(self.ids, dtype=object), kind="stable")] = np.arange(
            len(self.ids)
        )
        return order


def top_ranked(scores: np.ndarray, id_order: np.ndarray, depth: int) -> np.ndarray:
    """Indices of the best `depth` retrieved documents: highest score first, ties in id order."""
    chosen = np.flatnonzero(np.isfinite(scores))
    if chosen.size > depth:
        kth = np.partition(scores[chosen], chosen.size - depth)[chosen.size - depth]
        chosen = chosen[scores[chosen] >= kth]
    order = np.lexsort((id_order[chosen], -scores[chosen]))
    return chosen[order][:depth]


def run_methods(
    cases: Sequence[Case],
    methods: Sequence[Method],
    corpus: VectorCorpus,
    text_vectors: Mapping[str, np.ndarray],
    depth: int = 1000,
    on_case: Callable[[], None] | None = None,
) -> Runs:
    """{method: {query id: {doc id: score}}}.

    Run scores are depth - rank, not the method's own scores: the order is settled here (ties by
    document id), so pytrec_eval's own tie-breaking can never reorder a ranking.
    """
    runs: Runs = {m.name: {} for m in methods}
    full_order = corpus.id_order
    ids = np.array(corpus.ids, dtype=object)
    for case in cases:
        if case.rows is None:
            vectors, doc_ids, id_order = corpus.vectors, ids, full_order
        else:
            rows = np.asarray(case.rows, dtype=np.int64)
            vectors, doc_ids = corpus.vectors[rows], ids[rows]
            id_order = VectorCorpus(tuple(doc_ids), vectors).id_order
        terms = np.stack([text_vectors[t] for t in case.query.terms])
        term_cosines = vectors @ terms.T
        text_cosines = vectors @ text_vectors[case.text]
        for method in methods:
            scores = method.score(case, term_cosines, text_cosines)
            best = top_ranked(np.asarray(scores, dtype=np.float64), id_order, depth)
            runs[method.name][case.id] = {
                str(doc_ids[i]): float(depth - rank) for rank, i in enumerate(best)
            }
        if on_case:
            on_case()
    return runs
