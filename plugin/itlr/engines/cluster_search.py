"""The searches of a cluster index, a collaborator a ClusterBackend (itlr.engines.cluster) holds
as `searches`: the request built by its dialect, the hybrid truths' statistics counted or
remembered (itlr.engines.remembered_stats) and checked by a count sent along, a stored script
restored when it went missing, knn mode's certified rounds (itlr.engines.cluster_certified), and
`_msearch` in the engine's call shape (the backend's `specifics`)."""

from __future__ import annotations

import contextlib
from time import monotonic
from typing import Any, Protocol

import numpy as np

from itlr.certificate import certifiable, unmentionable_reason
from itlr.engines.cluster_certified import ClusterRounds
from itlr.engines.cluster_client import ClientTransport, run
from itlr.engines.cluster_reads import count_statistics
from itlr.engines.connection import error_reason
from itlr.engines.dialect import Dialect
from itlr.engines.integrity import is_script_error
from itlr.engines.layout import IndexLayout
from itlr.engines.lexical_requests import (
    counted_truths,
    read_term_statistics,
    term_statistics_request,
)
from itlr.engines.remembered_stats import RememberedStats, StaleStatistics
from itlr.errors import EngineError
from itlr.lexical import CorpusStats, query_tokens
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Coverage, Hit, Ranking, SearchResult


class SearchedIndex(Protocol):
    """What the searches read of the index they search: the backend's public state (its dialect
    and layout change once, when the mapping is read), its script checks and its coverage."""

    client: Any
    index_name: str
    url: str
    layout: IndexLayout
    inline_script: bool
    remembered: RememberedStats

    @property
    def dialect(self) -> Dialect: ...

    @property
    def specifics(self) -> MultiSearch: ...

    @property
    def transport(self) -> ClientTransport: ...

    def errors(self) -> contextlib.AbstractContextManager[None]: ...

    def verify_integrity(self) -> None: ...

    def integrity_unsure(self) -> None: ...

    def install_scripts(self, repair: bool = True) -> list[str]: ...

    def filter_warnings(self, options: SearchOptions) -> list[str]: ...

    def coverage(self) -> Coverage: ...


class MultiSearch(Protocol):
    """The engine's call shape of `_msearch` (itlr.engines.cluster.EngineSpecifics)."""

    def msearch(self, client: Any, lines: list[dict[str, Any]]) -> Any: ...


class ClusterSearch:
    """The searches of one cluster index, built with the index they search."""

    def __init__(self, index: SearchedIndex) -> None:
        self.index = index

    def build_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None = None,
    ) -> dict[str, Any]:
        """The search body: script_score over kNN candidates (or every document). Hybrid
        truths need the index's statistics: given, or counted here (one request)."""
        if statistics is None and options.truth.uses_lexical:
            statistics = self.term_statistics(query)
        options, _ = counted_truths(options, statistics, self.index.index_name)
        return self.index.dialect.search_body(query, term_vectors, options, statistics)

    def term_statistics(self, query: Query) -> CorpusStats:
        """The index's statistics for the query's tokens (hybrid truths): one request."""
        asked = monotonic()
        with self.index.errors():
            operation = count_statistics(self.index.index_name, query)
            counted = run(operation, self.index.transport)
        self.index.remembered.record(counted, asked)
        return counted

    def _result(self, query: Query, ranked: Ranking) -> SearchResult:
        """The search's result, with the index's coverage and a warning when documents the hits
        could not come from exist; then no certificate holds: the top k is the exact top k of
        the embedded documents only."""
        coverage = self.index.coverage()
        warning = coverage.warning(self.index.layout.vector_field, self.index.layout.text_field)
        warnings, exact = ranked.warnings, ranked.exact
        if warning is not None:
            warnings, exact = (*warnings, warning), False if exact else exact
        return SearchResult(query, ranked.hits, warnings, exact=exact, coverage=coverage)

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
        try:
            self.index.verify_integrity()
            return self._search(query, term_vectors, options)
        except EngineError:
            self.index.integrity_unsure()
            raise

    def _search(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> SearchResult:
        guessed = statistics = None
        if options.truth.uses_lexical:
            tokens = query_tokens(query.terms)
            guessed, recent = self.index.remembered.lookup(tokens)
            statistics = guessed or self.term_statistics(query)
            if recent:
                guessed = None  # counted moments ago: no new count goes along
        try:
            ranked = self._counted_search(query, term_vectors, options, statistics, guessed)
        except StaleStatistics as stale:
            ranked = self._counted_search(query, term_vectors, options, stale.fresh, None)
        return self._result(query, ranked)

    def _counted_search(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None,
        guessed: CorpusStats | None,
    ) -> Ranking:
        options, noted = counted_truths(options, statistics, self.index.index_name)
        try:
            return self._search_once(query, term_vectors, options, statistics, guessed).noting(
                *noted
            )
        except EngineError as failed:
            if self.index.inline_script or not is_script_error(str(failed)):
                raise
            # Replaced or deleted since the check: refuse a foreign one, restore a missing one.
            if not self.index.install_scripts(repair=False):
                raise
        return self._search_once(query, term_vectors, options, statistics, guessed).noting(*noted)

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
                with self.index.errors():
                    # A ranking from the shards that happened to answer (a node dying
                    # mid-search) looks like any other: refuse it, so the client's retry asks
                    # the re-routed cluster.
                    response = self.index.client.search(
                        index=self.index.index_name,
                        body=bodies[0],
                        allow_partial_search_results=False,
                    )
                return [dict(response)]
            return self._multi_search(bodies)
        asked = monotonic()
        counted, *responses = self._multi_search([term_statistics_request(query), *bodies])
        fresh = read_term_statistics(counted)
        self.index.remembered.record(fresh, asked)
        if fresh != guessed:
            raise StaleStatistics(fresh)
        return responses

    def _search_once(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None,
        guessed: CorpusStats | None = None,
    ) -> Ranking:
        # Asked for a proof: a knn query the certificate covers once the mentions are gathered;
        # given one unless too many documents mention its terms to gather them.
        asked = options.mode == "knn" and certifiable(query, options.ops, options.truth, True)
        too_many = unmentionable_reason(query, options, statistics)
        if not asked or too_many:
            request = self.index.dialect.search_request(query, term_vectors, options, statistics)
            exact = True if options.mode == "exact" or not query.has_positive_term else None
            unproved: tuple[str, ...] = ()
            if asked and too_many:
                exact, unproved = False, (too_many,)
            body = self.index.dialect.with_truth_fields(request.body, options)  # hits' truths
            (response,) = self._responses([body], query, guessed)
            found = self.index.dialect.ranking(response, query, term_vectors, options, statistics)
            warnings = (
                *request.warnings,
                *found.warnings,
                *unproved,
                *self.index.filter_warnings(options),
            )
            return Ranking(found.hits, warnings, exact=exact)
        certified = ClusterRounds(
            self.index.dialect, self._responses, query, term_vectors, options, statistics, guessed
        ).ranking()
        return certified.noting(*self.index.filter_warnings(options))

    def _multi_search(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several search bodies in one `_msearch`; any refused one fails the whole call (a
        ranking from the shards that answered is refused too)."""
        header = {"index": self.index.index_name, "allow_partial_search_results": False}
        lines = [line for body in bodies for line in (header, body)]
        with self.index.errors():
            responses = self.index.specifics.msearch(self.index.client, lines)["responses"]
        for response in responses:
            if "error" in response:
                raise EngineError(
                    f"{self.index.url} refused a search of {self.index.index_name!r}: "
                    f"{error_reason(response, response)}"
                )
        return [dict(r) for r in responses]

    def search_vector(
        self,
        vector: np.ndarray,
        k: int,
        filter: dict[str, Any] | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        """Plain kNN on one vector: the dense baseline. `candidates`: neighbours the graph search
        gathers before the top k are kept (default k)."""
        (response,) = self._responses(
            [self.index.dialect.dense_body(vector, k, filter, candidates)]
        )
        return self.index.dialect.ranking(response).hits
