"""Rewriting a UI's search body: the itlr clause becomes the logical scoring, the rest stays.

The logical scoring is the engine's own request (`Dialect.search_body`): the plan's kNN
candidates and the stored script, with the rest of the UI's query as the filter (inside every
kNN clause too, so the time range bounds the candidates). Everything else the UI sent (size,
from, aggregations, fields, track_total_hits, ...) is kept as sent; the ranking is the logical
score, the UI's own sort only breaks ties. Two parts are completed so the UI shows what it would
for an ordinary query: `_source` leaves out itlr's own fields (the vector, the token fields) unless
the request names them, and a `highlight` block gets a `highlight_query` from the positive terms
(the script the logical query became has no words for the highlighter to find). What the answer
needs fixed (hidden fields, a true `hits.total`) is its `AnswerPlan` (itlr.proxy.answers).

Refused, with what works: `terminate_after` (each shard would stop after that many documents
in index order, before the logical score ranks them), and a `sort` beside `rescore` (the
engines refuse a sort with a rescore; without a sort of its own the request is rescored).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from itlr.engines.dialect import Dialect
from itlr.engines.lexical_requests import counted_truths
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.proxy.answers import (
    COUNT_AGGREGATION,
    COUNTED,
    ITLR_PREFIX,
    AnswerPlan,
    asked_fields,
)
from itlr.proxy.clause import ClauseError, LogicalSearch

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


def _source_parts(requested: Any) -> tuple[list[Any], list[Any]]:
    """(includes, excludes) of a `_source` value that is not false."""
    if isinstance(requested, str) and requested != "true":
        return [requested], []
    if isinstance(requested, list):
        return list(requested), []
    if isinstance(requested, dict):
        includes = _as_list(requested.get("includes", requested.get("include")))
        excludes = _as_list(requested.get("excludes", requested.get("exclude")))
        return includes, excludes
    return [], []


def shown_source(requested: Any, unshown: list[str]) -> Any:
    """The UI's `_source` without the vector field (`unshown[0]`) and itlr's own fields (every
    `itlr_` name: those listed and any other), but for those it names exactly."""
    if requested is False or requested == "false":
        return requested
    includes, excludes = _source_parts(requested)
    hidden = [name for name in unshown if name not in includes and name not in excludes]
    if not any(str(name).startswith(ITLR_PREFIX) for name in includes):
        hidden.append(f"{ITLR_PREFIX}*")  # any other field of itlr's, by its prefix
    shown: dict[str, Any] = {"excludes": [*excludes, *hidden]}
    if includes:
        shown = {"includes": includes, **shown}
    return shown


def _disabled_stored_fields(body: dict[str, Any]) -> bool:
    stored = body.get("stored_fields")
    return stored == "_none_" or (isinstance(stored, list) and "_none_" in stored)


def source_to_ask(body: dict[str, Any], unshown: list[str]) -> tuple[bool, Any]:
    """(whether to send `_source`, the value): the UI's own without itlr's fields; none when
    the UI asks for no source (`stored_fields` without `_source`, `_none_` above all: the
    engine refuses a `_source` beside it)."""
    if "_source" in body:
        if _disabled_stored_fields(body):
            return True, body["_source"]  # the UI's own combination: the engine judges it
        return True, shown_source(body["_source"], unshown)
    if "stored_fields" in body:
        return False, None  # the engine sends no _source then: nothing to hide
    return True, shown_source(True, unshown)


def refuse_terminate_after(value: Any, where: str) -> None:
    """A logical search stops nowhere but at its page: `terminate_after` would cut each shard
    off after that many documents in index order, before the logical score ranks them."""
    if value in (None, 0, "0"):
        return
    raise ClauseError(
        f"terminate_after ({where}) cannot be combined with a logical search: each shard would "
        "stop after that many documents in index order, before the logical score ranks them; "
        "drop it (size bounds the page)"
    )


def _only_score(sort: Any) -> bool:
    entries = sort if isinstance(sort, list) else [sort]
    return all(
        entry in ("_score", {"_score": "desc"}, {"_score": {"order": "desc"}}) for entry in entries
    )


def _scored(built: dict[str, Any]) -> dict[str, Any] | None:
    """The bool whose kNN clauses gather the candidates, None when every document is scored."""
    scored = built["query"]["script_score"]["query"]
    inner = scored.get("bool", {})
    if "should" not in inner and isinstance(inner.get("must"), list) and inner["must"]:
        candidate = inner["must"][0].get("bool", {}) if isinstance(inner["must"][0], dict) else {}
        inner = candidate if "minimum_should_match" in candidate else inner
    return inner if inner.get("minimum_should_match") == 1 and inner.get("should") else None


def _holds_script(clause: Any) -> bool:
    if isinstance(clause, dict):
        return "script" in clause or any(_holds_script(v) for v in clause.values())
    if isinstance(clause, list):
        return any(_holds_script(item) for item in clause)
    return False


def count_query(built: dict[str, Any], body: dict[str, Any]) -> tuple[str, Any]:
    """How the answer's hits.total is made true: ("as_is", None) when the search matches every
    document the rest of the query matches (no kNN candidates), ("counted", query) with the
    query that matches those documents (the built one's filters and exclusions, without its kNN
    clauses, and the request's post_filter), ("lower_bound", None) when no cheap query can tell
    (a script among the exclusions, the request's `min_score`)."""
    inner = _scored(built)
    if inner is None:
        return "as_is", None
    if "min_score" in body:
        return "lower_bound", None
    filters = list(inner.get("filter") or [])
    excluded = list(inner.get("must_not") or [])
    if _holds_script(filters) or _holds_script(excluded):
        return "lower_bound", None
    if body.get("post_filter") is not None:
        filters.append(body["post_filter"])
    return "counted", {"bool": {"filter": filters, "must_not": excluded}}


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
    statistics: CorpusStats | None = None,
    index: str = "the index",
) -> dict[str, Any]:
    """The body to send upstream in place of the UI's; `statistics`: the index's token
    statistics, which hybrid truths need (`Upstream.term_statistics`)."""
    return rewrite_search(body, found, dialect, term_vectors, defaults, statistics, index)[0]


def rewrite_search(
    body: dict[str, Any],
    found: LogicalSearch,
    dialect: Dialect,
    term_vectors: np.ndarray,
    defaults: SearchOptions,
    statistics: CorpusStats | None = None,
    index: str = "the index",
) -> tuple[dict[str, Any], AnswerPlan]:
    """`rewrite_body`, and what to fix in its answer (itlr.proxy.answers)."""
    refuse_terminate_after(body.get("terminate_after"), "in the body")
    rescored = body.get("rescore") not in (None, [], {})
    if rescored and "sort" in body and not _only_score(body["sort"]):
        raise ClauseError(
            "rescore cannot be combined with a sort (the engines refuse a [sort] with "
            "[rescore]): drop the sort; the logical score orders the hits, rescored"
        )
    options, _ = counted_truths(options_for(body, found, defaults), statistics, index)
    built = dialect.search_body(found.query, term_vectors, options, statistics)
    rewritten = dict(body)
    rewritten["query"] = built["query"]
    if rescored:
        rewritten.pop("sort", None)  # by _score: the only order a rescore takes
    else:
        rewritten["sort"] = (
            _score_first(body["sort"], built["sort"]) if "sort" in body else built["sort"]
        )
    rewritten["track_scores"] = True
    unshown = [
        dialect.layout.vector_field,
        *(name for name in dialect.unshown if name != dialect.layout.vector_field),
        HASH_FIELD,
        PREVIOUS_HASH_FIELD,
    ]
    send_source, source = source_to_ask(body, unshown)
    if send_source:
        rewritten["_source"] = source
    if "highlight" in body:
        rewritten["highlight"] = highlight_with_terms(
            body["highlight"], found, dialect.layout.text_field
        )
    if "size" not in body:
        rewritten["size"] = built["size"]
    track = body.get("track_total_hits")
    total, counted = count_query(built, body)
    if track is False or str(track).lower() == "false":
        total = "as_is"
    aggregations_key = "aggregations" if "aggregations" in body else "aggs"
    own_aggregations = isinstance(body.get(aggregations_key), dict) and bool(body[aggregations_key])
    if total == "counted":
        rewritten[aggregations_key] = {
            **(body.get(aggregations_key) or {}),
            COUNT_AGGREGATION: {"global": {}, "aggs": {COUNTED: {"filter": counted}}},
        }
    includes = _source_parts(body.get("_source", True))[0] if body.get("_source") else []
    plan = AnswerPlan(
        vector_field=dialect.layout.vector_field,
        asked=asked_fields(body, [str(name) for name in includes]),
        total=total,
        track_total_hits=track,
        own_aggregations=own_aggregations,
    )
    return rewritten, plan
