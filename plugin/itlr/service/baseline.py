"""The dense baseline a `/search` answers beside itlr's hits when asked (`"dense": true`).

Dense retrieval embeds the whole text (the question, or the query as typed) as one vector and
ranks by cosine: what logical retrieval is compared with (`itlr demo`, the paper's Base). Each
dense hit also carries what itlr makes of it: its per-term truths and the score the logical
query gives it, computed by the same search (same truth map, operators and NOT strength) run on
exactly those documents, so a hit in both columns shows the same truths in both. A hit that the
hard filter or `exclude_lexical` drops has `itlr_score` null and its truths from the search
without them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from itlr.index import Index
from itlr.limits import LIMITS
from itlr.query import Query
from itlr.results import Hit

# Options that shape how a search pages, gathers or presents its hits: the truths of a fixed
# set of documents are computed without them (exact mode, those documents only, all at once).
# `explain`: a cluster's hits carry truths only then (computed from the vectors it returns).
_PRESENTATION = {
    "k": None,
    "mode": "exact",
    "candidates": None,
    "max_candidates": None,
    "from_": 0,
    "search_after": None,
    "source_fields": (),
    "highlight": False,
    "explain": True,
}
# Options that drop documents rather than score them.
_DROPPING = {"hard_filter": None, "exclude_lexical": False}


@dataclass(frozen=True)
class DenseBaseline:
    """The text dense retrieval embedded and its hits, each with itlr's truths and score."""

    text: str
    hits: list[Hit]
    itlr_scores: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "hits": [
                {**hit.to_dict(), "itlr_score": self.itlr_scores.get(hit.id)} for hit in self.hits
            ],
        }


def dense_baseline(index: Index, text: str, query: Query, names: dict[str, Any]) -> DenseBaseline:
    """The top `k` of plain dense retrieval of `text` (with the search's `filter`), each hit
    with the truths and score the logical `query` gives it under the search's options `names`
    (the front door's keyword names, as `Index.search` takes them)."""
    hits = index.dense(text, k=names.get("k", 10), filter=names.get("filter"))
    ids = [hit.id for hit in hits]
    scored = _scored(index, query, ids, {**names, **_PRESENTATION})
    truths = {hit_id: hit.truths for hit_id, hit in scored.items()}
    dropped = [hit_id for hit_id in ids if hit_id not in scored]
    if dropped and any(names.get(name) != off for name, off in _DROPPING.items()):
        # Dropped by the hard filter or the lexical exclusion: their truths all the same.
        kept = _scored(index, query, dropped, {**names, **_PRESENTATION, **_DROPPING})
        truths |= {hit_id: hit.truths for hit_id, hit in kept.items()}
    return DenseBaseline(
        text,
        [replace(hit, truths=truths.get(hit.id, {})) for hit in hits],
        {hit_id: scored[hit_id].score if hit_id in scored else None for hit_id in ids},
    )


def _scored(index: Index, query: Query, ids: list[str], options: dict[str, Any]) -> dict[str, Hit]:
    """These documents as the logical query scores them (those it keeps), by id: an exact
    search on an `_id` filter, in as many searches as max_filter_values needs (k may be up to
    10,000, a filter holds at most 1,024 values)."""
    scored: dict[str, Hit] = {}
    step = LIMITS.max_filter_values
    for start in range(0, len(ids), step):
        some = ids[start : start + step]
        found = index.search(query, **{**options, "k": len(some), "filter": _ids(some)})
        scored |= {hit.id: hit for hit in found}
    return scored


def _ids(ids: list[str]) -> dict[str, Any]:
    return {"terms": {"_id": ids}}
