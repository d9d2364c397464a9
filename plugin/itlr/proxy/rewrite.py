"""Rewriting a UI's search body: the itlr clause becomes the logical scoring, the rest stays.

The logical scoring is the engine's own request (`Dialect.search_body`): the plan's kNN
candidates and the stored script, with the rest of the UI's query as the filter (inside every
kNN clause too, so the time range bounds the candidates). Everything else the UI sent (size,
from, aggregations, fields, track_total_hits, ...) is kept as sent; the ranking is the logical
score, the UI's own sort only breaks ties. Two parts are completed so the UI shows what it would
for an ordinary query: `_source` leaves out itlr's own fields (the vector, the token fields) unless
the request names them, and a `highlight` block gets a `highlight_query` from the positive terms
(the script the logical query became has no words for the highlighter to find).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from itlr.engines.dialect import Dialect
from itlr.engines.lexical_requests import counted_truths
from itlr.fingerprint import HASH_FIELD
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


def shown_source(requested: Any, unshown: list[str]) -> Any:
    """The UI's `_source` without itlr's own fields, but for those it names exactly."""
    if requested is False or requested == "false":
        return requested
    includes: list[Any] = []
    excludes: list[Any] = []
    if isinstance(requested, str) and requested != "true":
        includes = [requested]
    elif isinstance(requested, list):
        includes = list(requested)
    elif isinstance(requested, dict):
        includes = _as_list(requested.get("includes", requested.get("include")))
        excludes = _as_list(requested.get("excludes", requested.get("exclude")))
    hidden = [name for name in unshown if name not in includes and name not in excludes]
    shown: dict[str, Any] = {"excludes": [*excludes, *hidden]}
    if includes:
        shown = {"includes": includes, **shown}
    return shown


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _highlighted_fields(highlight: dict[str, Any]) -> list[str]:
    fields = highlight.get("fields")
    if isinstance(fields, dict):
        return [str(name) for name in fields]
    if isinstance(fields, list):
        return [str(name) for entry in fields if isinstance(entry, dict) for name in entry]
    return []


def highlight_with_terms(highlight: Any, found: LogicalSearch, text_field: str) -> Any:
    """The UI's highlight block (its fields, tags, fragment sizes kept) with a highlight_query
    for the positive terms' words on the text field and every field it names, and the rest of
    the query, whose words the UI would have highlighted too."""
    words = " ".join(found.query.positive_terms)
    if not isinstance(highlight, dict) or "highlight_query" in highlight or not words:
        return highlight
    named = [name for name in _highlighted_fields(highlight) if "*" not in name]
    matches = [
        {"match": {name: {"query": words, "lenient": True}}}
        for name in dict.fromkeys([text_field, *named])
    ]
    should = matches + ([found.rest] if found.rest is not None else [])
    return {**highlight, "highlight_query": {"bool": {"should": should}}}


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
    unshown = [*dialect.unshown, HASH_FIELD]
    rewritten["_source"] = shown_source(body.get("_source", True), unshown)
    if "highlight" in body:
        rewritten["highlight"] = highlight_with_terms(
            body["highlight"], found, dialect.layout.text_field
        )
    if "size" not in body:
        rewritten["size"] = built["size"]
    return rewritten
