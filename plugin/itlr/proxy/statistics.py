"""The token statistics the proxy remembers between requests, for hybrid truths.

A logical search with hybrid truths needs its target's token statistics. The proxy keeps the
last counts per target and caller (`itlr.engines.remembered_stats.RememberedStats`, the cluster
backend's): a search whose tokens were all counted at most ITLR_STATS_MAX_AGE seconds before
(default 1 s, a cluster's default refresh interval), after the last write the proxy relayed
answered, and whose index was steady (the last two counts agreed) is built from the remembered
numbers and goes alone; any other counts first, as without memory (searches that ask while the
same count is on its way share it). So the statistics a search is scored with are at most
ITLR_STATS_MAX_AGE seconds old, and a write through the proxy shows in the next search through
it at once (once the cluster made it searchable: a refresh).

Why count first rather than send the count along and search again when it differs (as the
cluster backend does): the search the proxy forwards is the UI's own request (an async search
the cluster keeps, a streamed answer, an `_msearch` of many panels); sending it twice would
double that work and its side effects, so only statistics known to be recent are used.

Counts are kept per caller: a digest of the headers that carry the caller's identity (the ones
the count itself is sent with), so one user's counts, which document-level security may make
differ, never score another's search. Memory is bounded: `REMEMBERED_TARGETS` (target, caller)
pairs of `REMEMBERED_TOKENS` tokens each, least recently used out first, none kept longer than
`REMEMBERED_SECONDS`.

A count on its way is shared for at most the proxy's upstream deadline (the count itself has
that deadline: itlr.proxy.caller), and dropped when it fails or times out: a count that never
comes back cannot hold later searches (one stayed wedged for 40 minutes before).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from time import monotonic

from itlr.engines.remembered_stats import RememberedStats, stats_max_age
from itlr.lexical import CorpusStats
from itlr.proxy.caller import TimedLRU, UpstreamTimeout, caller_digest

# (target, caller) pairs remembered, and tokens per pair: about 25 MB when full (tokens of 20
# characters, measured with tracemalloc), far less in practice (a query bar's few indexes and
# users, a few hundred tokens each).
REMEMBERED_TARGETS = 128
REMEMBERED_TOKENS = 1024
# However often it is used, a (target, caller) pair is counted afresh after this long.
REMEMBERED_SECONDS = 600.0
# How long a count on its way may be waited for (the proxy passes its upstream deadline).
COUNT_DEADLINE = 120.0

# APIs (a path's first `_` segment) that read, whatever the method: everything else the proxy
# relays with a method other than GET / HEAD / OPTIONS counts as a write. A request wrongly
# counted as a write costs one count; one wrongly counted as a read would keep stale statistics.
READ_APIS = frozenset(
    {
        "_search",
        "_msearch",
        "_async_search",
        "_count",
        "_mget",
        "_field_caps",
        "_validate",
        "_explain",
        "_render",
        "_termvectors",
        "_mtermvectors",
        "_pit",
        "_analyze",
        "_terms_enum",
        "_rank_eval",
        "_knn_search",
        "_resolve",
    }
)
# Read-only endpoints under APIs that also write (a UI asks them on every page).
READ_PATHS = re.compile(r"^/_security/(?:[^/]+/)*(?:_has_privileges|_authenticate)/?$")
# APIs that make earlier writes searchable, whatever the method (GET /_refresh is one).
REFRESH_APIS = frozenset({"_refresh", "_flush"})


def changes_documents(method: str, path: str, refresh: str | None) -> bool:
    """Whether a request the proxy relays may change what an index's statistics count: a
    write, or a refresh (its API, or a `refresh` parameter, which GET of a document takes too).
    `path`: normalised (itlr.proxy.app.normalised_path); `refresh`: the parameter's value."""
    api = next((s for s in path.split("/") if s.startswith("_")), None)
    if api in REFRESH_APIS or (refresh is not None and refresh.lower() != "false"):
        return True
    if method in ("GET", "HEAD", "OPTIONS"):
        return False
    return api not in READ_APIS and not READ_PATHS.match(path)


# A count of one caller's target, on its way: when it was asked, and its answer to come.
Pending = tuple[float, "asyncio.Future[CorpusStats]"]


class CallerStatistics:
    """Remembered statistics per (target, caller), bounded; `statistics` runs on one event
    loop (the proxy's)."""

    def __init__(
        self,
        max_age: float | None = None,
        targets: int = REMEMBERED_TARGETS,
        tokens: int = REMEMBERED_TOKENS,
        deadline: float = COUNT_DEADLINE,
        kept_seconds: float = REMEMBERED_SECONDS,
    ) -> None:
        self.max_age = stats_max_age() if max_age is None else max_age
        self.targets = targets
        self.tokens = tokens
        self.deadline = deadline
        self._lock = threading.Lock()
        self._remembered: TimedLRU[tuple[str, bytes], RememberedStats] = TimedLRU(
            targets, kept_seconds
        )
        self._counting: dict[tuple[str, bytes, tuple[str, ...]], Pending] = {}
        self._written_at = -math.inf

    async def statistics(
        self,
        target: str,
        headers: Mapping[str, str],
        tokens: Sequence[str],
        count: Callable[[], Awaitable[CorpusStats]],
    ) -> CorpusStats:
        """The caller's statistics of these tokens on the target: the remembered ones while
        recent, else `count()`'s, remembered. Searches of the same caller, target and tokens
        that ask while a count is on its way (a dashboard's panels at once) share it, unless a
        write was answered after it was asked."""
        caller = caller_digest(headers)
        remembered = self._of(target, caller)
        statistics, recent = remembered.lookup(tokens)
        if statistics is not None and recent:
            return statistics
        key = (target, caller, tuple(sorted(set(tokens))))
        pending = self._counting.get(key)
        now = monotonic()
        if pending is None or pending[0] <= self._written_at or now - pending[0] >= self.deadline:
            started = asyncio.ensure_future(self._count(remembered, count, now))
            pending = self._counting[key] = (now, started)
            started.add_done_callback(lambda done: self._settled(key, done))
        asked, task = pending
        try:
            return await asyncio.wait_for(
                asyncio.shield(task), max(0.0, asked + self.deadline - monotonic())
            )
        except TimeoutError:
            # The count's own deadline should have ended it: drop it, so none waits on it.
            if self._counting.get(key, (0.0, None))[1] is task:
                del self._counting[key]
            task.cancel()
            raise UpstreamTimeout("the cluster", self.deadline) from None

    @staticmethod
    async def _count(
        remembered: RememberedStats, count: Callable[[], Awaitable[CorpusStats]], asked: float
    ) -> CorpusStats:
        statistics = await count()
        remembered.record(statistics, asked)
        return statistics

    def _settled(
        self, key: tuple[str, bytes, tuple[str, ...]], done: asyncio.Future[CorpusStats]
    ) -> None:
        if self._counting.get(key, (0.0, None))[1] is done:
            del self._counting[key]
        if not done.cancelled():
            done.exception()  # every waiter may have gone: the failure is theirs, not the loop's

    def of(self, target: str, headers: Mapping[str, str]) -> RememberedStats:
        """The statistics remembered for this target (as the path names it) and caller."""
        return self._of(target, caller_digest(headers))

    def _of(self, target: str, caller: bytes) -> RememberedStats:
        key = (target, caller)
        with self._lock:
            remembered = self._remembered.get(key)
            if remembered is None:
                remembered = RememberedStats(self.tokens, self.max_age)
                self._remembered.put(key, remembered)
            return remembered

    def written(self) -> None:
        """A write went through the proxy: every target's next search counts again. Every
        one, not the written index's: aliases, patterns and `_bulk` bodies name indexes in too
        many ways to tell which targets a write reaches, and a count costs one round trip."""
        with self._lock:
            self._written_at = monotonic()
            remembered = self._remembered.values()
        for one in remembered:
            one.written()

    def __len__(self) -> int:
        return len(self._remembered)


__all__ = ["CallerStatistics", "caller_digest", "changes_documents"]
