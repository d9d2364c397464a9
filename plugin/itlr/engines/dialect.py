"""Engine dialects: the requests of an OpenSearch or Elasticsearch index that need no server.
`Dialect` builds the logical query's body (script_score over the candidate plan's kNN clauses),
the dense kNN body, the index mapping and the script install requests, and reads hits; the engine
modules subclass it for their kNN clause shapes. The parts it builds from live beside it, one
idea each: the index layout and mapping (layout), the Painless scripts (painless), the params
they read (script_params), hybrid truths' statistics and mention clauses (lexical_requests),
bulk actions (bulk) and reading a response into hits (response).

Nothing here talks to a server: `itlr translate`, the query-bar proxy and the cluster backends
(itlr.engines.cluster, which add the connection) all build requests through a dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from itlr.candidates import CandidateSearch, PlannedSearch, plan_searches
from itlr.engines.layout import (
    IndexLayout,
    derive_mapping,
)
from itlr.engines.lexical_requests import (
    MENTION_SCORE,
    mention_clauses,
)
from itlr.engines.painless import StoredScript
from itlr.engines.response import ranking_from_response
from itlr.engines.script_params import exclusion_params, packed_floats, script_params
from itlr.hard_filter import EXCLUDED_SCORE_BASE
from itlr.lexical import LENGTH_FIELD, LEXICAL_FIELDS, TOKENS_FIELD, CorpusStats
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.query import Query
from itlr.query_memo import QueryMemo
from itlr.renamed import renamed
from itlr.results import Ranking

# The request builder's own names; what it is built from lives in the modules it imports.
__all__ = ["Dialect", "RequestShape", "SearchRequest"]


@dataclass(frozen=True)
class SearchRequest:
    """One logical search: its body, the kNN searches in it (none when every document is
    scored), and what it quietly changes (a capped budget)."""

    body: dict[str, Any]
    searches: tuple[CandidateSearch, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class RequestShape:
    """A logical search's request but for what its term vectors decide (the kNN clauses, the
    packed vectors, the hard filter's params): built once per query and options
    (Dialect.search_request). Shared by every request built from it: never changed."""

    knn: bool  # kNN clauses gather the candidates; otherwise every document is scored
    planned: tuple[PlannedSearch, ...]  # the kNN searches, before the vectors
    params: dict[str, Any]  # the score script's, but `vectors`
    filter: list[dict[str, Any]]
    excluded: tuple[str, ...]  # terms the hard filter drops documents for
    must_not: list[dict[str, Any]]  # exclude_lexical's phrases
    mentions: list[dict[str, Any]]  # clauses gathering the documents that mention a term
    mention: dict[str, Any] | None  # the unkeyed documents' mention marker
    sort: tuple[dict[str, Any], ...]
    rest: dict[str, Any]  # _source, from, search_after, highlight


def probe_half(budget: int) -> int:
    """The rank halfway down a search of `budget` neighbours, where its probe starts."""
    return max(1, budget // 2)


class Dialect:
    """The requests of one engine for one index layout; subclasses give the kNN clause."""

    engine: ClassVar[str]
    score_script: ClassVar[StoredScript]
    exclude_script: ClassVar[StoredScript]
    title: ClassVar[str]
    # What an index made elsewhere (no `doc_id`) is tie-broken on.
    fallback_tiebreak: ClassVar[str | None] = None
    # The engine's largest k for one kNN search, and the request field it limits.
    max_k: ClassVar[int] = 10_000
    limit_name: ClassVar[str] = "k"

    def __init__(self, layout: IndexLayout | None = None, inline_script: bool = False) -> None:
        self.layout = layout or IndexLayout()
        self.inline_script = inline_script

    # -- engine hooks ----------------------------------------------------------------------

    def knn_clause(self, search: CandidateSearch, filter: dict[str, Any] | None) -> dict[str, Any]:
        """One kNN query clause gathering `search.budget` neighbours of `search.vector`."""
        raise NotImplementedError

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict[str, Any] | None, candidates: int | None
    ) -> dict[str, Any]:
        """Plain kNN on one vector, top k of `candidates` (default k) neighbours."""
        raise NotImplementedError

    def explained_source(self) -> dict[str, Any]:
        """`_source` that returns the hits' vectors, for per-term truths."""
        return {"includes": ["*"]}

    def check_knn_mode(self) -> None:
        """Refuse knn mode where the engine cannot gather candidates inside a query."""

    def probe_body(self, search: CandidateSearch, filter: dict[str, Any] | None) -> dict[str, Any]:
        """The farther half of the neighbours one kNN search returns, scores only: the last
        one's score bounds every document the search did not return (itlr.certificate), and
        the first one's is the bound the search gave at half its depth, so how fast the bound
        falls is known after one round. With k per shard the search returns up to shards x k
        documents, and the k-th best of them is at least every shard's own k-th: still a
        bound. Fewer hits than asked for: the search returned every document it could."""
        half = probe_half(search.budget)
        return {
            "size": search.budget - half + 1,
            "from": half - 1,
            "query": self.knn_clause(search, filter),
            "_source": False,
            "stored_fields": "_none_",
        }

    def returned_all(self, response: dict[str, Any], budget: int) -> bool:
        """Whether a logical query over one kNN search of `budget` neighbours matched fewer
        than that (counted exactly): the search returned every document it could, as a probe
        that finds no neighbour at `budget` shows."""
        total = response["hits"].get("total") or {}
        return total.get("relation") == "eq" and int(total.get("value", budget)) < budget

    def cosine(self, hit: dict[str, Any]) -> float:
        """A kNN hit's cosine from its score: both engines score cosine as (1 + cos) / 2."""
        return 2.0 * float(hit["_score"]) - 1.0

    # -- requests --------------------------------------------------------------------------

    def planned_searches(self, query: Query, options: SearchOptions) -> tuple[PlannedSearch, ...]:
        """The query's kNN searches before the term vectors (itlr.candidates)."""
        return plan_searches(query, options.candidate_budget, options.plan, limit=self.max_k)

    def _capped(self, searches: tuple[CandidateSearch, ...]) -> tuple[str, ...]:
        """What the planned searches quietly change: a budget above the engine's largest k."""
        largest = max((s.budget for s in searches), default=0)
        if largest <= self.max_k:
            return ()
        return (
            f"a candidate search of {largest} neighbours exceeds {self.title}'s "
            f"{self.limit_name} limit; using {self.max_k}",
        )

    def search_body(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None = None,
    ) -> dict[str, Any]:
        """The logical query: script_score over kNN candidates (or every document); `statistics`:
        the index's statistics, for hybrid truths."""
        return self.search_request(query, term_vectors, options, statistics).body

    def search_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None = None,
        mentions: bool = False,
    ) -> SearchRequest:
        """The search body, its kNN searches and this search's warnings, from one plan.
        `mentions`: knn mode also gathers every document that mentions a positive term (a
        token of it among its lexical fields), so that hybrid truths can be certified.

        What does not depend on the term vectors is worked out once per query object and
        options, statistics and `mentions` (`RequestShape`): a query sent again builds only its
        vectors' parts. Bodies share the shape's clauses: a caller may set a body's own keys
        (and its sort, a list of its own), not change what they hold."""
        term_vectors = np.asarray(term_vectors, dtype=np.float32)
        dims = int(term_vectors.shape[-1]) if term_vectors.size else 0
        shape = self._shapes.get(
            query,
            (options, statistics, mentions, dims),
            lambda: self._shape(query, options, statistics, mentions, dims),
        )
        warnings: tuple[str, ...] = ()
        searches: tuple[CandidateSearch, ...] = ()
        must_not: list[dict[str, Any]] = []
        if shape.excluded and options.hard is not None:
            # One clause for every excluded term: each document's vector is read once, and
            # only for documents the rest of the query matches (itlr.hard_filter).
            must_not.append(
                {
                    "script_score": {
                        "query": {"match_all": {}},
                        "script": self.exclude_script.reference(
                            exclusion_params(query, term_vectors, options, self.layout),
                            self.inline_script,
                        ),
                        "min_score": EXCLUDED_SCORE_BASE + options.hard.threshold,
                    }
                }
            )
        inner: dict[str, Any] = {
            "filter": list(shape.filter),
            "must_not": must_not + shape.must_not,
        }
        # Without a positive term nothing gathers candidates: every document is scored.
        if shape.knn:
            searches = tuple(planned.of(term_vectors) for planned in shape.planned)
            warnings = self._capped(searches)
            inner["should"] = [self.knn_clause(s, options.filter) for s in searches]
            inner["should"] += shape.mentions
            inner["minimum_should_match"] = 1
        else:
            inner["must"] = [{"match_all": {}}]
        scored: dict[str, Any] = {"bool": inner}
        if shape.mention is not None:
            scored = {"bool": {"must": [scored], "should": [shape.mention]}}
        params = {**shape.params, "vectors": packed_floats(term_vectors)}
        body: dict[str, Any] = {
            "size": options.k,
            "query": {
                "script_score": {
                    "query": scored,
                    "script": self.score_script.reference(params, self.inline_script),
                }
            },
            # A list of its own: a caller may add to the sort (the query-bar proxy does).
            "sort": list(shape.sort),
            **shape.rest,
        }
        return SearchRequest(body, searches, warnings)

    @cached_property
    def _shapes(self) -> QueryMemo[RequestShape]:
        return QueryMemo()

    def _shape(
        self,
        query: Query,
        options: SearchOptions,
        statistics: CorpusStats | None,
        mentions: bool,
        dims: int,
    ) -> RequestShape:
        knn = options.mode == "knn" and query.has_positive_term
        if knn:
            self.check_knn_mode()
        lexical_must_not = (
            [{"match_phrase": {self.layout.text_field: t}} for t in query.excluded_terms]
            if options.exclude_lexical
            else []
        )
        params = {**script_params(query, options, self.layout, statistics), "dims": dims}
        mention = None
        unkeyed = options.truth.uses_lexical and (statistics is None or statistics.unkeyed > 0)
        tokens = mention_clauses(query.terms) if unkeyed else []
        if tokens:
            # Where some documents were written before the token keys, loading their keyword
            # values is most of a hybrid script's lexical cost (about 29 us a document): a
            # document that mentions no query token gets MENTION_SCORE added to nothing, and
            # the script reads its tokens only when _score says it mentions one. Keys load
            # cheaply: without such documents the clause would cost more than it saves.
            mention = {
                "constant_score": {"filter": {"bool": {"should": tokens}}, "boost": MENTION_SCORE}
            }
            params["mention_score"] = MENTION_SCORE
        rest: dict[str, Any] = {
            # With explain the hits' vectors come back so truths can be shown; ClusterBackend
            # asks for them on its own searches too (`with_truth_fields`), never otherwise.
            "_source": self.explained_source() if options.explain else self.source(options),
        }
        if options.from_:
            rest["from"] = options.from_
        if options.search_after is not None:
            rest["search_after"] = list(options.search_after)
        if options.highlight and query.positive_terms:
            rest["highlight"] = self.highlight(query.positive_terms)
        return RequestShape(
            knn=knn,
            planned=self.planned_searches(query, options) if knn else (),
            params=params,
            filter=[options.filter] if options.filter else [],
            excluded=query.excluded_terms if options.hard_filter is not None else (),
            must_not=lexical_must_not,
            mentions=mention_clauses(query.positive_terms) if knn and mentions else [],
            mention=mention,
            # Sorting on _score first already fills each hit's _score: `track_scores` would
            # only make the engine do more work for every search, and add nothing.
            sort=tuple(self.sort()),
            rest=rest,
        )

    def sort(self) -> list[dict[str, Any]]:
        tiebreak = self.layout.tiebreak
        return [{"_score": "desc"}] + ([{tiebreak: "asc"}] if tiebreak else [])

    @property
    def unshown(self) -> list[str]:
        """Fields no hit shows: the vector and what itlr stores for hybrid truths (read from
        doc values by the script; in _source they only add to every response)."""
        return [self.layout.vector_field, *LEXICAL_FIELDS]

    def source(self, options: SearchOptions, needed: Sequence[str] = ()) -> Any:
        """The hits' _source: every field but `unshown` (the hash is dropped when hits are
        read), or the chosen ones; and the `needed` ones (hits are read without them)."""
        hidden = [name for name in self.unshown if name not in needed]
        if options.source_fields is None:
            return {"excludes": hidden} if hidden else True
        if not options.source_fields:
            return {"includes": list(needed)} if needed else False
        return {"includes": [*options.source_fields, *needed], "excludes": hidden}

    def with_truth_fields(self, body: dict[str, Any], options: SearchOptions) -> dict[str, Any]:
        """A logical search body whose hits also bring back what their per-term truths are
        computed from (the vector; for hybrid truths the stored tokens and length), so that
        hits carry truths on a cluster as on the embedded engine: ClusterBackend's own searches.
        The request shown to others (itlr translate, the query-bar proxy) stays without."""
        if options.explain:
            return body  # its _source has them already
        token_fields = [TOKENS_FIELD, LENGTH_FIELD] if options.truth.uses_lexical else []
        return {**body, "_source": self.source(options, [self.layout.vector_field, *token_fields])}

    def highlight(self, words: Sequence[str]) -> dict[str, Any]:
        """The engine's highlighter on the text field, driven by the positive terms' words
        (the logical query itself is a script the highlighter cannot read)."""
        return {
            "fields": {self.layout.text_field: {}},
            "highlight_query": {"match": {self.layout.text_field: " ".join(words)}},
        }

    def script_installs(self) -> list[tuple[str, dict[str, Any]]]:
        """(path, body) of the PUT requests registering the stored scripts."""
        return [(f"_scripts/{s.id}", s.body()) for s in (self.score_script, self.exclude_script)]

    def mapping(
        self, dims: int, model: str, knn_engine: str | None = None, prompts: Prompts | None = None
    ) -> dict[str, Any]:
        return derive_mapping(self.engine, self.layout, dims, model, knn_engine, prompts)

    def ranking(
        self,
        response: dict[str, Any],
        query: Query | None = None,
        term_vectors: np.ndarray | None = None,
        options: SearchOptions | None = None,
        statistics: CorpusStats | None = None,
    ) -> Ranking:
        """The ranking a search response holds: its hits (with truths when the search asked
        for them) and their warnings."""
        return ranking_from_response(
            response, query, term_vectors, options, self.layout, statistics
        )

    hits = renamed("ranking", "Dialect.hits", " (it returns a Ranking)")
