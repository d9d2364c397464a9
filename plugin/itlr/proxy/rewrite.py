"""Rewriting a UI's search body: the itlr clause becomes the logical scoring, the rest stays.

The logical scoring is the engine's own request (`Dialect.search_body`): the plan's kNN
candidates and the stored script, with the rest of the UI's query as the filter (inside every
kNN clause too, so the time range bounds the candidates). Everything else the UI sent (size,
from, aggregations, _source, fields, highlight, track_total_hits, ...) is kept as sent; the
ranking is the logical score, the UI's own sort only breaks ties.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from itlr.engines.dialect import Dialect, counted_truths
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.proxy.clause import LogicalSearch

# With size 0 (a histogram-only request) the candidates still come from a k of this size.
DEFAULT_K = 10


def _score_first(sort: Any, builder_sort: list[Any]) -> list[Any]:
    """The logical score first; the UI's sort (e.g. on a time field) breaks ties."""
    entries = sort if isinstance(sort, list) else [sort]
    kept = [
        entry
        for entry in entries
        if entry not in ("_score", {"_score": "desc"}, {"_score": {"order": "desc"}})
    ]
    return [builder_sort[0], *kept] if kept else builder_sort


def options_for(
    body: dict[str, Any], found: LogicalSearch, defaults: SearchOptions
) -> SearchOptions:
    """The search options for this request: k covers the page the UI asks for."""
    size = body.get("size", DEFAULT_K)
    offset = body.get("from", 0)
    k = int(size) + int(offset) if isinstance(size, int) and isinstance(offset, int) else DEFAULT_K
    filters = [f for f in (defaults.filter, found.rest) if f is not None]
    combined = (
        filters[0] if len(filters) == 1 else ({"bool": {"filter": filters}} if filters else None)
    )
    return dataclasses.replace(defaults, k=max(k, 1), filter=combined, explain=False)


def rewrite_body(
    body: dict[str, Any],
    found: LogicalSearch,
    dialect: Dialect,
    term_vectors: np.ndarray,
    defaults: SearchOptions,
    lexical: CorpusStats | None = None,
    index: str = "the index",
) -> dict[str, Any]:
    """The body to send upstream in place of the UI's; `lexical`: the index's token
    statistics, which hybrid truths need (`Upstream.lexical_stats`)."""
    options, _ = counted_truths(options_for(body, found, defaults), lexical, index)
    built = dialect.search_body(found.query, term_vectors, options, lexical)
    rewritten = dict(body)
    rewritten["query"] = built["query"]
    rewritten["sort"] = (
        _score_first(body["sort"], built["sort"]) if "sort" in body else built["sort"]
    )
    rewritten["track_scores"] = True
    if "size" not in body:
        rewritten["size"] = built["size"]
    return rewritten
