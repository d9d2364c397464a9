"""The one obvious call: text in, ranked hits out, on any engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from itlr.embed import Embedder
from itlr.engines import Backend
from itlr.options import Hit, SearchOptions
from itlr.query import Query

if TYPE_CHECKING:
    from itlr.rewrite import RewriteResult


@dataclass(frozen=True)
class SearchResult:
    query: Query
    hits: list[Hit]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    rewrite: RewriteResult | None = None  # how a plain-language question became the query
    # Whether the top k is provably the exact top k (see itlr.options.Hits.exact).
    exact: bool | None = None

    def to_dict(self) -> dict:
        payload = {
            "query": str(self.query),
            "terms": list(self.query.terms),
            "warnings": list(self.warnings),
            "exact": self.exact,
            "hits": [h.to_dict() for h in self.hits],
        }
        if self.rewrite is not None:
            payload["rewrite"] = self.rewrite.to_dict()
        return payload


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
        hits = self.backend.search(query, self.embed_terms(query), options)
        warnings = (*query.warnings, *getattr(hits, "warnings", ()))
        exact = getattr(hits, "exact", None)
        return SearchResult(query, list(hits), warnings, exact=exact)

    def dense(self, text: str, k: int = 10, filter: dict | None = None) -> list[Hit]:
        """Plain dense retrieval of the whole text: the baseline logical retrieval improves on."""
        return self.backend.search_vector(self.embedder.encode_queries([text])[0], k, filter)
