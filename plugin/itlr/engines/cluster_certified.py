"""knn mode on a cluster in rounds, each deeper only while the certificate (itlr.certificate)
does not yet prove the top k: what a round sends, and what its answers bound."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from itlr.certificate import (
    BoundsFall,
    Deeper,
    GiveUp,
    Round,
    SearchBound,
    certify_rounds,
    depth_to_prove,
    gave_up_warning,
    out_of_reach,
    proof_threshold,
    ranked_by_its_search,
    round_plan,
    search_bound,
)
from itlr.engines.dialect import Dialect, probe_half
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Ranking


class Responses(Protocol):
    """The searches' answers to search bodies (ClusterSearch._responses): with `guessed`, the
    remembered statistics the bodies were built from are checked by a count sent along."""

    def __call__(
        self,
        bodies: list[dict[str, Any]],
        query: Query | None = None,
        guessed: CorpusStats | None = None,
    ) -> list[dict[str, Any]]: ...


class ClusterRounds:
    """A cluster's rounds: each is one `_msearch` of the logical query and, per kNN search, a
    probe for the farther half of its neighbours (Dialect.probe_body). A single positive term
    needs no probe where its search's own order proves the top k (`ranked_by_its_search`).
    Hybrid truths: every round also gathers the documents that mention a positive term, so an
    unseen one mentions none. Rounds stop early, the first one included, when the bounds fall
    too slowly to prove the top k at the cap (`out_of_reach`)."""

    def __init__(
        self,
        dialect: Dialect,
        responses_to: Responses,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None,
        guessed: CorpusStats | None = None,
    ) -> None:
        self.dialect, self.responses_to, self.query = dialect, responses_to, query
        self.term_vectors, self.options, self.statistics = term_vectors, options, statistics
        # The first round carries the check of remembered statistics, if any.
        self.guessed = guessed
        self.rounds = options.candidate_rounds(limit=dialect.max_k)
        self.cap = self.rounds[-1]
        self.unit = dict(zip(query.terms, np.asarray(term_vectors, dtype=np.float64), strict=True))
        self.hybrid = options.truth.uses_lexical
        self.unmentioned = dict.fromkeys(query.positive_terms, 0.0) if self.hybrid else None
        self.order_may_prove = ranked_by_its_search(query, options.truth)
        self.previous: tuple[int, tuple[SearchBound, ...]] | None = None
        # The last round's bounds halfway down its searches, at that depth.
        self.halfway: tuple[int, tuple[SearchBound, ...]] | None = None

    def ranking(self) -> Ranking:
        """knn mode in rounds (itlr.certificate.certify_rounds), each one `_msearch`."""
        return certify_rounds(self, self.query, self.options, self.rounds)

    def gather(self, depth: int, budget: int) -> Round:
        dialect, options = self.dialect, self.options
        round_options = replace(
            options, candidates=budget, max_candidates=None, plan=round_plan(options.plan)
        )
        request = dialect.search_request(
            self.query, self.term_vectors, round_options, self.statistics, mentions=self.hybrid
        )
        searches = request.searches
        probes = [dialect.probe_body(search, options.filter) for search in searches]
        # Each shard's search returns `budget` neighbours: the page's last hit ranks at most
        # `budget` when it is within the first page deep enough (none after search_after).
        by_order = (
            self.order_may_prove
            and options.search_after is None
            and budget >= options.from_ + options.k
        )
        body = dialect.with_truth_fields(request.body, options)  # the hits' truths come back
        responses = self.responses_to(
            [body, *([] if by_order else probes)], self.query, self.guessed
        )
        self.guessed = None
        ranked = dialect.ranking(
            responses[0], self.query, self.term_vectors, options, self.statistics
        )
        ranked = Ranking(ranked.hits, (*request.warnings, *ranked.warnings), ranked.exact)
        if by_order:
            threshold = proof_threshold([h.score for h in ranked.hits], options.k)
            if threshold > -math.inf or dialect.returned_all(responses[0], budget):
                return Round(ranked, None, proved=True)
            # Fewer than k scored above 0: only a probe can show whether any is unseen.
            responses += self.responses_to(probes)
        bounds, halfway = [], []
        for search, asked, probe in zip(searches, probes, responses[1:], strict=True):
            hits = probe["hits"]["hits"]
            if len(hits) < asked["size"]:
                # fewer documents than the budget: the search returned them all
                bounds.append(SearchBound(search.terms, 0.0, exhausted=True))
                halfway.append(bounds[-1])
                continue
            bounds.append(search_bound(search, self.unit, dialect.cosine(hits[-1])))
            halfway.append(search_bound(search, self.unit, dialect.cosine(hits[0])))
        self.halfway = (probe_half(budget), tuple(halfway))
        return Round(ranked, tuple(bounds), self.unmentioned)

    def unproved(
        self, depth: int, budget: int, found: Round, threshold: float
    ) -> GiveUp | Deeper | None:
        """Give up where the bounds, falling on as they fell since the round before (or, after
        the first round, since halfway down its own searches), cannot prove the top k by the
        cap: a query that no round up to the cap would prove costs one round, not every one.
        Otherwise the next round goes about as deep as the fall says a proof needs."""
        current = found.bounds or ()
        previous, self.previous = self.previous or self.halfway, (budget, current)
        if previous is None or budget >= self.cap:
            return None
        options = self.options
        fall = BoundsFall(
            self.query,
            previous[1],
            current,
            (previous[0], budget),
            self.cap,
            threshold,
            options.ops,
            options.truth,
            self.unmentioned,
        )
        if out_of_reach(fall):
            return GiveUp(gave_up_warning(options.k, budget, self.cap))
        deeper = depth_to_prove(fall)
        return None if deeper is None else Deeper(deeper)
