"""What a search gives back: its hits, and the one result object that carries them.

An engine's stages hand each other a `Ranking` (hits and what finding them noticed); the engine
builds the `SearchResult` once, from its last ranking, with the search's warnings, whether the
top k is provably exact, and the index's coverage. Like elasticsearch-dsl's `Response`, a
result is a sequence of its hits: `for hit in result`, `result[0]`, `len(result)`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

from itlr.query import Query

if TYPE_CHECKING:
    from itlr.rewrite import RewriteResult


@dataclass(frozen=True)
class Coverage:
    """Documents of `index`: all, with a text but no vector (back-fill can embed them), and
    with neither (nothing to embed: no positive term can match them). Where a follower keeps
    the index current (itlr.follow): documents whose text a write changed and that wait to be
    embedded again (`unverified`: their vector may be of an old text), documents it could not
    write (`failing`: it retries them), and the time before which every write has been
    verified (`verified_through`, seconds since the epoch; None: not known)."""

    index: str
    total: int
    without_vector: int
    without_text: int
    unverified: int = 0
    failing: int = 0
    verified_through: float | None = None

    @property
    def with_vector(self) -> int:
        return self.total - self.without_vector - self.without_text

    def to_dict(self) -> dict[str, Any]:
        verified = self.verified_through
        return {
            "index": self.index,
            "documents": self.total,
            "with_vector": self.with_vector,
            "without_vector": self.without_vector,
            "without_text": self.without_text,
            "unverified": self.unverified,
            "failing": self.failing,
            "verified_through": (
                None
                if verified is None
                else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(verified))
            ),
        }

    def warning(self, vector_field: str, text_field: str) -> str | None:
        """The search's warning when documents it cannot score (or may score by an old text)
        exist, with what to do; None when every document with a text has a current vector."""
        parts = []
        if self.without_vector:
            parts.append(
                f"{self.without_vector} of {self.total} documents of {self.index!r} have a "
                f"{text_field!r} but no vector in {vector_field!r}, so no search can find them: "
                f"embed them with `itlr backfill --url URL --index {self.index} --text-field "
                f"{text_field} --vector-field {vector_field}` (add --follow to keep embedding new "
                "ones)"
            )
        if self.unverified:
            parts.append(
                f"{self.unverified} documents of {self.index!r} had their text changed and wait "
                "to be embedded again (their vectors may be of the old text): is `itlr backfill "
                "--follow` running?"
            )
        if self.failing:
            parts.append(
                f"{self.failing} documents of {self.index!r} could not be written by the "
                "follower (it retries them; its report names them)"
            )
        return "; ".join(parts) or None


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    truths: dict[str, float]
    text: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    # Fragments of the text field per field name (options.highlight).
    highlights: dict[str, list[str]] = field(default_factory=dict)
    # How the score was computed, as a tree that adds up to it (options.explain).
    explanation: dict[str, Any] | None = None
    # The sort values a `search_after` continues from (clusters).
    sort: list[Any] | None = None
    # Why the hard filter kept (or, in SearchResult.dropped, dropped) it (itlr.hard_filter;
    # options.explain with a hard filter).
    hard_filter: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": self.id,
            "score": self.score,
            "truths": self.truths,
            "text": self.text,
            "fields": self.fields,
        }
        if self.highlights:
            payload["highlights"] = self.highlights
        if self.explanation is not None:
            payload["explanation"] = self.explanation
        if self.sort is not None:
            payload["sort"] = self.sort
        if self.hard_filter is not None:
            payload["hard_filter"] = self.hard_filter
        return payload


@dataclass(frozen=True)
class Ranking:
    """Hits best first and what finding them noticed (a capped budget, an explanation that
    does not add up): what an engine's stages hand each other before it builds its result.

    exact: True when no document outside the scored ones can beat the k-th hit (exact mode, or
    knn mode with a certificate); False when the depth cap stopped the proof; None when it was
    not asked (a query that is not anchored)."""

    hits: list[Hit] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    exact: bool | None = None

    def noting(self, *warnings: str) -> Ranking:
        """The same hits and certificate with more warnings (this ranking when there are none)."""
        return replace(self, warnings=(*self.warnings, *warnings)) if warnings else self


@dataclass(frozen=True)
class SearchResult(Sequence[Hit]):
    """One search's answer, built once by the engine that ran it.

    query:    the query that ran (after any rewrite).
    hits:     best first (a list, as it has always been).
    warnings: what this search noticed: the query's own notes, a capped candidate budget, a
              filter on a field the index does not map, documents it could not score, a value
              cut to the size limit. Nothing accumulates on the index between searches.
    rewrite:  how a plain-language question became the query (`rewrite="rules"` / `"llm"`).
    exact:    whether the top k is provably the exact top k (see Ranking.exact).
    coverage: for a cluster index, how many of its documents have a text but no vector (no
              search can find them; itlr.engines.coverage); None for an embedded index.
    dropped:  with explain and a hard filter, the documents the filter removed from these
              hits' places (the same search without it ranked them here), best first, each
              with its would-be score and why (Hit.hard_filter); None otherwise.
    """

    query: Query
    hits: list[Hit]
    warnings: tuple[str, ...] = ()
    rewrite: RewriteResult | None = None
    exact: bool | None = None
    coverage: Coverage | None = None
    dropped: list[Hit] | None = None

    def __len__(self) -> int:
        return len(self.hits)

    @overload
    def __getitem__(self, index: int) -> Hit: ...

    @overload
    def __getitem__(self, index: slice) -> list[Hit]: ...

    def __getitem__(self, index: int | slice) -> Hit | list[Hit]:
        return self.hits[index]

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "query": str(self.query),
            "terms": list(self.query.terms),
            "warnings": list(self.warnings),
            "exact": self.exact,
            "hits": [h.to_dict() for h in self.hits],
        }
        if self.rewrite is not None:
            payload["rewrite"] = self.rewrite.to_dict()
        if self.dropped is not None:
            payload["dropped"] = [h.to_dict() for h in self.dropped]
        return payload
