"""The index's lexical statistics as last counted, so a hybrid search need not wait for them.

A search with hybrid truths needs the statistics of its tokens (documents, their summed length,
each token's document frequency) before its body can be built: one request before the search.
When every token of a query was counted before, the cluster backend builds the search from the
remembered numbers:

- counted at most `max_age` seconds ago (ITLR_STATS_MAX_AGE, default 1 s: a cluster's default
  refresh interval, the time a write already takes to show in searches) and not since a write
  through this backend: the search goes alone;
- counted earlier: it goes in one `_msearch` with a new count, and its hits are kept only when
  the new count equals the remembered one; otherwise the search is built again from the new
  count.

So a search's statistics are never older than `max_age` (0: always counted with the search),
and writes through the same backend show at once. A count's age runs from when it was asked, not
answered: one asked before a write finished is not trusted after it.

While the index is being written to, every count differs from the last and a guess would cost a
wasted search: guesses are made only after two counts in a row agreed.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from time import monotonic

from itlr.lexical import CorpusStats
from itlr.settings import env_number

# Tokens remembered per index (each an int: a few hundred kB at most).
REMEMBERED_TOKENS = 4096
# Seconds a count is trusted without a new one sent along (see the module's docstring).
STATS_MAX_AGE = 1.0


def stats_max_age() -> float:
    """ITLR_STATS_MAX_AGE, or STATS_MAX_AGE."""
    return env_number(
        "ITLR_STATS_MAX_AGE",
        STATS_MAX_AGE,
        least=0.0,
        meaning="the seconds a statistics count is trusted",
    )


class StaleStatistics(Exception):
    """The statistics a search was built from are no longer the index's: `fresh` are."""

    def __init__(self, fresh: CorpusStats) -> None:
        super().__init__("the index's statistics changed since they were last counted")
        self.fresh = fresh


class RememberedStats:
    """Statistics counted earlier on one index (thread-safe; bounded, least recent first out)."""

    def __init__(self, capacity: int = REMEMBERED_TOKENS, max_age: float | None = None) -> None:
        self.capacity = capacity
        self.max_age = stats_max_age() if max_age is None else max_age
        self._lock = threading.Lock()
        # token -> (document frequency, when it was counted)
        self._df: OrderedDict[str, tuple[int, float]] = OrderedDict()
        # (documents, summed length, documents without token keys)
        self._totals: tuple[int, int, int] | None = None
        self._totals_at = -math.inf
        self._steady = False
        self._written_at = -math.inf

    def lookup(self, tokens: Sequence[str]) -> tuple[CorpusStats | None, bool]:
        """The remembered statistics of these tokens, or None when some token was never
        counted or the index changed between the last two counts; and whether they are
        recent: every one of these tokens counted at most `max_age` seconds ago, with nothing
        written through this backend since (a search then needs no new count)."""
        now = monotonic()
        with self._lock:
            if not self._steady or self._totals is None:
                return None, False
            oldest = self._totals_at
            df = {}
            for token in tokens:
                counted = self._df.get(token)
                if counted is None:
                    return None, False
                df[token] = counted[0]
                oldest = min(oldest, counted[1])
                self._df.move_to_end(token)
            documents, length, unkeyed = self._totals
            recent = oldest > self._written_at and now - oldest <= self.max_age
            return CorpusStats(documents, length, df, unkeyed), recent

    def written(self) -> None:
        """This backend wrote to the index: the next search counts again."""
        with self._lock:
            self._written_at = monotonic()

    def record(self, counted: CorpusStats, asked_at: float | None = None) -> None:
        """Remember a count asked at `asked_at` (time.monotonic(); None: now); the index is
        steady when it agrees with what was remembered."""
        now = monotonic() if asked_at is None else asked_at
        with self._lock:
            totals = (counted.documents, counted.total_length, counted.unkeyed)
            agreed = self._totals == totals and all(
                self._df.get(token, (df, now))[0] == df for token, df in counted.df.items()
            )
            self._totals, self._totals_at = totals, now
            self._steady = agreed
            for token, df in counted.df.items():
                self._df[token] = (df, now)
                self._df.move_to_end(token)
            while len(self._df) > self.capacity:
                self._df.popitem(last=False)


__all__ = ["STATS_MAX_AGE", "RememberedStats", "StaleStatistics", "stats_max_age"]
