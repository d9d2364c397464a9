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


def mentioning_rows(index: EmbeddedIndex, terms: tuple[str, ...]) -> np.ndarray:
    """Rows (live or not) whose text holds a token of any of these terms."""
    return _corpus(index).corpus.mentioning(terms)


def lexical_stats(index: EmbeddedIndex) -> CorpusStats:
    return _corpus(index).stats
