"""A cluster index = the engine's dialect (itlr.engines.dialect: every request body) + a client
(itlr.engines.connection: I/O, errors as one line): index checks, counting, stored scripts, bulk ingestion, resumption
and search, alike for OpenSearch and Elasticsearch.

Each engine module subclasses `ClusterBackend` and fills in the small hooks where the clients
differ (how put_script is called, the client's NotFoundError) and names its dialect and its
`operations` (itlr.engines.operations: the requests ingestion, back-fill and the follower
compose, with the error context manager).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace
from functools import cached_property
from time import monotonic
from typing import Any, ClassVar

import numpy as np

from itlr.certificate import certifiable, unmentionable_reason
from itlr.engines.cluster_certified import certified_ranking
from itlr.engines.cluster_writes import ClusterWrites
from itlr.engines.connection import error_reason
from itlr.engines.coverage import Coverage, CoverageCache, coverage_body, parse_coverage
from itlr.engines.dialect import (
    Dialect,
    IndexLayout,
    StoredScript,
    counted_truths,
    filter_fields,
    lexical_stats,
    lexical_stats_body,
    mapped_fields,
)
from itlr.engines.integrity import ScriptMismatch, check_stored, is_script_error
from itlr.engines.operations import ClusterOperations
from itlr.engines.remembered_stats import RememberedStats, StaleStatistics
from itlr.errors import EngineError, IndexStateError
from itlr.lexical import CorpusStats, query_tokens
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.query import Query
from itlr.results import Hit, Ranking, SearchResult


class ClusterBackend(ClusterWrites):
    """A remote index on an OpenSearch-like cluster; subclasses supply the engine specifics."""

    engine: ClassVar[str]
    # The mapping type of the vector field, and the key holding its dimension count.
    vector_type: ClassVar[str]

    def __init__(
        self,
        client: Any,
        index: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
    ) -> None:
        self.client = client
        self.index = index
        self.model = model
        self.dims = dims
        self.layout = layout or IndexLayout()
        self.inline_script = inline_script
        self.url = url or "the cluster"
        # What opening the index noticed (about the index, never about one search: those travel
        # with their hits), each once, so the list is as long as the index has problems.
        self.warnings: list[str] = []
        self._scripts_ready = inline_script
        # The mapping's field paths, once check_index has read them.
        self.mapped: set[str] | None = None
        # Hybrid truths' statistics as last counted: a search may be built from them.
        self.remembered = RememberedStats()
        # An index itlr did not make (no `_meta.itlr`): documents keep their shape, and itlr's
        # fields are mapped before the first write. None until the mapping has been read.
        self.foreign: bool | None = None
        self.top_fields: frozenset[str] = frozenset()
        self._writes_ready = False
        # How many documents have a text but no vector, counted at most every few seconds.
        self.coverage_cache = CoverageCache()
        # The prompts the index records in _meta.itlr (None: it records none, not itlr's);
        # a new index is created with the ones set here (itlr.prompts).
        self.prompts: Prompts | None = None

    # -- engine hooks ----------------------------------------------------------------------

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Client exceptions become one actionable line."""
        return self.operations.errors(self.index)

    def _create_index(self, knn_engine: str | None) -> None:
        body = self.dialect.mapping(self.dims, self.model, knn_engine, self.prompts)
        self.operations.create_index(self.index, body["settings"], body["mappings"])

    def mapped_dims(self, vector: dict[str, Any]) -> Any:
        """The dimension count the mapping records, or None when it records none yet."""
        raise NotImplementedError

    def _check_vector(self, vector: dict[str, Any]) -> None:
        """Further engine-specific checks of the vector field's mapping."""

    def _not_found_error(self) -> type[Exception]:
        raise NotImplementedError

    def _put_script(self, script: StoredScript) -> None:
        raise NotImplementedError

    @cached_property
    def operations(self) -> ClusterOperations:
        """The cluster requests that ingestion, back-fill and the follower compose."""
        return self._make_operations()

    def _make_operations(self) -> ClusterOperations:
        raise NotImplementedError

    def _msearch(self, lines: list[dict[str, Any]]) -> Any:
        """`_msearch` of header/body line pairs."""
        raise NotImplementedError

    # -- index ---------------------------------------------------------------------------

    def ensure_index(self, knn_engine: str | None = None) -> bool:
        """Create the index from mappings/<engine>.json if missing; True if created."""
        with self._errors():
            if self.client.indices.exists(index=self.index):
                mappings = self._mappings()
                self._learn_shape(mappings)
                if self.foreign and self.layout.vector_field not in self.top_fields:
                    # Made elsewhere, no vector yet: mapped before the first write.
                    self._adopt_mapping(mappings.get("properties", {}))
                    return False
                self.check_index()
                return False
            self._create_index(knn_engine)
            self.foreign, self._writes_ready = False, True
            return True

    def _mappings(self) -> dict[str, Any]:
        return self.operations.mapping(self.index)

    def _learn_shape(self, mappings: dict[str, Any]) -> None:
        self.foreign = "itlr" not in (mappings.get("_meta") or {})
        self.top_fields = frozenset(mappings.get("properties", {}))

    def check_index(self) -> None:
        """Refuse an index whose vectors cannot match the model; warn about another model."""
        mappings = self._mappings()
        self._learn_shape(mappings)
        vector = mappings.get("properties", {}).get(self.layout.vector_field)
        if vector is None or vector.get("type") != self.vector_type:
            raise IndexStateError(
                f"index {self.index!r} has no {self.vector_type} field "
                f"{self.layout.vector_field!r}: name the right one with `vector_field`"
            )
        dims = self.mapped_dims(vector)
        if dims is not None and int(dims) != self.dims:
            raise IndexStateError(
                f"index {self.index!r} field {self.layout.vector_field!r} holds {dims}-dim vectors "
                f"but model {self.model!r} makes {self.dims}-dim ones: choose the matching `model`"
            )
        self._adopt_mapping(mappings.get("properties", {}))
        meta = mappings.get("_meta", {}).get("itlr")
        self.prompts = Prompts.from_meta(meta) if isinstance(meta, dict) else None
        meta_model = mappings.get("_meta", {}).get("itlr", {}).get("model")
        if meta_model and meta_model != self.model:
            self._warn(
                f"index {self.index!r} records model {meta_model!r} in _meta, but searching with "
                f"{self.model!r}: scores will be meaningless unless they share a vector space"
            )
        self._check_vector(vector)

    def _adopt_mapping(self, properties: dict[str, Any]) -> None:
        """Learn the mapped fields (filter warnings) and the tie-break sort key the index
        offers: itlr's `doc_id` where mapped, else what the engine can sort on."""
        self.mapped = mapped_fields(properties)
        if self.layout.tiebreak == "doc_id" and "doc_id" not in properties:
            tiebreak = type(self.dialect).fallback_tiebreak
            self.layout = replace(self.layout, tiebreak=tiebreak)
            # The cached dialect was built for the layout before the mapping was read.
            vars(self).pop("dialect", None)

    def filter_warnings(self, options: SearchOptions) -> list[str]:
        """A filter on a field the mapping lacks matches nothing: say so."""
        if not options.filter or self.mapped is None:
            return []
        return [
            f"the filter names field {name!r}, which index {self.index!r} does not map: "
            "it matches no document"
            for name in sorted(filter_fields(options.filter) - self.mapped)
        ]

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, stacklevel=3)

    def count(self) -> int:
        with self._errors():
            self.client.indices.refresh(index=self.index)
            return int(self.client.count(index=self.index)["count"])

    def refresh(self) -> None:
        self.remembered.written()  # what was written shows now: count again
        self.coverage_cache.forget()
        with self._errors():
            self.client.indices.refresh(index=self.index)

    # -- scripts -------------------------------------------------------------------------

    def install_scripts(self, repair: bool = True) -> list[str]:
        """Register the stored scripts (idempotent); returns the ids newly (re)installed. A
        stored script whose source is not the packaged file is overwritten when `repair`
        (what `itlr install` asks for), else refused with the command that repairs it."""
        not_found = self._not_found_error()
        installed = []
        with self._errors():
            for script in (self.dialect.score_script, self.dialect.exclude_script):
                try:
                    found = self.client.get_script(id=script.id)
                except not_found:
                    found = None
                if found is not None:
                    try:
                        check_stored(script, found, self.url)
                        continue
                    except ScriptMismatch:
                        if not repair:
                            raise
                self._put_script(script)
                installed.append(script.id)
        self._scripts_ready = True
        return installed

    # -- coverage ------------------------------------------------------------------------

    def coverage(self) -> Coverage:
        """How many documents have a text but no vector (no search can find them): one count,
        reused for a few seconds."""

        def count() -> Coverage:
            body = coverage_body(self.layout.vector_field, self.layout.text_field)
            with self._errors():
                response = self.client.search(index=self.index, body=body)
            return parse_coverage(self.index, dict(response))

        return self.coverage_cache.get(self.index, count)

    def _result(self, query: Query, ranked: Ranking) -> SearchResult:
        """The search's result, with the index's coverage and a warning when documents the hits
        could not come from exist; then no certificate holds: the top k is the exact top k of
        the embedded documents only."""
        coverage = self.coverage()
        warning = coverage.warning(self.layout.vector_field, self.layout.text_field)
        warnings, exact = ranked.warnings, ranked.exact
        if warning is not None:
            warnings, exact = (*warnings, warning), False if exact else exact
        return SearchResult(query, ranked.hits, warnings, exact=exact, coverage=coverage)

    # -- search --------------------------------------------------------------------------

    @cached_property
    def dialect(self) -> Dialect:
        """The engine's requests for this index (pure; no client), built on first use: the
        layout and the engine version do not change while the backend lives."""
        return self._make_dialect()

    def _make_dialect(self) -> Dialect:
        raise NotImplementedError

    def build_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        lexical: CorpusStats | None = None,
    ) -> dict[str, Any]:
        """The search body: script_score over kNN candidates (or every document). Hybrid
        truths need the index's statistics: given, or counted here (one request)."""
        if lexical is None and options.truth.uses_lexical:
            lexical = self.lexical_stats(query)
        options, _ = counted_truths(options, lexical, self.index)
        return self.dialect.search_body(query, term_vectors, options, lexical)

    def lexical_stats(self, query: Query) -> CorpusStats:
        """The index's statistics for the query's tokens (hybrid truths): one request."""
        asked = monotonic()
        with self._errors():
            # Statistics from some shards only would score unlike the embedded engine: refuse.
            response = self.client.search(
                index=self.index, body=lexical_stats_body(query), allow_partial_search_results=False
            )
        counted = lexical_stats(dict(response))
        self.remembered.record(counted, asked)
        return counted

    def search(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
    ) -> SearchResult:
        """The ranked hits and this search's warnings (a capped candidate budget).
        Hybrid truths: built from the remembered statistics where every token has been counted
        (checked by a count sent along unless counted moments ago,
        itlr.engines.remembered_stats), else counted first."""
        if not self._scripts_ready:
            self.install_scripts(repair=False)
        guessed = lexical = None
        if options.truth.uses_lexical:
            tokens = query_tokens(query.terms)
            guessed, recent = self.remembered.lookup(tokens)
            lexical = guessed or self.lexical_stats(query)
            if recent:
                guessed = None  # counted moments ago: no new count goes along
        try:
            ranked = self._counted_search(query, term_vectors, options, lexical, guessed)
        except StaleStatistics as stale:
            ranked = self._counted_search(query, term_vectors, options, stale.fresh, None)
        return self._result(query, ranked)

    def _counted_search(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        lexical: CorpusStats | None,
        guessed: CorpusStats | None,
    ) -> Ranking:
        options, noted = counted_truths(options, lexical, self.index)
        try:
            return self._search_once(query, term_vectors, options, lexical, guessed).noting(*noted)
        except EngineError as failed:
            if self.inline_script or not is_script_error(str(failed)):
                raise
            # Replaced or deleted since the check: refuse a foreign one, restore a missing one.
            if not self.install_scripts(repair=False):
                raise
        return self._search_once(query, term_vectors, options, lexical, guessed).noting(*noted)

    def _responses(
        self,
        bodies: list[dict[str, Any]],
        query: Query | None = None,
        guessed: CorpusStats | None = None,
    ) -> list[dict[str, Any]]:
        """The responses to these search bodies; with `guessed` (the statistics they were
        built from, remembered), a new count goes along and a different one raises
        StaleStatistics."""
        if guessed is None or query is None:
            if len(bodies) == 1:
                with self._errors():
                    # A ranking from the shards that happened to answer (a node dying
                    # mid-search) looks like any other: refuse it, so the client's retry asks
                    # the re-routed cluster.
                    response = self.client.search(
                        index=self.index, body=bodies[0], allow_partial_search_results=False
                    )
                return [dict(response)]
            return self._multi_search(bodies)
        asked = monotonic()
        counted, *responses = self._multi_search([lexical_stats_body(query), *bodies])
        fresh = lexical_stats(counted)
        self.remembered.record(fresh, asked)
        if fresh != guessed:
            raise StaleStatistics(fresh)
        return responses

    def _search_once(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        lexical: CorpusStats | None,
        guessed: CorpusStats | None = None,
    ) -> Ranking:
        # Asked for a proof: a knn query the certificate covers once the mentions are gathered;
        # given one unless too many documents mention its terms to gather them.
        asked = options.mode == "knn" and certifiable(query, options.ops, options.truth, True)
        too_many = unmentionable_reason(query, options, lexical)
        if not asked or too_many:
            request = self.dialect.search_request(query, term_vectors, options, lexical)
            exact = True if options.mode == "exact" or not query.has_positive_term else None
            unproved: tuple[str, ...] = ()
            if asked and too_many:
                exact, unproved = False, (too_many,)
            (response,) = self._responses([request.body], query, guessed)
            found = self.dialect.hits(response, query, term_vectors, options, lexical)
            warnings = (
                *request.warnings,
                *found.warnings,
                *unproved,
                *self.filter_warnings(options),
            )
            return Ranking(found.hits, warnings, exact=exact)
        certified = certified_ranking(
            self.dialect, self._responses, query, term_vectors, options, lexical, guessed
        )
        return certified.noting(*self.filter_warnings(options))

    def _multi_search(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several search bodies in one `_msearch`; any refused one fails the whole call (a
        ranking from the shards that answered is refused too)."""
        header = {"index": self.index, "allow_partial_search_results": False}
        lines = [line for body in bodies for line in (header, body)]
        with self._errors():
            responses = self._msearch(lines)["responses"]
        for response in responses:
            if "error" in response:
                raise EngineError(
                    f"{self.url} refused a search of {self.index!r}: "
                    f"{error_reason(response, response)}"
                )
        return [dict(r) for r in responses]

    def search_vector(
        self, vector: np.ndarray, k: int, filter: dict | None = None, candidates: int | None = None
    ) -> list[Hit]:
        """Plain kNN on one vector: the dense baseline. `candidates`: neighbours the graph search
        gathers before the top k are kept (default k)."""
        (response,) = self._responses([self.dialect.dense_body(vector, k, filter, candidates)])
        return self.dialect.hits(response).hits
