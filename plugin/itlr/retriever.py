"""The one obvious call: text in, ranked hits out, on any engine."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from itlr.embed import Embedder
from itlr.engines import Backend
from itlr.hard_filter import explain_filtering
from itlr.limits import LIMITS
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Hit, SearchResult

__all__ = ["CUT_MARK", "Retriever", "SearchResult", "bound_hits"]


class Retriever:
    def __init__(self, backend: Backend, embedder: Embedder) -> None:
        self.backend = backend
        self.embedder = embedder

    def embed_terms(self, query: Query) -> np.ndarray:
        """All distinct terms in one batched encode call, for the ones not in the term cache."""
        return self.embedder.encode_terms(list(query.terms))

    def search(self, query: str | Query, options: SearchOptions | None = None) -> SearchResult:
        options = options or SearchOptions()
        query = Query.of(query)
        LIMITS.check_tree(query.root)  # what the request became: rewritten, built or parsed
        vectors = self.embed_terms(query)
        found = self.backend.search(query, vectors, options)
        if options.explain and options.hard_filter is not None and query.excluded_terms:
            # Why the filter kept each hit, and which documents it dropped from their places:
            # the same search without it, explained the same way (itlr.hard_filter).
            unfiltered = self.backend.search(query, vectors, replace(options, hard_filter=None))
            found = explain_filtering(found, unfiltered.hits, options.hard, options.truth)
            if found.dropped:
                dropped, cut = bound_hits(found.dropped, LIMITS.max_document_bytes)
                found = replace(found, dropped=dropped, warnings=(*found.warnings, *cut))
        bounded, cut = bound_hits(found.hits, LIMITS.max_document_bytes)
        if not (query.warnings or cut):
            return found
        # The query's own notes first, then the engine's, then what bounding cut.
        return replace(found, hits=bounded, warnings=(*query.warnings, *found.warnings, *cut))

    def dense(self, text: str, k: int = 10, filter: dict[str, Any] | None = None) -> list[Hit]:
        """Plain dense retrieval of the whole text: the baseline logical retrieval improves on."""
        if len(text) > LIMITS.max_query_chars:
            raise LIMITS.refuse(
                "max_query_chars", len(text), f"the text is {len(text):,} characters long"
            )
        if filter is not None:
            LIMITS.check_filter(filter)
        return self.backend.search_vector(self.embedder.encode_queries([text])[0], k, filter)


CUT_MARK = " [itlr: cut]"


def bound_hits(hits: list[Hit], limit: int) -> tuple[list[Hit], list[str]]:
    """Hits whose text, fields and highlights each hold at most `limit` bytes of JSON, and a
    warning per value cut: a longer string is cut to `limit` characters (marked), any other
    longer value is left out. Ingestion refuses documents this large; an index written before,
    or a cluster index filled by others, may still hold them, and one must not make every answer
    that returns it tens of megabytes."""
    bounded: list[Hit] = []
    notes: list[str] = []
    for hit in hits:
        cut: list[str] = []
        text = _cut_text(hit.text, limit, "text", cut)
        fields = {}
        for name, value in hit.fields.items():
            if isinstance(value, str):
                fields[name] = _cut_text(value, limit, name, cut)
            elif isinstance(value, dict | list) and _json_size(value) > limit:
                cut.append(f"{name} (left out)")
            else:
                fields[name] = value
        highlights = {
            name: [_cut_text(f, limit, f"highlight of {name}", cut) for f in fragments]
            for name, fragments in hit.highlights.items()
        }
        if cut:
            hit = replace(hit, text=text, fields=fields, highlights=highlights)
            notes.append(
                f"hit {hit.id!r}: {', '.join(dict.fromkeys(cut))} over {limit:,} bytes "
                "(max_document_bytes, ITLR_MAX_DOCUMENT_BYTES)"
            )
        bounded.append(hit)
    return bounded, notes


def _cut_text(text: str, limit: int, name: str, cut: list[str]) -> str:
    # Characters before bytes: a string of at most limit // 4 characters fits either way.
    if len(text) <= limit // 4 or len(text.encode("utf-8", "surrogatepass")) <= limit:
        return text
    cut.append(f"{name} (cut)")
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore") + CUT_MARK


def _json_size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
