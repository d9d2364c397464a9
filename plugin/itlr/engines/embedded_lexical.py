"""The embedded engine's lexical evidence: token counts of its rows and statistics over its live
rows, kept by each index object (`LexicalState`), caught up with the rows each commit appends
and rebuilt after a compaction (itlr.lexical). It is handed the rows, never the index."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from itlr.engines.store import StoredRow
from itlr.lexical import CorpusStats, LexicalCorpus

Rows = Sequence[StoredRow | None]


class _Cached:
    """The lexical corpus of an index's rows, the statistics over its live rows, and what they
    were computed from: the store generation, the row count and which rows were live."""

    def __init__(self, rows: Rows, live: np.ndarray, generation: int) -> None:
        self.generation = generation
        self.corpus = LexicalCorpus(_texts(rows, 0))
        self.live = live.copy()
        self.df: Counter[str] = Counter()
        self.total = 0
        self._count(self.live, +1)
        self.stats = self._snapshot()

    def _count(self, rows: np.ndarray, sign: int) -> None:
        """Count (sign +1) or uncount (-1) the rows of this mask in the statistics."""
        for row in np.flatnonzero(rows):
            tokens = self.corpus.counts[row].keys()
            if sign > 0:
                self.df.update(tokens)
            else:
                self.df.subtract(tokens)
            self.total += sign * int(self.corpus.lengths[row])

    def _snapshot(self) -> CorpusStats:
        # A copy (without zero counts): a search holding these statistics never sees them move.
        return CorpusStats(int(self.live.sum()), self.total, +self.df)

    def catch_up(self, rows: Rows, live: np.ndarray) -> None:
        """Rows appended since (ingestion, updates, deletes): tokenise those only, and move the
        statistics by the rows that died and the live rows that came. Counted here, row by
        row, rather than by LexicalCorpus.stats, which would count every live row again."""
        before = len(self.corpus)
        self.corpus.extend(_texts(rows, before))
        died = self.live & ~live[:before]
        came = np.concatenate([np.zeros(before, dtype=bool), live[before:]])
        self._count(died, -1)
        self._count(came, +1)
        self.live = live.copy()
        self.stats = self._snapshot()


def _texts(rows: Rows, start: int) -> list[str]:
    # Dead rows keep an empty text: they count in no statistic.
    return [row.text if row is not None else "" for row in rows[start:]]


class LexicalState:
    """One index object's lexical corpus and statistics: built on first use, caught up with
    rows committed since (only those are tokenised), rebuilt after a compaction renumbered
    them (a new store generation)."""

    def __init__(self) -> None:
        self._cached: _Cached | None = None

    def current(
        self, rows: Rows, live: np.ndarray, generation: int
    ) -> tuple[LexicalCorpus, CorpusStats]:
        cached = self._cached
        if cached is None or cached.generation != generation:
            cached = self._cached = _Cached(rows, live, generation)
        elif len(cached.corpus) != len(rows):
            cached.catch_up(rows, live)
        return cached.corpus, cached.stats

    def matrix(
        self,
        rows: Rows,
        live: np.ndarray,
        generation: int,
        chosen: np.ndarray,
        terms: tuple[str, ...],
    ) -> np.ndarray:
        """(chosen rows x terms) lexical truths, statistics over every live row."""
        corpus, stats = self.current(rows, live, generation)
        return corpus.matrix(chosen, terms, stats)


class LexicalStream:
    """Per streamed term, the rows that mention it in order of lexical truth, best first: the
    lexical side of knn mode's candidates for hybrid truths (itlr.certificate). A round of
    budget n takes each streamed term's first n rows; every row it leaves has a lexical truth
    at most the n-th's. `truths` holds every one of `terms` (streamed or not) for every row, so
    that a pass over every row need not compute them again."""

    def __init__(
        self,
        truths: np.ndarray,
        rows: np.ndarray,
        terms: tuple[str, ...],
        streamed: tuple[str, ...] | None = None,
    ) -> None:
        self.rows = rows
        self.streamed = terms if streamed is None else streamed
        self.truths = truths  # (rows x terms) lexical truths
        self._columns = [terms.index(term) for term in self.streamed]
        self.order: list[np.ndarray] = []
        for j in self._columns:
            column = self.truths[:, j]
            mentioned = np.flatnonzero(column > 0)
            self.order.append(mentioned[np.argsort(-column[mentioned], kind="stable")])

    def top(self, budget: int) -> tuple[np.ndarray, dict[str, float]]:
        """The rows of each streamed term's first `budget`, and their `limits`."""
        taken = [self.rows[order[:budget]] for order in self.order]
        return np.concatenate([np.zeros(0, dtype=np.int64), *taken]), self.limits(budget)

    def limits(self, budget: int) -> dict[str, float]:
        """Per streamed term, the most the lexical truth of a row outside its first `budget`
        can be (0 once every row that mentions it is taken)."""
        return {
            term: float(self.truths[order[budget - 1], j]) if len(order) > budget else 0.0
            for term, order, j in zip(self.streamed, self.order, self._columns, strict=True)
        }
