"""Query-term vectors kept per model, so a repeated term does not wait for the encoder.

A query bar sends the same terms again and again (refresh, paging, histogram re-queries); the
encoder is most of a query's time (docs/benchmarks.md). One bounded LRU per model name, keyed by
the exact term text, lives in the process: the service, the proxy and every `itlr.Index` of the
process share it through `Embedder.encode_terms`. Documents are never cached (ingestion encodes
each text once and would only evict the query terms).

ITLR_TERM_CACHE_SIZE sets how many vectors each model keeps (default 4096, about 6 MB at 384
dimensions; 0 turns the cache off); `set_term_cache_size` changes it at run time.

A `scope` keeps entries apart within one model's cache: the query-bar proxy serves many indexes
to many users, and scopes its entries by the indexes a search resolved to, so that whether a
term is cached (its timing) tells one index's users nothing about another's searches. The
counters are the model's, all scopes together (the proxy shows them only behind its token).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from itlr.errors import ConfigurationError
from itlr.settings import env_number

DEFAULT_SIZE = 4096
SIZE_ENV = "ITLR_TERM_CACHE_SIZE"


def _size_from_env() -> int:
    return env_number(
        SIZE_ENV, DEFAULT_SIZE, least=0, meaning="the vectors a model's cache keeps (0: off)"
    )


def _checked(size: int) -> int:
    if size < 0:
        raise ConfigurationError(f"the term cache size must be 0 (off) or more, got {size}")
    return size


@dataclass(frozen=True)
class CacheStats:
    model: str
    hits: int
    misses: int
    evictions: int
    entries: int
    capacity: int

    def to_dict(self) -> dict[str, int | str]:
        return {
            "model": self.model,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "entries": self.entries,
            "capacity": self.capacity,
        }


class TermCache:
    """A bounded LRU of one model's term vectors; safe to share between threads."""

    def __init__(self, model: str, capacity: int) -> None:
        self.model = model
        self.capacity = _checked(capacity)
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = _checked(capacity)
            self._evict()

    def _evict(self) -> None:
        while len(self._vectors) > self.capacity:
            self._vectors.popitem(last=False)
            self.evictions += 1

    def encode(
        self,
        terms: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
        dims: int,
        scope: str = "",
    ) -> np.ndarray:
        """The vectors of `terms` (in order), calling `encode` once for the ones not cached in
        `scope`."""
        rows: list[np.ndarray | None] = []
        with self._lock:
            for term in terms:
                key = _key(scope, term)
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                rows.append(vector)
            hits = sum(row is not None for row in rows)
            self.hits += hits
            self.misses += len(rows) - hits
        missing = list(dict.fromkeys(t for t, row in zip(terms, rows, strict=True) if row is None))
        if missing:
            # Encoded outside the lock: a slow encode must not hold up the cached terms.
            fresh = dict(zip(missing, np.asarray(encode(missing), dtype=np.float32), strict=True))
            with self._lock:
                for term, vector in fresh.items():
                    vector.flags.writeable = False  # shared by every later caller
                    if self.capacity:
                        key = _key(scope, term)
                        self._vectors[key] = vector
                        self._vectors.move_to_end(key)
                self._evict()
            rows = [fresh[t] if row is None else row for t, row in zip(terms, rows, strict=True)]
        if not rows:
            return np.zeros((0, dims), dtype=np.float32)
        return np.stack(rows)  # type: ignore[arg-type]

    def cached(self, terms: Sequence[str], scope: str = "") -> np.ndarray | None:
        """The vectors of `terms` when every one is cached in `scope` (counted as hits), else
        None with nothing counted: a caller on an event loop answers from here without handing
        the request to a worker thread, and calls `encode` (which counts) otherwise."""
        keys = [_key(scope, term) for term in terms]
        with self._lock:
            rows = [self._vectors.get(key) for key in keys]
            if not rows or any(row is None for row in rows):
                return None
            for key in keys:
                self._vectors.move_to_end(key)
            self.hits += len(rows)
        return np.stack(rows)  # type: ignore[arg-type]

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.model,
                self.hits,
                self.misses,
                self.evictions,
                len(self._vectors),
                self.capacity,
            )


def _key(scope: str, term: str) -> str:
    # A scope never holds NUL (index names cannot), so scopes cannot run into each other.
    return f"{scope}\0{term}" if scope else term


_caches: dict[str, TermCache] = {}
_caches_lock = threading.Lock()
_size: int | None = None


def cache_for(model: str) -> TermCache:
    """The process's cache of this model's term vectors."""
    global _size
    with _caches_lock:
        if _size is None:
            _size = _size_from_env()
        cache = _caches.get(model)
        if cache is None:
            cache = _caches[model] = TermCache(model, _size)
        return cache


def set_term_cache_size(size: int) -> None:
    """Every model's bound, now and for caches made later (0 turns caching off)."""
    global _size
    size = _checked(size)
    with _caches_lock:
        _size = size
        caches = list(_caches.values())
    for cache in caches:
        cache.resize(size)


def term_cache_size() -> int:
    """The bound every model's cache has now."""
    global _size
    with _caches_lock:
        if _size is None:
            _size = _size_from_env()
        return _size


def term_cache_stats() -> list[CacheStats]:
    with _caches_lock:
        caches = list(_caches.values())
    return [cache.stats() for cache in caches]


def prometheus_text() -> str:
    """The counters in Prometheus' text exposition format (version 0.0.4)."""
    stats = term_cache_stats()
    families = [
        ("itlr_term_cache_hits_total", "counter", "Query terms whose vector came from the cache."),
        ("itlr_term_cache_misses_total", "counter", "Query terms sent to the encoder."),
        ("itlr_term_cache_evictions_total", "counter", "Vectors dropped to respect the bound."),
        ("itlr_term_cache_entries", "gauge", "Vectors held now."),
        ("itlr_term_cache_capacity", "gauge", "Vectors the cache may hold."),
    ]
    fields = ["hits", "misses", "evictions", "entries", "capacity"]
    lines = []
    for (name, kind, help_text), key in zip(families, fields, strict=True):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for stat in stats:
            label = stat.model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            lines.append(f'{name}{{model="{label}"}} {getattr(stat, key)}')
    return "\n".join(lines) + "\n"


PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

__all__ = [
    "DEFAULT_SIZE",
    "PROMETHEUS_CONTENT_TYPE",
    "SIZE_ENV",
    "CacheStats",
    "TermCache",
    "cache_for",
    "prometheus_text",
    "set_term_cache_size",
    "term_cache_size",
    "term_cache_stats",
]
