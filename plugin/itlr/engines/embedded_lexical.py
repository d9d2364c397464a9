"""The embedded engine's lexical evidence: token counts of its rows and statistics over its live
rows, kept per index object and rebuilt when a commit changed the rows (itlr.lexical)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from itlr.lexical import CorpusStats, LexicalCorpus

if TYPE_CHECKING:
    from itlr.engines.embedded import EmbeddedIndex


class _Cached:
    def __init__(self, key: tuple[object, int], corpus: LexicalCorpus, stats: CorpusStats) -> None:
        self.key = key
        self.corpus = corpus
        self.stats = stats


_CACHE: weakref.WeakKeyDictionary[EmbeddedIndex, _Cached] = weakref.WeakKeyDictionary()


def _corpus(index: EmbeddedIndex) -> _Cached:
    # Rows are only appended within a store generation, so (generation, rows) names the content.
    key = (index.store.generation, index.committed_rows)
    cached = _CACHE.get(index)
    if cached is None or cached.key != key:
        # Dead rows keep an empty text: they count in no statistic.
        texts = [row.text if row is not None else "" for row in index._rows]
        corpus = LexicalCorpus(texts)
        cached = _Cached(key, corpus, corpus.stats(index._live_rows()))
        _CACHE[index] = cached
    return cached


def lexical_matrix(index: EmbeddedIndex, rows: np.ndarray, terms: tuple[str, ...]) -> np.ndarray:
    """(rows x terms) lexical truths, statistics over every live row of the index."""
    cached = _corpus(index)
    return cached.corpus.matrix(rows, terms, cached.stats)


class LexicalStream:
    """Per term, the rows that mention it in order of lexical truth, best first: the lexical side
    of knn mode's candidates for hybrid truths (itlr.certificate). A round of budget n takes
    each term's first n rows; every row it leaves has a lexical truth at most the n-th's."""

    def __init__(self, index: EmbeddedIndex, rows: np.ndarray, terms: tuple[str, ...]) -> None:
        self.rows = rows
        self.terms = terms
        self.truths = lexical_matrix(index, rows, terms)
        self.order = []
        for column in self.truths.T:
            mentioned = np.flatnonzero(column > 0)
            self.order.append(mentioned[np.argsort(-column[mentioned], kind="stable")])

    def top(self, budget: int) -> tuple[np.ndarray, dict[str, float]]:
        """The rows of each term's first `budget`, and per term the most an untaken row's
        lexical truth can be (0 once every row that mentions the term is taken)."""
        taken = [self.rows[order[:budget]] for order in self.order]
        limits = {
            term: float(self.truths[order[budget - 1], j]) if len(order) > budget else 0.0
            for j, (term, order) in enumerate(zip(self.terms, self.order, strict=True))
        }
        return np.concatenate([np.zeros(0, dtype=np.int64), *taken]), limits


def lexical_stats(index: EmbeddedIndex) -> CorpusStats:
    return _corpus(index).stats
