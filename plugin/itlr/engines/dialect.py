"""Engine dialects: everything about an OpenSearch or Elasticsearch request that needs no
server. `Dialect` builds the logical query's body (script_score over the candidate plan's kNN
clauses), the dense kNN body, the index mapping, the script install requests, and reads hits;
the engine modules subclass it for their kNN clause shapes. Also shared: the params the
Painless scripts read, the index layout from mappings/, bulk actions and stored-script ids.

Nothing here talks to a server: `itlr translate`, the query-bar proxy and the cluster backends
(itlr.engines.cluster, which add the connection) all build requests through a dialect.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from itlr.candidates import CandidateSearch, plan_candidates
from itlr.options import Hit, SearchOptions
from itlr.query import Query
from itlr.resources import mapping_file, painless_file

SCRIPT_FORMAT = 1


@dataclass(frozen=True)
class IndexLayout:
    """Where a remote index keeps what itlr needs."""

    vector_field: str = "embedding"
    text_field: str = "text"
    metadata_field: str = "metadata"


@dataclass(frozen=True)
class StoredScript:
    """A fixed Painless file registered under an id that changes whenever its source does."""

    name: str
    source: str

    @classmethod
    def load(cls, name: str, filename: str) -> StoredScript:
        return cls(name, painless_file(filename).read_text())

    @property
    def id(self) -> str:
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:10]
        return f"itlr-{self.name}-v{SCRIPT_FORMAT}-{digest}"

    def reference(self, params: dict[str, Any], inline: bool) -> dict[str, Any]:
        """The `script` object of a request: the stored id, or the fixed source inline."""
        if inline:
            return {"source": self.source, "lang": "painless", "params": params}
        return {"id": self.id, "params": params}

    def body(self) -> dict[str, Any]:
        return {"script": {"lang": "painless", "source": self.source}}


def derive_mapping(
    engine: str, layout: IndexLayout, dims: int, model: str, knn_engine: str | None = None
) -> dict[str, Any]:
    """The index body from mappings/<engine>.json with field names, dims and model filled in."""
    template = json.loads(mapping_file(engine).read_text())
    body = copy.deepcopy(template)
    properties = body["mappings"]["properties"]
    vector = properties.pop("embedding")
    text = properties.pop("text")
    metadata = properties.pop("metadata")
    if "dimension" in vector:
        vector["dimension"] = dims
    if "dims" in vector:
        vector["dims"] = dims
    if knn_engine and "method" in vector:
        vector["method"]["engine"] = knn_engine
    properties[layout.vector_field] = vector
    properties[layout.text_field] = text
    properties[layout.metadata_field] = metadata
    meta = body["mappings"]["_meta"]["itlr"]
    meta.update(
        model=model, dims=dims, vector_field=layout.vector_field, text_field=layout.text_field
    )
    return body


def score_params(
    query: Query, term_vectors: np.ndarray, options: SearchOptions, layout: IndexLayout
) -> dict[str, Any]:
    """Everything the scoring script reads; the program is the one numpy runs."""
    return {
        "field": layout.vector_field,
        "vectors": np.asarray(term_vectors, dtype=np.float32).tolist(),
        **query.program.to_params(),
        **options.ops.to_params(),
        **options.truth.to_params(query.terms),
    }


def exclusion_params(
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    layout: IndexLayout,
    term: str,
) -> dict[str, Any]:
    index = query.terms.index(term)
    truth = options.truth.to_params(query.terms)
    return {
        "field": layout.vector_field,
        "vector": np.asarray(term_vectors[index], dtype=np.float32).tolist(),
        "truth": truth["truth"],
        "tau": truth["tau"][index],
        "lam": truth["lam"][index],
    }


def bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    fields = fields or [{} for _ in ids]
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                "doc_id": doc_id,
                layout.text_field: text,
                layout.vector_field: vector.tolist(),
                layout.metadata_field: extra,
            },
        }
        for doc_id, text, vector, extra in zip(ids, texts, vectors, fields, strict=True)
    ]


def hits_from_response(
    response: dict[str, Any],
    query: Query | None,
    term_vectors: np.ndarray | None,
    options: SearchOptions | None,
    layout: IndexLayout,
) -> list[Hit]:
    """Hits with per-term truths when the response carries the hits' vectors (--explain)."""
    hits = []
    for raw in response["hits"]["hits"]:
        source = raw.get("_source") or {}
        truths: dict[str, float] = {}
        vector = source.get(layout.vector_field)
        if vector is not None and query is not None and term_vectors is not None and options:
            unit = np.asarray(vector, dtype=np.float32)
            unit = unit / (np.linalg.norm(unit) or 1.0)
            cosines = (np.asarray(term_vectors, dtype=np.float32) @ unit)[None, :]
            values = options.truth.apply(cosines, query.terms)[0]
            truths = {t: float(v) for t, v in zip(query.terms, values, strict=True)}
        hits.append(
            Hit(
                id=str(raw["_id"]),
                score=_score(raw),
                truths=truths,
                text=str(source.get(layout.text_field, "")),
                fields=dict(source.get(layout.metadata_field) or {}),
            )
        )
    return hits


def _score(raw: dict[str, Any]) -> float:
    """A hit's score: `_score`, or the first sort value when the engine left `_score` out (the
    first sort key of a logical query is the score)."""
    if raw.get("_score") is not None:
        return float(raw["_score"])
    sort = raw.get("sort") or [0.0]
    return float(sort[0]) if isinstance(sort[0], int | float) else 0.0


@dataclass(frozen=True)
class SearchRequest:
    """One logical search: its body, the kNN searches in it (none when every document is
    scored), and what it quietly changes (a capped budget)."""

    body: dict[str, Any]
    searches: tuple[CandidateSearch, ...]
    warnings: tuple[str, ...]


class Dialect:
    """The requests of one engine for one index layout; subclasses give the kNN clause."""

    engine: ClassVar[str]
    score_script: ClassVar[StoredScript]
    exclude_script: ClassVar[StoredScript]
    title: ClassVar[str]
    # The engine's largest k for one kNN search, and the request field it limits.
    max_k: ClassVar[int] = 10_000
    limit_name: ClassVar[str] = "k"

    def __init__(self, layout: IndexLayout | None = None, inline_script: bool = False) -> None:
        self.layout = layout or IndexLayout()
        self.inline_script = inline_script

    # -- engine hooks ----------------------------------------------------------------------

    def knn_clause(self, search: CandidateSearch, filter: dict | None) -> dict[str, Any]:
        """One kNN query clause gathering `search.budget` neighbours of `search.vector`."""
        raise NotImplementedError

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict | None, candidates: int | None
    ) -> dict[str, Any]:
        """Plain kNN on one vector, top k of `candidates` (default k) neighbours."""
        raise NotImplementedError

    def explained_source(self) -> dict[str, Any]:
        """`_source` that returns the hits' vectors, for per-term truths."""
        return {"includes": ["*"]}

    def check_knn_mode(self) -> None:
        """Refuse knn mode where the engine cannot gather candidates inside a query."""

    def probe_body(self, search: CandidateSearch, filter: dict | None) -> dict[str, Any]:
        """The farthest of the neighbours one kNN search returns: its score bounds every
        document the search did not return (itlr.certificate). With k per shard the search
        returns up to shards x k documents, and the k-th best of them is at least every shard's
        own k-th: still a bound."""
        return {
            "size": 1,
            "from": search.budget - 1,
            "query": self.knn_clause(search, filter),
            "_source": False,
        }

    def cosine(self, hit: dict[str, Any]) -> float:
        """A kNN hit's cosine from its score: both engines score cosine as (1 + cos) / 2."""
        return 2.0 * float(hit["_score"]) - 1.0

    # -- requests --------------------------------------------------------------------------

    def candidate_searches(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> tuple[CandidateSearch, ...]:
        return plan_candidates(
            query, term_vectors, options.candidate_budget, options.plan, limit=self.max_k
        )

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
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> dict[str, Any]:
        """The logical query: script_score over kNN candidates (or every document)."""
        return self.search_request(query, term_vectors, options).body

    def search_request(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> SearchRequest:
        """The search body, its kNN searches and this search's warnings, from one plan."""
        warnings: tuple[str, ...] = ()
        searches: tuple[CandidateSearch, ...] = ()
        field = self.layout.vector_field
        term_vectors = np.asarray(term_vectors, dtype=np.float32)
        user_filter = [options.filter] if options.filter else []
        must_not: list[dict[str, Any]] = []
        if options.hard_filter is not None:
            for term in query.excluded_terms:
                params = exclusion_params(query, term_vectors, options, self.layout, term)
                must_not.append(
                    {
                        "script_score": {
                            "query": {"match_all": {}},
                            "script": self.exclude_script.reference(params, self.inline_script),
                            "min_score": options.hard_filter,
                        }
                    }
                )
        if options.exclude_lexical:
            must_not += [
                {"match_phrase": {self.layout.text_field: t}} for t in query.excluded_terms
            ]
        inner: dict[str, Any] = {"filter": user_filter, "must_not": must_not}
        # Without a positive term nothing gathers candidates: every document is scored.
        if options.mode == "knn" and query.has_positive_term:
            self.check_knn_mode()
            searches = self.candidate_searches(query, term_vectors, options)
            warnings = self._capped(searches)
            inner["should"] = [self.knn_clause(s, options.filter) for s in searches]
            inner["minimum_should_match"] = 1
        else:
            inner["must"] = [{"match_all": {}}]
        params = score_params(query, term_vectors, options, self.layout)
        body = {
            "size": options.k,
            "query": {
                "script_score": {
                    "query": {"bool": inner},
                    "script": self.score_script.reference(params, self.inline_script),
                }
            },
            # Sorting on _score first fills each hit's _score; `track_scores` would add nothing
            # but cost (1.5 ms of a 8 ms query at 10k documents, docs/benchmarks.md).
            "sort": [{"_score": "desc"}, {"doc_id": "asc"}],
            # With explain the hits' vectors come back so truths can be shown; never otherwise.
            "_source": self.explained_source() if options.explain else {"excludes": [field]},
        }
        return SearchRequest(body, searches, warnings)

    def script_installs(self) -> list[tuple[str, dict[str, Any]]]:
        """(path, body) of the PUT requests registering the stored scripts."""
        return [(f"_scripts/{s.id}", s.body()) for s in (self.score_script, self.exclude_script)]

    def mapping(self, dims: int, model: str, knn_engine: str | None = None) -> dict[str, Any]:
        return derive_mapping(self.engine, self.layout, dims, model, knn_engine)

    def hits(
        self,
        response: dict[str, Any],
        query: Query | None = None,
        term_vectors: np.ndarray | None = None,
        options: SearchOptions | None = None,
    ) -> list[Hit]:
        return hits_from_response(response, query, term_vectors, options, self.layout)
