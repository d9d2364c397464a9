"""Engine dialects: everything about an OpenSearch or Elasticsearch request that needs no
server. `Dialect` builds the logical query's body (script_score over the candidate plan's kNN
clauses), the dense kNN body, the index mapping, the script install requests, and reads hits;
the engine modules subclass it for their kNN clause shapes. Also shared: the params the
Painless scripts read, the index layout from mappings/, bulk actions and stored-script ids.

Nothing here talks to a server: `itlr translate`, the query-bar proxy and the cluster backends
(itlr.engines.cluster, which add the connection) all build requests through a dialect.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from itlr.candidates import CandidateSearch, PlannedSearch, plan_searches
from itlr.composition import explain
from itlr.errors import ConfigurationError
from itlr.explain import disagreement
from itlr.fingerprint import HASH_FIELD
from itlr.lexical import (
    K1,
    LENGTH_FIELD,
    LEXICAL_FIELDS,
    TOKEN_KEYS_FIELD,
    TOKENS_FIELD,
    B,
    CorpusStats,
    bm25_truth,
    lexical_fields,
    query_tokens,
    term_tokens,
    token_key,
)
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.query import Query
from itlr.query_memo import QueryMemo
from itlr.resources import mapping_file, painless_file
from itlr.results import Hit, Ranking
from itlr.scoring import TRUTH_CODES

SCRIPT_FORMAT = 1


@dataclass(frozen=True)
class IndexLayout:
    """Where a remote index keeps what itlr needs."""

    vector_field: str = "embedding"
    text_field: str = "text"
    metadata_field: str = "metadata"
    # The sort key after _score that makes the order total (search_after pages rely on it):
    # itlr's own `doc_id`, or for an index made elsewhere what the engine can sort on
    # (`Dialect.fallback_tiebreak`); None sorts on _score alone.
    tiebreak: str | None = "doc_id"


# What a Painless file's `{{placeholder}}`s become on each engine: fixed words, never user text.
# OpenSearch's knn_vector doc values give the float[] as `.value`, Elasticsearch's dense_vector
# as `.vectorValue`.
PAINLESS_DIALECTS: dict[str, dict[str, str]] = {
    "opensearch": {"vector_value": "value"},
    "elasticsearch": {"vector_value": "vectorValue"},
}
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render_painless(source: str, engine: str) -> str:
    """One Painless source for both engines, with its placeholders filled for ``engine``."""
    words = PAINLESS_DIALECTS[engine]

    def fill(match: re.Match[str]) -> str:
        if match.group(1) not in words:
            raise ValueError(f"unknown Painless placeholder {match.group(0)} for {engine}")
        return words[match.group(1)]

    return _PLACEHOLDER.sub(fill, source)


@dataclass(frozen=True)
class StoredScript:
    """A fixed Painless file registered under an id that changes whenever its source does."""

    name: str
    source: str

    @classmethod
    def load(cls, name: str, filename: str, engine: str) -> StoredScript:
        """``scripts/painless/<filename>`` rendered for ``engine`` (see `render_painless`)."""
        return cls(name, render_painless(painless_file(filename).read_text(), engine))

    @cached_property  # hashed once: every search names it
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
    engine: str,
    layout: IndexLayout,
    dims: int,
    model: str,
    knn_engine: str | None = None,
    prompts: Prompts | None = None,
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
    # Upserts compare this hash, never vectors (itlr.fingerprint); stored, not searched.
    properties[HASH_FIELD] = {"type": "keyword", "index": False}
    meta = body["mappings"]["_meta"]["itlr"]
    meta.update(
        model=model,
        dims=dims,
        vector_field=layout.vector_field,
        text_field=layout.text_field,
        **(prompts or Prompts()).to_meta(),
    )
    return body


def score_params(
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    layout: IndexLayout,
    lexical: CorpusStats | None = None,
) -> dict[str, Any]:
    """Everything the scoring script reads; the program is the one numpy runs. Hybrid truths
    also need the index's statistics for the query's tokens (`lexical_stats_body`)."""
    vectors = np.asarray(term_vectors, dtype=np.float32)
    return {
        **script_params(query, options, layout, lexical),
        "vectors": packed_floats(vectors),
        "dims": int(vectors.shape[-1]) if vectors.size else 0,
    }


def script_params(
    query: Query,
    options: SearchOptions,
    layout: IndexLayout,
    lexical: CorpusStats | None = None,
) -> dict[str, Any]:
    """`score_params` but the term vectors and their dimensions: the same for every search of
    a query with the same options and statistics."""
    params = {
        "field": layout.vector_field,
        **query.program.to_params(),
        **options.ops.to_params(),
        **options.truth.to_params(query.terms),
    }
    if options.truth.uses_lexical:
        params.update(lexical_params(query, options, lexical))
    return params


def packed_floats(values: np.ndarray) -> str:
    """Floats for a script's params as one string: float32, little-endian, base64, in row-major
    order. The engine parses a JSON list of numbers into one boxed object per number for every
    search, before the script runs; the scripts decode this string once per segment, to the same
    float32 values. It takes a quarter of the list's bytes (docs/benchmarks.md, "Latency")."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")


def lexical_params(
    query: Query, options: SearchOptions, lexical: CorpusStats | None
) -> dict[str, Any]:
    if lexical is None:
        raise ConfigurationError(
            "hybrid truth values need the index's token statistics: count them on the cluster "
            "(`lexical_stats_body`, read by `lexical_stats`) and pass them as `lexical`"
        )
    weights = options.truth.lexical_shares(query.terms, query.negated_terms)
    tokens = [term_tokens(term, lexical) for term in query.terms]
    return {
        "keys_field": TOKEN_KEYS_FIELD,
        "tokens_field": TOKENS_FIELD,
        "length_field": LENGTH_FIELD,
        "k1": K1,
        "b": B,
        "avgdl": lexical.average_length,
        "lex_weight": list(weights),
        "lex_tokens": [[f"{token} " for token in t.tokens] for t in tokens],
        "lex_keys": [[token_key(token) for token in t.tokens] for t in tokens],
        "lex_shares": [list(t.weights) for t in tokens],
    }


def lexical_stats_body(query: Query) -> dict[str, Any]:
    """One aggregation over the whole index (every shard, live documents only): how many
    documents carry lexical fields, their summed length, how many have no token keys, and each
    query token's document frequency. Read the response with `lexical_stats`."""
    filters = {token: mention_clause(token) for token in query_tokens(query.terms)}
    aggs: dict[str, Any] = {
        "documents": {"value_count": {"field": LENGTH_FIELD}},
        "length": {"sum": {"field": LENGTH_FIELD}},
        "unkeyed": {
            "filter": {
                "bool": {
                    "filter": [{"exists": {"field": TOKENS_FIELD}}],
                    "must_not": [{"exists": {"field": TOKEN_KEYS_FIELD}}],
                }
            }
        },
    }
    if filters:
        aggs["df"] = {"filters": {"filters": filters}}
    return {"size": 0, "track_total_hits": False, "aggs": aggs}


def counted_truths(
    options: SearchOptions, lexical: CorpusStats | None, index: str
) -> tuple[SearchOptions, tuple[str, ...]]:
    """The options to score with once the statistics are counted, and what to say about it.
    Hybrid truths (the default) on an index where no document carries the lexical fields (made
    elsewhere, or back-filled before the fields existed) would give every document a lexical
    truth of 0 and only shrink the positive terms: such an index is scored with cosine truths
    (clamp), and the search says so. One rule for every front end, decided by the counted
    statistics themselves."""
    if not options.truth.uses_lexical or lexical is None or lexical.documents:
        return options, ()
    cosine = replace(options, truth=replace(options.truth, kind="clamp"))
    return cosine, (
        f"no document of {index!r} has the lexical fields ({TOKENS_FIELD}, {LENGTH_FIELD}), so "
        "hybrid truth values (the default) cannot read what documents mention: scored with "
        "cosine truths (clamp); `itlr backfill` adds the fields",
    )


# What a document that mentions a query token adds to the candidate query's score (hybrid
# truths): far above what the kNN and mention clauses can sum to (at most one per clause).
MENTION_SCORE = 1_000_000.0


def mention_clause(token: str) -> dict[str, Any]:
    """The clause matching the documents that hold this token: the keyword values are
    "<token> <count>", so a prefix "<token> " finds the token whatever its count."""
    return {"prefix": {TOKENS_FIELD: f"{token} "}}


def mention_clauses(terms: Sequence[str]) -> list[dict[str, Any]]:
    """One `mention_clause` per distinct token of these terms."""
    return [mention_clause(token) for token in query_tokens(terms)]


def lexical_stats(response: dict[str, Any]) -> CorpusStats:
    aggs = response["aggregations"]
    buckets = aggs.get("df", {}).get("buckets", {})
    return CorpusStats(
        documents=int(aggs["documents"]["value"]),
        total_length=round(aggs["length"]["value"] or 0),
        df={token: int(bucket["doc_count"]) for token, bucket in buckets.items()},
        unkeyed=int(aggs.get("unkeyed", {}).get("doc_count", 0)),
    )


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
        "vector": packed_floats(term_vectors[index]),
        # The hard filter judges the cosine evidence: hybrid truths clamp (composition.compose).
        "truth": TRUTH_CODES["clamp"] if options.truth.uses_lexical else truth["truth"],
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
    hashes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    fields = fields or [{} for _ in ids]
    hashes = hashes or ["" for _ in ids]
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
                **lexical_fields(text),
                **({HASH_FIELD: digest} if digest else {}),
            },
        }
        for doc_id, text, vector, extra, digest in zip(
            ids, texts, vectors, fields, hashes, strict=True
        )
    ]


def shaped_bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
    hashes: Sequence[str],
) -> list[dict[str, Any]]:
    """Bulk actions for an index itlr did not make: each document keeps its own shape, its
    fields at the top of `_source` where the team's other writes put them, the id in `_id`
    alone, and beside them only the text and what itlr adds (vector, hash, lexical fields),
    each mapped before the first write (itlr.engines.foreign)."""
    fields = fields or [{} for _ in ids]
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                **extra,
                layout.text_field: text,
                layout.vector_field: vector.tolist(),
                **lexical_fields(text),
                HASH_FIELD: digest,
            },
        }
        for doc_id, text, vector, extra, digest in zip(
            ids, texts, vectors, fields, hashes, strict=True
        )
    ]


def own_fields(source: dict[str, Any], layout: IndexLayout) -> dict[str, Any]:
    """A document's own fields in an index made elsewhere: every top-level field of _source
    but the text and what itlr writes beside it."""
    skip = {layout.text_field, layout.vector_field, HASH_FIELD, *LEXICAL_FIELDS}
    return {k: v for k, v in source.items() if k not in skip}


def hits_from_response(
    response: dict[str, Any],
    query: Query | None,
    term_vectors: np.ndarray | None,
    options: SearchOptions | None,
    layout: IndexLayout,
    lexical: CorpusStats | None = None,
) -> Ranking:
    """Hits with per-term truths and an explanation tree when the response carries the hits'
    vectors (--explain); hybrid truths also read the hits' stored tokens with the statistics
    the search used. A hit whose explanation does not add up to the engine's score is a
    warning."""
    hits = []
    warnings = []
    for raw in response["hits"]["hits"]:
        source = raw.get("_source") or {}
        truths: dict[str, float] = {}
        explanation = None
        vector = source.get(layout.vector_field)
        if vector is not None and query is not None and term_vectors is not None and options:
            unit = np.asarray(vector, dtype=np.float32)
            unit = unit / (np.linalg.norm(unit) or 1.0)
            cosines = (np.asarray(term_vectors, dtype=np.float32) @ unit)[None, :]
            found = _lexical_row(source, query, options, lexical)
            values = options.truth.apply(
                cosines,
                query.terms,
                found,
                options.truth.lexical_weights(query.terms, query.negated_terms),
            )[0]
            truths = {t: float(v) for t, v in zip(query.terms, values, strict=True)}
            if options.explain:
                explanation = explain(query, cosines, options.ops, options.truth, found)[0]
                warning = disagreement(str(raw["_id"]), _score(raw), explanation)
                if warning:
                    warnings.append(warning)
        hits.append(
            Hit(
                id=str(raw["_id"]),
                score=_score(raw),
                truths=truths,
                text=str(source.get(layout.text_field, "")),
                fields=_fields(source, layout),
                highlights={k: list(v) for k, v in (raw.get("highlight") or {}).items()},
                sort=raw.get("sort"),
                explanation=explanation,
            )
        )
    return Ranking(hits, tuple(warnings))


def _lexical_row(
    source: dict[str, Any],
    query: Query,
    options: SearchOptions,
    lexical: CorpusStats | None,
) -> np.ndarray | None:
    """The hit's lexical truth per term (1 x terms) from its stored tokens, for hybrid truths."""
    if not options.truth.uses_lexical:
        return None
    values = [str(v).rsplit(" ", 1) for v in source.get(TOKENS_FIELD) or []]
    counts = {token: int(count) for token, count in values}
    stats = lexical or CorpusStats(0, 0, {})
    found = [
        bm25_truth(
            counts, int(source.get(LENGTH_FIELD) or 0), term_tokens(t, stats), stats.average_length
        )
        for t in query.terms
    ]
    return np.array([found])


def _fields(source: dict[str, Any], layout: IndexLayout) -> dict[str, Any]:
    """itlr's own documents keep their fields under the metadata field; an index made
    elsewhere has them at the top of _source: all of them but the text, vector and hash."""
    metadata = source.get(layout.metadata_field)
    if layout.tiebreak == "doc_id" and isinstance(metadata, dict):
        return dict(metadata)
    return own_fields(source, layout)


_BOOL_KEYS = ("must", "filter", "should", "must_not")
_LEAF_QUERIES = frozenset(
    {"term", "terms", "range", "match", "match_phrase", "prefix", "wildcard", "regexp", "fuzzy"}
)
_LEAF_OPTIONS = frozenset({"boost", "_name"})


def filter_fields(clause: Any) -> set[str]:
    """The field names a filter clause reads (term, range, exists, ... inside bools)."""
    names: set[str] = set()
    if isinstance(clause, list):
        for item in clause:
            names |= filter_fields(item)
    elif isinstance(clause, dict):
        for key, value in clause.items():
            if key == "bool" and isinstance(value, dict):
                for part in _BOOL_KEYS:
                    names |= filter_fields(value.get(part, []))
            elif key == "exists" and isinstance(value, dict) and "field" in value:
                names.add(str(value["field"]))
            elif key in _LEAF_QUERIES and isinstance(value, dict):
                names |= {str(k) for k in value if k not in _LEAF_OPTIONS}
            elif key in ("nested", "constant_score") and isinstance(value, dict):
                names |= filter_fields(value.get("query", value.get("filter", {})))
    return names


def mapped_fields(properties: dict[str, Any], prefix: str = "") -> set[str]:
    """Every field path a mapping defines, sub-fields (`body.keyword`) included."""
    names: set[str] = set()
    for name, spec in properties.items():
        path = prefix + name
        names.add(path)
        if isinstance(spec, dict):
            names |= mapped_fields(spec.get("properties", {}), path + ".")
            names |= mapped_fields(spec.get("fields", {}), path + ".")
    return names


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
        lexical: CorpusStats | None = None,
    ) -> dict[str, Any]:
        """The logical query: script_score over kNN candidates (or every document); `lexical`:
        the index's statistics, for hybrid truths."""
        return self.search_request(query, term_vectors, options, lexical).body

    def search_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        lexical: CorpusStats | None = None,
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
            (options, lexical, mentions, dims),
            lambda: self._shape(query, options, lexical, mentions, dims),
        )
        warnings: tuple[str, ...] = ()
        searches: tuple[CandidateSearch, ...] = ()
        must_not = [
            {
                "script_score": {
                    "query": {"match_all": {}},
                    "script": self.exclude_script.reference(
                        exclusion_params(query, term_vectors, options, self.layout, term),
                        self.inline_script,
                    ),
                    "min_score": options.hard_filter,
                }
            }
            for term in shape.excluded
        ]
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
        lexical: CorpusStats | None,
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
        params = {**script_params(query, options, self.layout, lexical), "dims": dims}
        mention = None
        unkeyed = options.truth.uses_lexical and (lexical is None or lexical.unkeyed > 0)
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
            # With explain the hits' vectors come back so truths can be shown; never otherwise.
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
            # Sorting on _score first fills each hit's _score; `track_scores` would add nothing
            # but cost (1.5 ms of a 8 ms query at 10k documents, docs/benchmarks.md).
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

    def source(self, options: SearchOptions) -> Any:
        """The hits' _source: every field but `unshown` (the hash is dropped when hits are
        read), or the chosen ones."""
        if options.source_fields is None:
            return {"excludes": self.unshown}
        if not options.source_fields:
            return False
        return {"includes": list(options.source_fields), "excludes": self.unshown}

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

    def hits(
        self,
        response: dict[str, Any],
        query: Query | None = None,
        term_vectors: np.ndarray | None = None,
        options: SearchOptions | None = None,
        lexical: CorpusStats | None = None,
    ) -> Ranking:
        return hits_from_response(response, query, term_vectors, options, self.layout, lexical)
