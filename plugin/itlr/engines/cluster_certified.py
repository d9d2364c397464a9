"""knn mode on a cluster in rounds, each deeper only while the certificate (itlr.certificate)
does not yet prove the top k: what a round sends, and what its answers bound."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from itlr.certificate import (
    SearchBound,
    gave_up_warning,
    not_proved_warning,
    out_of_reach,
    proof_threshold,
    ranked_by_its_search,
    round_plan,
    search_bound,
    unseen_cannot_beat,
)
from itlr.engines.dialect import Dialect
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Ranking


class Responses(Protocol):
    """The backend's answers to search bodies (ClusterBackend._responses): with `guessed`, the
    remembered statistics the bodies were built from are checked by a count sent along."""

    def __call__(
        self,
        bodies: list[dict[str, Any]],
        query: Query | None = None,
        guessed: CorpusStats | None = None,
    ) -> list[dict[str, Any]]: ...


def certified_ranking(
    dialect: Dialect,
    responses_to: Responses,
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    lexical: CorpusStats | None,
    guessed: CorpusStats | None = None,
) -> Ranking:
    """knn mode in rounds (see itlr.certificate): each round is one `_msearch` of the logical
    query and, per kNN search, a probe for its farthest returned neighbour; a deeper round
    only when the bound does not prove the top k. A single positive term needs no probe where
    its search's own order proves the top k (`ranked_by_its_search`). Hybrid truths: every
    round also gathers the documents that mention a positive term, so an unseen one
    mentions none."""
    hybrid = options.truth.uses_lexical
    unmentioned = dict.fromkeys(query.positive_terms, 0.0) if hybrid else None
    unit = dict(zip(query.terms, np.asarray(term_vectors, dtype=np.float64), strict=True))
    bounds: list[SearchBound] = []
    rounds = options.candidate_rounds(limit=dialect.max_k)
    ranked = Ranking()
    proved = False
    previous: list[SearchBound] = []
    unproved = not_proved_warning(options.k, rounds[-1])
    order_may_prove = ranked_by_its_search(query, options.truth)
    for depth, budget in enumerate(rounds):
        round_options = replace(
            options, candidates=budget, max_candidates=None, plan=round_plan(options.plan)
        )
        request = dialect.search_request(
            query, term_vectors, round_options, lexical, mentions=hybrid
        )
        searches = request.searches
        probes = [dialect.probe_body(search, options.filter) for search in searches]
        # Each shard's search returns `budget` neighbours: the page's last hit ranks at most
        # `budget` when it is within the first page deep enough (none after search_after).
        by_order = (
            order_may_prove and options.search_after is None and budget >= options.from_ + options.k
        )
        # The first round carries the check of remembered statistics, if any.
        responses = responses_to([request.body, *([] if by_order else probes)], query, guessed)
        guessed = None
        ranked = dialect.hits(responses[0], query, term_vectors, options, lexical)
        threshold = proof_threshold([h.score for h in ranked.hits], options.k)
        if by_order:
            if threshold > -math.inf or dialect.returned_all(responses[0], budget):
                proved = True
                break
            # Fewer than k scored above 0: only a probe can show whether any is unseen.
            responses += responses_to(probes)
        current = [
            search_bound(search, unit, dialect.cosine(probe["hits"]["hits"][0]))
            if probe["hits"]["hits"]
            # fewer documents than the budget: the search returned them all
            else SearchBound(search.terms, 0.0, exhausted=True)
            for search, probe in zip(searches, responses[1:], strict=True)
        ]
        bounds += current
        proved = unseen_cannot_beat(
            query, bounds, threshold, options.ops, options.truth, unmentioned
        )
        if proved:
            break
        if depth and out_of_reach(
            query,
            previous,
            current,
            (rounds[depth - 1], budget),
            rounds[-1],
            threshold,
            options.ops,
            options.truth,
            unmentioned,
        ):
            unproved = gave_up_warning(options.k, budget, rounds[-1])
            break
        previous = current
    noted = (*request.warnings, *ranked.warnings)
    if proved:
        return Ranking(ranked.hits, noted, exact=True)
    return Ranking(ranked.hits, (*noted, unproved), exact=False)
