"""What is worked out for a query once and asked for again.

A query bar sends the same query text again and again (refresh, paging, histogram re-queries),
and `itlr.query.parse` hands out the same `Query` object for the same text. A `QueryMemo`
keeps, per query object, a few values built from it and from other inputs (the search options,
the index's statistics), which are compared by equality: a query asked with other options, or
after the statistics changed, is worked out again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from itlr.query import Query

Value = TypeVar("Value")

# Queries remembered, least recently asked first out; and values per query (options, pages).
QUERIES_REMEMBERED = 256
VALUES_PER_QUERY = 4


class QueryMemo(Generic[Value]):
    """Values keyed by a query object's identity and an equality-compared key (thread-safe)."""

    def __init__(self, queries: int = QUERIES_REMEMBERED, per_query: int = VALUES_PER_QUERY):
        self.queries = queries
        self.per_query = per_query
        self._lock = threading.Lock()
        # id(query) -> (the query, kept so that its id is not reused; [(key, value), ...])
        self._entries: OrderedDict[int, tuple[Query, list[tuple[object, Value]]]] = OrderedDict()

    def get(self, query: Query, key: object, make: Callable[[], Value]) -> Value:
        """The value remembered for this query object and an equal key, or `make()`'s,
        remembered."""
        with self._lock:
            entry = self._entries.get(id(query))
            if entry is not None and entry[0] is query:
                self._entries.move_to_end(id(query))
                for known, value in entry[1]:
                    if known == key:
                        return value
        value = make()
        with self._lock:
            entry = self._entries.get(id(query))
            if entry is None or entry[0] is not query:
                entry = (query, [])
                self._entries[id(query)] = entry
            entry[1].insert(0, (key, value))
            del entry[1][self.per_query :]
            self._entries.move_to_end(id(query))
            while len(self._entries) > self.queries:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        with self._lock:
            return sum(len(values) for _, values in self._entries.values())


__all__ = ["QUERIES_REMEMBERED", "VALUES_PER_QUERY", "QueryMemo"]
