"""The index's lexical statistics as last counted, so a hybrid search need not wait for them.

A search with hybrid truths needs the statistics of its tokens (documents, their summed length,
each token's document frequency) before its body can be built: one request before the search.
When every token of a query was counted before, the cluster backend builds the search from the
remembered numbers and sends it in one `_msearch` with a new count; it keeps the hits only when
the new count equals the remembered one, and otherwise builds the search again from the new
count. The hits are always those of a search built from the statistics of that moment.

While the index is being written to, every count differs from the last and a guess would cost a
wasted search: guesses are made only after two counts in a row agreed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from itlr.lexical import CorpusStats

# Tokens remembered per index (each an int: a few hundred kB at most).
REMEMBERED_TOKENS = 4096


class StaleStatistics(Exception):
    """The statistics a search was built from are no longer the index's: `fresh` are."""

    def __init__(self, fresh: CorpusStats) -> None:
        super().__init__("the index's statistics changed since they were last counted")
        self.fresh = fresh


class RememberedStats:
    """Statistics counted earlier on one index (thread-safe; bounded, least recent first out)."""

    def __init__(self, capacity: int = REMEMBERED_TOKENS) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._df: OrderedDict[str, int] = OrderedDict()
        self._totals: tuple[int, int] | None = None
        self._steady = False

    def guess(self, tokens: Sequence[str]) -> CorpusStats | None:
        """The remembered statistics of these tokens, or None when some token was never
        counted or the index changed between the last two counts."""
        with self._lock:
            if not self._steady or self._totals is None:
                return None
            if any(token not in self._df for token in tokens):
                return None
            for token in tokens:
                self._df.move_to_end(token)
            documents, length = self._totals
            return CorpusStats(documents, length, {token: self._df[token] for token in tokens})

    def record(self, counted: CorpusStats) -> None:
        """Remember a count; the index is steady when it agrees with what was remembered."""
        with self._lock:
            totals = (counted.documents, counted.total_length)
            agreed = self._totals == totals and all(
                self._df.get(token, df) == df for token, df in counted.df.items()
            )
            self._totals = totals
            self._steady = agreed
            for token, df in counted.df.items():
                self._df[token] = df
                self._df.move_to_end(token)
            while len(self._df) > self.capacity:
                self._df.popitem(last=False)
