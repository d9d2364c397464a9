"""knn mode on the embedded engine: candidate rounds, the certificate that no unseen row beats
the k-th hit (itlr.certificate), and, on the HNSW graph, the probe that routes a query to a
deeper round or to a pass over every row.

The rounds read the engine only through `KnnBackend`; itlr.engines.embedded.EmbeddedBackend is
the one backend that has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from itlr.candidates import CandidateSearch, plan_candidates
from itlr.certificate import (
    BoundsFall,
    Round,
    SearchBound,
    certifiable,
    certify_rounds,
    out_of_reach,
    round_plan,
    search_bound,
)
from itlr.engines.embedded_lexical import LexicalStream
from itlr.engines.kernels import cosine_matrix
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Ranking

# How much deeper than a round's kNN budget the lexical stream of hybrid truths goes. Its rows
# cost a sort of the term's postings and their scoring, not a graph walk, so going deeper is
# cheap; and the deeper it goes, the lower the limit it sets on the lexical truth of the rows
# it left out, so the first round proves more queries instead of scoring every row
# (docs/benchmarks.md, "Certificate").
LEXICAL_DEPTH = 10
# On the graph, the certificate first scores this-th part of the round's budget. That probe
# proves most single terms by itself, and its bounds at half and at full depth tell whether the
# whole round could prove the rest; queries it says cannot be proved go straight to the pass
# over every row instead of paying for a deep walk first (docs/benchmarks.md, "Certificate").
PROBE_SHARE = 5
# Below this many rows a certifiable query with several positive terms is scored over every row
# at once, with no probe. Such a probe seldom sends the query to a round, and what a round saves
# on a smaller index is less than the probe costs every query it sends to the pass anyway. A
# pass grows with the rows while a probe's walk does not, so the probe earns more the larger
# the index; this is about where it stops costing more than it saves (docs/benchmarks.md,
# "Certificate").
ROUTING_MIN_ROWS = 1_000_000


class KnnBackend(Protocol):
    """What the rounds read from the embedded backend (itlr.engines.embedded): its public
    row-level reads (whether it searches the graph, the graph's neighbours, rows scored into a
    ranking, the rows' vectors and lexical truths), which tests also wrap to count graph walks
    and scored rows."""

    routing_min_rows: int

    def uses_ann(self) -> bool: ...

    def ann_lists(self, queries: np.ndarray, budgets: Sequence[int]) -> list[np.ndarray]: ...

    def scored_rows(
        self,
        query: Query,
        term_vectors: np.ndarray,
        rows: np.ndarray,
        options: SearchOptions,
        exact: bool | None,
        lexical_truths: np.ndarray | None = None,
    ) -> Ranking: ...

    def row_vectors(self, rows: np.ndarray) -> np.ndarray: ...

    def lexical_truths(self, rows: np.ndarray, terms: tuple[str, ...]) -> np.ndarray: ...


def knn_rounds(
    backend: KnnBackend,
    query: Query,
    term_vectors: np.ndarray,
    rows: np.ndarray,
    options: SearchOptions,
) -> Ranking:
    """knn mode: score the candidates; for a query the certificate applies to, prove that no
    other row can beat the k-th hit. Without the graph (a small index, or a filter) such a
    query is scored over every row: a search there already reads every row's cosines, so
    the pass costs what one round does and proves the top k by construction. On the graph,
    when the cap allows more than one round: a probe of a
    `PROBE_SHARE`-th of the budget, the whole round only where the probe's bounds,
    extrapolated, say it could prove the top k, and otherwise the query scored over every
    row: one pass over the vectors costs less than graph walks thousands deep, and does not
    trust the graph's recall (docs/benchmarks.md, "Certificate"). A single positive term's
    probe reads the nearest part of one walk as deep as the round and may prove; with
    several, the probe walks only its own depth and decides where to go, and below
    `routing_min_rows` rows there is no probe: every row is scored."""
    if not certifiable(query, options.ops, options.truth, mentions_gathered=True):
        searches = plan_candidates(query, term_vectors, options.candidate_budget, options.plan)
        found = candidate_lists(backend, rows, searches, options.filter)
        return backend.scored_rows(
            query, term_vectors, np.unique(np.concatenate(found)), options, None
        )
    if options.filter is not None or not backend.uses_ann():
        return backend.scored_rows(query, term_vectors, rows, options, exact=True)
    rounds = options.candidate_rounds()
    if len(rounds) > 1:
        probe = max(options.k, rounds[0] // PROBE_SHARE)
        rounds = [probe, rounds[0]] if probe < rounds[0] else rounds[:1]
    # With several positive terms no search ranks rows by the score itself, so the probe
    # seldom proves and most such queries end in the pass: the probe walks only as deep as
    # itself, to decide, and proves nothing; the round walks deep if it comes to one.
    routing = len(rounds) > 1 and len(query.positive_terms) > 1
    if routing and len(rows) < backend.routing_min_rows:
        return backend.scored_rows(query, term_vectors, rows, options, exact=True)
    source = EmbeddedRounds(backend, query, term_vectors, rows, options, rounds, routing)
    return certify_rounds(source, query, options, rounds)


class EmbeddedRounds:
    """The embedded engine's rounds on the HNSW graph: one walk as deep as the last round,
    each round reading the nearest of its neighbours and scoring the rows found; with hybrid
    truths each positive term's rows of highest lexical truth beside them. An unproved round
    goes deeper only where its bounds, extrapolated, say the next round could prove;
    otherwise every row is scored."""

    def __init__(
        self,
        backend: KnnBackend,
        query: Query,
        term_vectors: np.ndarray,
        rows: np.ndarray,
        options: SearchOptions,
        rounds: Sequence[int],
        routing: bool,
    ) -> None:
        self.backend, self.query, self.term_vectors = backend, query, term_vectors
        self.rows, self.options, self.rounds = rows, options, rounds
        self.routing = routing
        self.unit = dict(zip(query.terms, term_vectors, strict=True))
        self.seen = np.zeros(0, dtype=np.int64)
        # Hybrid truths: beside the kNN searches, each positive term's rows of highest lexical
        # truth, LEXICAL_DEPTH times as deep as the round's budget (no graph walk: a sort of
        # the term's postings), so an unseen row's lexical truth is bounded too.
        self.stream = (
            LexicalStream(
                backend.lexical_truths(rows, query.terms), rows, query.terms, query.positive_terms
            )
            if options.truth.uses_lexical
            else None
        )
        self.deepest: list[np.ndarray] | None = None
        # The last round's searches, per search its cosines halfway down and last, and the
        # bounds they give.
        self.searches: Sequence[CandidateSearch] = []
        self.cosines: list[tuple[float, float]] = []
        self.bounds: tuple[SearchBound, ...] = ()

    def gather(self, depth: int, budget: int) -> Round:
        backend, query, term_vectors, rows = self.backend, self.query, self.term_vectors, self.rows
        plan = round_plan(self.options.plan)
        searches = plan_candidates(query, term_vectors, budget, plan)
        # A routing walk's bounds decide where to go and prove nothing, now or later.
        trusted = not (self.routing and depth == 0)
        if not trusted:
            found = graph_lists(backend, searches)
        else:
            # One graph search as deep as the last round serves every round, the probe
            # reading the nearest of its neighbours: as sure of them as the round is, and
            # the round needs no second walk.
            if self.deepest is None:
                last = (
                    searches
                    if budget == self.rounds[-1]
                    else plan_candidates(query, term_vectors, self.rounds[-1], plan)
                )
                self.deepest = graph_lists(backend, last)
            found = [near[: s.budget] for near, s in zip(self.deepest, searches, strict=True)]
        seen = np.union1d(self.seen, np.concatenate(found))
        limits: dict[str, float] | None = None
        if self.stream is not None:
            mentioning, limits = self.stream.top(budget * LEXICAL_DEPTH)
            seen = np.union1d(seen, mentioning)
        self.seen = seen
        self.searches = searches
        self.cosines = [
            depth_cosines(backend, s, hits) for s, hits in zip(searches, found, strict=True)
        ]
        self.bounds = bounds = tuple(
            search_bound(s, self.unit, last)
            if len(hits) < len(rows)
            else SearchBound(s.terms, 0.0, exhausted=True)
            for s, hits, (_, last) in zip(searches, found, self.cosines, strict=True)
        )
        # The stream holds every row's lexical truths (rows ascending, seen among them).
        lexical_truths = (
            self.stream.truths[np.searchsorted(rows, seen)] if self.stream is not None else None
        )
        ranked = backend.scored_rows(
            query, term_vectors, seen, self.options, exact=True, lexical_truths=lexical_truths
        )
        return Round(ranked, bounds if trusted else None, limits)

    def unproved(self, depth: int, budget: int, found: Round, threshold: float) -> Ranking | None:
        options = self.options
        if options.candidate_cap <= budget:
            return None
        if depth + 1 < len(self.rounds):
            # A routing walk's bounds too: they prove nothing, but say where to go.
            current = list(self.bounds)
            halfway = [
                replace(bound, limit=search_bound(s, self.unit, half).limit)
                for s, bound, (half, _) in zip(self.searches, current, self.cosines, strict=True)
            ]
            if round_could_prove(
                self.query,
                (halfway, current),
                budget,
                self.rounds[depth + 1],
                threshold,
                options,
                self.stream,
            ):
                return None
        lexical_truths = self.stream.truths if self.stream is not None else None
        return self.backend.scored_rows(
            self.query,
            self.term_vectors,
            self.rows,
            options,
            exact=True,
            lexical_truths=lexical_truths,
        )


def round_could_prove(
    query: Query,
    bounds: tuple[list[SearchBound], list[SearchBound]],
    budget: int,
    deeper: int,
    threshold: float,
    options: SearchOptions,
    stream: LexicalStream | None,
) -> bool:
    """Whether a round of `deeper` neighbours per term could prove the top k, judged from
    the searches of `budget` read at half and at full depth (`bounds`), falling onwards
    twice as fast as they just did (itlr.certificate.out_of_reach), with the lexical
    stream taken as deep as that round would take it."""
    ahead = stream.limits(deeper * LEXICAL_DEPTH) if stream is not None else None
    return not out_of_reach(
        BoundsFall(
            query,
            *bounds,
            (max(1, budget // 2), budget),
            deeper,
            threshold,
            options.ops,
            options.truth,
            ahead,
        )
    )


def depth_cosines(
    backend: KnnBackend, search: CandidateSearch, rows: np.ndarray
) -> tuple[float, float]:
    """The cosines with the search's vector of its returned row halfway down and of its
    farthest: every row it did not return is at most the second close (for a graph search:
    as far as the graph's recall goes); the first is the bound it would have given at half
    the depth."""
    if not len(rows):
        return 1.0, 1.0
    found = cosine_matrix(backend.row_vectors(rows), search.vector[np.newaxis])[:, 0]
    # The (m // 2)-th closest of m, at ascending position m - m // 2.
    middle = min(len(found) - 1, len(found) - len(found) // 2)
    return float(np.partition(found, middle)[middle]), float(found.min())


def candidate_lists(
    backend: KnnBackend,
    rows: np.ndarray,
    searches: Sequence[CandidateSearch],
    filter: dict[str, Any] | None,
) -> list[np.ndarray]:
    """Each search's `budget` nearest rows among `rows`: from the graph when it is in use
    (nearest first), else by an exact scan."""
    if filter is None and backend.uses_ann():
        return graph_lists(backend, searches)
    return knn_lists(backend, rows, searches)


def graph_lists(backend: KnnBackend, searches: Sequence[CandidateSearch]) -> list[np.ndarray]:
    """Each search's `budget` nearest rows on the HNSW graph, nearest first."""
    return backend.ann_lists(np.stack([s.vector for s in searches]), [s.budget for s in searches])


def knn_lists(
    backend: KnnBackend, rows: np.ndarray, searches: Sequence[CandidateSearch]
) -> list[np.ndarray]:
    """Each search's `budget` nearest rows (exact cosines)."""
    if all(s.budget >= len(rows) for s in searches):
        return [rows for _ in searches]
    cosines = cosine_matrix(backend.row_vectors(rows), np.stack([s.vector for s in searches]))
    return [
        rows[np.argpartition(-cosines[:, j], s.budget - 1)[: s.budget]]
        if s.budget < len(rows)
        else rows
        for j, s in enumerate(searches)
    ]
