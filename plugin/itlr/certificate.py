"""A certificate that knn mode's top k is exact: no document outside the candidates can beat it.

knn mode scores exactly the union of a few kNN searches' neighbours. A document that no search
returned is not scored, but the searches still say something about it: a search with unit
vector v that returned its `budget` nearest neighbours, the last at cosine c, proves that every
document it did not return has cosine at most c with v. For a search over terms G (one term, or
the normalised weighted sum of a conjunction's vectors, see itlr.candidates) that is a linear
bound on the document's cosines with those terms:

    sum over t in G of w_t cos(d, t)  <=  c * |sum over t in G of w_t t|

With hybrid truths a term's lexical truth is bounded too, by a lexical stream beside the kNN
searches: an engine that gathered the documents with the largest lexical truths for the term
(the embedded engine: the top rows by lexical truth, ten times as deep as the round's kNN
budget) knows that an unseen document's is at most the last one gathered, 0 when it gathered
every document that mentions the term (a cluster), and anything in [0, 1] otherwise.

So the best an unseen document can do is the maximum of the composed score over the cosines
allowed by all the searches' bounds, terms that no search bounds (those only under a NOT)
anywhere in [-1, 1]. If that maximum is at most the k-th best candidate's score, the top k is
exact (this is the threshold algorithm of Fagin, Lotem and Naor, with linear bounds instead of
one per list).

The maximum is not computed, only compared with the k-th score, by branch and bound over boxes
of the searched terms' cosines: a box whose score range (itlr.interval: interval arithmetic
over the program, so no monotonicity is assumed, and weighted AND terms are covered) ends at
most at the threshold holds no better document, a box that violates a bound at its lower corner
holds no document at all, and the others are split. A box whose lower corner (a point the bounds
allow; unsearched terms at -1) composes above the threshold ends the proof at once: some unseen
document might score that much, so the searches must go deeper; so does a box smaller than
`RESOLUTION`.

The proof is as exact as the kNN searches are: exact scans give a proof; HNSW searches give one
up to the graph's own recall. (The embedded engine without its graph scores every row instead:
an exact scan reads every row's cosine anyway.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Protocol

import numpy as np

from itlr.candidates import CandidateSearch, Plan
from itlr.composition import compose
from itlr.interval import program_range
from itlr.lexical import CorpusStats, mentions_at_most
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Ranking
from itlr.scoring import Operators, TruthMap
from itlr.tree import Term, literals

# Boxes narrower than this (in cosine) are not split further: the bound is not proved.
RESOLUTION = 1e-3
# Boxes examined per proof at most; past it the bound counts as not proved.
MAX_BOXES = 20_000
# The points tried before any box is split (`_grid`): 21 per axis up to three searched terms.
GRID_STEPS = 21
GRID_DIMS = 3
# Rounds stop before the cap when the searches' bounds, falling this many times faster than they
# fell between the last two rounds, would still not prove the top k at the cap.
OPTIMISM = 2.0
# The steps (factor of depth) in which `depth_to_prove` looks for the depth of the next round,
# and the boxes each of its projected proofs may examine (an unfinished one counts as not
# proved: the round goes deeper, which costs less than the search for its depth would).
JUMP_STEP = 1.25
JUMP_BOXES = 300


@dataclass(frozen=True)
class SearchBound:
    """What one kNN search proves about every document it did not return: the weighted sum of
    the document's cosines with `terms` (`weights`, all 1 when empty) is at most `limit`.
    `exhausted`: it returned every document, so nothing is unseen."""

    terms: tuple[str, ...]
    limit: float
    exhausted: bool = False
    weights: tuple[float, ...] = ()


def search_bound(
    search: CandidateSearch, term_vectors: dict[str, np.ndarray], last: float
) -> SearchBound:
    """The bound of a search whose last returned neighbour had cosine `last` with its vector,
    the normalised weighted sum of its terms' unit vectors: for a document d,
    sum of w_t cos(d, t) = cos(d, vector) * |sum of w_t t|."""
    units = [np.asarray(term_vectors[t], dtype=np.float64) for t in search.terms]
    summed = np.sum(
        [
            w * u / (np.linalg.norm(u) or 1.0)
            for w, u in zip(search.term_weights, units, strict=True)
        ],
        axis=0,
    )
    limit = float(last) * float(np.linalg.norm(summed))
    return SearchBound(search.terms, limit, weights=search.weights)


@dataclass(frozen=True)
class Round:
    """What one round of knn mode found: its candidates scored (`ranked`, with the warnings of
    the request), and what its searches prove about every document they did not return:
    `bounds`, None when they prove nothing (a walk that only decides where to go), and with
    hybrid truths `lexical_limits`, the most an unseen document's lexical truth can be per
    positive term. `proved`: the engine proved the top k another way (`ranked_by_its_search`)."""

    ranked: Ranking
    bounds: tuple[SearchBound, ...] | None
    lexical_limits: Mapping[str, float] | None = None
    proved: bool = False


@dataclass(frozen=True)
class GiveUp:
    """Stop before the last round, the top k not proved, for this reason."""

    warning: str


@dataclass(frozen=True)
class Deeper:
    """Go on with a round of this budget per positive term, not the next one scheduled."""

    budget: int


class RoundSource(Protocol):
    """One engine's side of `certify_rounds`: how a round of a given budget per search is
    gathered and scored, and what to do when it did not prove the top k."""

    def gather(self, depth: int, budget: int) -> Round: ...

    def unproved(
        self, depth: int, budget: int, found: Round, threshold: float
    ) -> Ranking | GiveUp | Deeper | None:
        """After an unproved round: None to go on to the next round scheduled, `Deeper` to go
        on with a round of another budget, `GiveUp` to stop, or the engine's own final answer
        (a pass over every document)."""
        ...


def certify_rounds(
    source: RoundSource, query: Query, options: SearchOptions, rounds: Sequence[int]
) -> Ranking:
    """knn mode in rounds of growing budgets, for a query `certifiable` accepts: each round's
    bounds join those of the rounds before, and the first round after which no unseen
    document can beat the k-th score ends with the top k proved exact (`exact=True`). Rounds
    that end without a proof return the last round's ranking with the warning why
    (`exact=False`)."""
    bounds: list[SearchBound] = []
    warning = not_proved_warning(options.k, rounds[-1])
    found: Round | None = None
    budget: int | None = rounds[0] if rounds else None
    depth = 0
    while budget is not None:
        found = source.gather(depth, budget)
        threshold = proof_threshold([h.score for h in found.ranked.hits], options.k)
        if found.bounds is not None:
            bounds += found.bounds
        if found.proved or (
            found.bounds is not None
            and unseen_cannot_beat(
                query, bounds, threshold, options.ops, options.truth, found.lexical_limits
            )
        ):
            return replace(found.ranked, exact=True)
        step = source.unproved(depth, budget, found, threshold)
        if isinstance(step, Ranking):
            return step
        if isinstance(step, GiveUp):
            warning = step.warning
            break
        deeper = [later for later in rounds if later > budget]
        budget = step.budget if isinstance(step, Deeper) else (deeper[0] if deeper else None)
        depth += 1
    if found is None:
        raise ValueError("certify_rounds needs at least one round")
    return Ranking(found.ranked.hits, (*found.ranked.warnings, warning), exact=False)


def not_proved_warning(k: int, depth: int) -> str:
    """The warning of a result whose rounds reached the cap before the proof."""
    return (
        f"the top {k} is not proved exact: a document outside the candidates of {depth} "
        "neighbours per term may score higher; raise `max_candidates` or use exact mode"
    )


def gave_up_warning(k: int, depth: int, cap: int) -> str:
    """The warning of a result whose rounds stopped before the cap (see `out_of_reach`)."""
    return (
        f"the top {k} is not proved exact: the searches' bounds fell too slowly for rounds up to "
        f"{cap} neighbours per term to prove it, so they stopped at {depth}; a document outside "
        "the candidates may score higher; use exact mode for the exact top k"
    )


@dataclass(frozen=True)
class BoundsFall:
    """How the searches' bounds fell from one depth to the next, and what a proof needs: each
    search's bound (`before` at depth depths[0], `after` at depths[1], the same searches in the
    same order), the deepest round allowed (`cap`) and the score no unseen document may beat
    (`threshold`, the k-th score, which deeper rounds only raise)."""

    query: Query
    before: Sequence[SearchBound]
    after: Sequence[SearchBound]
    depths: tuple[int, int]
    cap: int
    threshold: float
    ops: Operators
    truth: TruthMap
    lexical_limits: Mapping[str, float] | None = None

    @property
    def comparable(self) -> bool:
        """The same searches at two depths: a fall to project. Searches that changed between
        the rounds (a combined search past the engine's largest k becomes one per term,
        itlr.candidates.plan_searches) have none."""
        return self.depths[1] > self.depths[0] and [b.terms for b in self.before] == [
            a.terms for a in self.after
        ]

    def proves_at(self, depth: int, optimism: float, max_boxes: int = MAX_BOXES) -> bool:
        """Whether the bounds at `depth`, falling per factor of depth `optimism` times as fast
        as they just did, leave no unseen document room above the threshold."""
        before, (shallow, deep) = self.before, self.depths
        remaining = math.log(depth / deep) / math.log(deep / shallow)
        projected = [
            replace(now, limit=now.limit - optimism * max(then.limit - now.limit, 0.0) * remaining)
            for then, now in zip(before, self.after, strict=True)
        ]
        return unseen_cannot_beat(
            self.query,
            projected,
            self.threshold,
            self.ops,
            self.truth,
            self.lexical_limits,
            max_boxes,
        )


def out_of_reach(fall: BoundsFall) -> bool:
    """Whether deeper rounds look unable to prove the top k: the bounds extrapolated to the
    cap, falling `OPTIMISM` times as fast as they just did, still leave an unseen document room
    above the threshold. Unstructured data (random vectors, where nothing distinguishes the
    top k) then stops early instead of paying every round up to the cap. Searches without a
    fall to project (`BoundsFall.comparable`) are never out of reach."""
    if any(b.exhausted for b in fall.after) or fall.cap <= fall.depths[1] or not fall.comparable:
        return False
    return not fall.proves_at(fall.cap, OPTIMISM)


def depth_to_prove(fall: BoundsFall) -> int | None:
    """The budget of the next round, or None for the next one scheduled: the least depth
    below the cap (in steps of `JUMP_STEP`, at least twice the last) at which the bounds,
    falling on per factor of depth as fast as they just did (`out_of_reach`'s projection
    without its optimism), would prove the top k. One round at about the depth a proof needs,
    where rounds four times deeper each would take two or three to get there; a proof that
    only the optimistic projection allows goes on step by step, since a round at the cap costs
    several times one four times shallower."""
    if not fall.comparable:
        return None
    depths, cap = fall.depths, fall.cap
    steps = [2 * depths[1]]
    while math.ceil(steps[-1] * JUMP_STEP) < cap:
        steps.append(math.ceil(steps[-1] * JUMP_STEP))

    def proves(depth: int) -> bool:
        return fall.proves_at(depth, 1.0, JUMP_BOXES)

    # Deeper bounds only prove more: the least depth that proves, by bisection.
    if steps[-1] >= cap or not proves(steps[-1]):
        return None
    low, high = 0, len(steps) - 1
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if proves(steps[middle]) else (middle + 1, high)
    return steps[low]


def round_plan(plan: Plan) -> Plan:
    """The candidate plan of a certified query's rounds: `auto` becomes per-branch, since a
    search per OR branch (one per conjunction) bounds each branch tightly, where one combined
    search over every positive term bounds only their sum (loose for an OR). A query without
    an OR has one branch, so both are the same single search."""
    return "per-branch" if plan == "auto" else plan


def certifiable(
    query: Query, ops: Operators, truth: TruthMap, mentions_gathered: bool = False
) -> bool:
    """Whether knn mode can prove this query's top k: anchored, with bounded NOTs, and scored
    from cosines alone, or, for hybrid truth values, by an engine that also gathers every
    document mentioning a positive term (`mentions_gathered`): the kNN searches say nothing of
    an unseen document's words, but an unseen document then mentions none of those terms."""
    return (
        query.has_positive_term
        and query.anchored
        and (not truth.uses_lexical or mentions_gathered)
        and uncertifiable_reason(query, ops) is None
    )


def ranked_by_its_search(query: Query, truth: TruthMap) -> bool:
    """Whether the query's score is a non-decreasing function of one term's cosine alone: a
    single positive term, weighted or not, scored from cosines. Its one kNN search then ranks
    the candidates as the score does, so once the search returned at least k neighbours and the
    k-th score is above 0, the order proves the top k with no probe: every document the search
    did not return has a cosine at most the last returned one's, so a score at most the k-th's.
    The proof is as exact as the probe's (the same search's own ranking)."""
    root = query.root
    return isinstance(root, Term) and root.weight > 0 and not truth.uses_lexical


def unmentionable_reason(
    query: Query, options: SearchOptions, statistics: CorpusStats | None
) -> str | None:
    """Why a cluster cannot gather every document that mentions a positive term (which
    certifying hybrid truths needs), or None: more of them than the rounds' deepest budget per
    positive term allows (scoring them all would cost what exact mode costs)."""
    if not options.truth.uses_lexical:
        return None
    if statistics is None:
        return "the index's token statistics were not counted"
    mentioning = mentions_at_most(query.positive_terms, statistics)
    budget = options.candidate_cap * len(query.positive_terms)
    if mentioning <= budget:
        return None
    return (
        f"the top {options.k} is not proved exact: up to {mentioning:,} documents mention the "
        f"positive terms, more than the {budget:,} that knn mode gathers for them "
        f"({options.candidate_cap:,} per positive term); raise `max_candidates` or use exact mode"
    )


def uncertifiable_reason(query: Query, ops: Operators) -> str | None:
    """Why no bound can prove this query's top k, or None."""
    if ops.not_ == "reciprocal" and any(negated for _, negated in literals(query.root)):
        # 1/x of a truth that may be 0: an unseen document's NOT is unbounded.
        return "the reciprocal NOT has no best case (1/x of a truth that may be 0)"
    return None


def proof_threshold(scores: Sequence[float], k: int) -> float:
    """The score no unseen document may beat for the seen top k to be the top k: the k-th
    score, or -inf (no proof short of seeing every document) when fewer than k documents
    scored above 0. Then every unseen document scoring 0 ties with the tail, or would fill it,
    and which of them belong in the top k is decided by the tie-break over all of them."""
    if len(scores) < k or not scores[k - 1] > 0:
        return -math.inf
    return float(scores[k - 1])


def unseen_cannot_beat(
    query: Query,
    bounds: Sequence[SearchBound],
    threshold: float,
    ops: Operators,
    truth: TruthMap,
    lexical_limits: Mapping[str, float] | None = None,
    max_boxes: int = MAX_BOXES,
) -> bool:
    """True when no document that none of the searches returned can score above `threshold`.
    Only for queries that `uncertifiable_reason` accepts. For hybrid truths, `lexical_limits`:
    the most an unseen document's lexical truth can be, per term (0: it mentions none of the
    term's tokens); a term not in it may have any lexical truth in [0, 1]. Past `max_boxes`
    boxes examined the bound counts as not proved."""
    if any(b.exhausted for b in bounds):
        return True
    if uncertifiable_reason(query, ops) is not None:
        return False
    terms = query.terms
    searched = {t for b in bounds for t in b.terms}
    free = [i for i, t in enumerate(terms) if t in searched]
    if not free:
        return False
    column = {terms[i]: j for j, i in enumerate(free)}
    groups: list[tuple[list[int], np.ndarray, float]] = []
    for b in bounds:
        # A term weighted 0 in the search vector is not bounded by it.
        weighted = zip(b.terms, b.weights or [1.0] * len(b.terms), strict=True)
        pairs = [(column[t], w) for t, w in weighted if w]
        if pairs:
            weights = np.asarray([w for _, w in pairs], dtype=np.float64)
            groups.append(([c for c, _ in pairs], weights, b.limit))

    def cosines(corners: np.ndarray, unsearched: float) -> np.ndarray:
        full = np.full((len(corners), len(terms)), unsearched)
        full[:, free] = corners
        return full

    hybrid = truth.uses_lexical
    shares = truth.lexical_weights(terms, query.negated_terms) if hybrid else None
    limits = lexical_limits or {}
    ceiling = np.array([min(1.0, max(0.0, limits.get(t, 1.0))) for t in terms])

    def words(count: int, most: bool) -> np.ndarray | None:
        if not hybrid:
            return None
        return (ceiling if most else np.zeros(len(terms))) * np.ones((count, len(terms)))

    # The lexical truths of the best unseen document a corner stands for: as high as allowed
    # for a term that only occurs outside a NOT (the score rises with it), 0 for the others.
    # With 0 everywhere a corner would never reach the box's upper score, which counts the
    # lexical ceiling, and boxes would be split to MAX_BOXES in vain.
    occurrences = [(term.text, negated) for term, negated in literals(query.root)]
    raising = {t for t, negated in occurrences if not negated} - {
        t for t, negated in occurrences if negated
    }
    best = np.array([ceiling[i] if t in raising else 0.0 for i, t in enumerate(terms)])

    def scores(corners: np.ndarray) -> np.ndarray:
        cos = cosines(corners, -1.0)
        found = best * np.ones((len(cos), len(terms))) if hybrid else None
        return compose(query, cos, ops, truth, lexical_truths=found).scores

    def greatest(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
        # Every truth map is non-decreasing in the cosine (and a hybrid one in the lexical
        # truth): a box of cosines and lexical truths is a box of truths.
        low = truth.apply(cosines(lower, -1.0), terms, words(len(lower), False), shares)
        high = truth.apply(cosines(upper, 1.0), terms, words(len(upper), True), shares)
        return np.maximum(program_range(query.program, low, high, ops)[1], 0.0)

    # Most queries that the bound cannot prove have unseen documents well above the threshold:
    # a grid of points the bounds allow finds one in one composition, where splitting boxes down
    # to RESOLUTION takes a dozen rounds of them.
    probes = np.vstack([_reach(len(free), groups), _grid(len(free))])
    for cols, coefficients, limit in groups:
        probes = probes[probes[:, cols] @ coefficients <= limit + 1e-9]
    if len(probes) and np.any(scores(probes) > threshold):
        return False
    lower = np.full((1, len(free)), -1.0)
    upper = np.full((1, len(free)), 1.0)
    examined = 0
    while len(lower):
        upper = _tightened(lower, upper, groups)
        feasible = np.all(upper >= lower, axis=1)
        for cols, coefficients, limit in groups:
            feasible &= lower[:, cols] @ coefficients <= limit + 1e-9
        lower, upper = lower[feasible], upper[feasible]
        if not len(lower):
            return True
        open_ = greatest(lower, upper) > threshold
        lower, upper = lower[open_], upper[open_]
        examined += len(lower)
        if not len(lower):
            return True
        if np.any(scores(lower) > threshold):
            return False  # a box's lower corner is a possible unseen document that beats it
        widths = upper - lower
        if examined > max_boxes or np.any(widths.max(axis=1) < RESOLUTION):
            return False
        lower, upper = _split(lower, upper, widths)
    return True


def _reach(dims: int, groups: list[tuple[list[int], np.ndarray, float]]) -> np.ndarray:
    """The point (one row) where every searched cosine is as high as all its searches allow at
    once: each group's limit shared alike by its cosines. For one term per search it is where
    the best unseen document of a query without NOT over a searched term lies, and a proof that
    cannot hold mostly fails there; off the grid's steps, the boxes would otherwise be halved
    down to RESOLUTION before finding it (a dozen rounds of compositions)."""
    point = np.ones(dims)
    for cols, coefficients, limit in groups:
        total = float(coefficients.sum())
        if total > 0:
            point[cols] = np.minimum(point[cols], limit / total)
    return np.clip(point, -1.0, 1.0)[None, :]


@cache
def _grid(dims: int) -> np.ndarray:
    """Points spread over [-1, 1]^dims: a regular grid (step 0.1) up to three dimensions,
    else a fixed pseudo-random sample of as many points. Built once per dimension count (every
    proof asks for it), read-only."""
    if dims <= GRID_DIMS:
        axis = np.linspace(-1.0, 1.0, GRID_STEPS)
        points = np.stack(np.meshgrid(*[axis] * dims, indexing="ij"), axis=-1).reshape(-1, dims)
    else:
        points = np.random.default_rng(0).uniform(-1.0, 1.0, size=(GRID_STEPS**GRID_DIMS, dims))
    points.setflags(write=False)
    return points


def _tightened(
    lower: np.ndarray, upper: np.ndarray, groups: list[tuple[list[int], np.ndarray, float]]
) -> np.ndarray:
    """Each cosine's upper end cut to what its searches' bounds leave once the other terms of
    the search are at their lower ends."""
    upper = upper.copy()
    for cols, weights, limit in groups:
        total = lower[:, cols] @ weights
        for col, weight in zip(cols, weights, strict=True):
            room = (limit - (total - weight * lower[:, col])) / weight
            upper[:, col] = np.minimum(upper[:, col], room)
    return upper


def _split(
    lower: np.ndarray, upper: np.ndarray, widths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every box halved along its widest side."""
    rows = np.arange(len(lower))
    axis = widths.argmax(axis=1)
    middle = (lower[rows, axis] + upper[rows, axis]) / 2
    low_half_upper = upper.copy()
    low_half_upper[rows, axis] = middle
    high_half_lower = lower.copy()
    high_half_lower[rows, axis] = middle
    return np.concatenate([lower, high_half_lower]), np.concatenate([low_half_upper, upper])
