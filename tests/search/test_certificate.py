"""knn mode's certificate: a bound on what any document outside the candidates can score, and
the rounds that deepen the kNN searches until it proves the top k exact, or the cap stops them
and the result says so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import itlr
from itlr.candidates import CandidateSearch, plan_candidates
from itlr.certificate import (
    BoundsFall,
    SearchBound,
    depth_to_prove,
    out_of_reach,
    search_bound,
    unseen_cannot_beat,
)
from itlr.composition import compose
from itlr.engines.embedded import EmbeddedBackend
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions
from itlr.scoring import SEARCH_OPERATORS, Operators, TruthMap

CLAMP = TruthMap("clamp")


def cosine_options(**given: Any) -> SearchOptions:
    """Options scoring by cosines alone: these cases construct vectors, not words."""
    return SearchOptions(truth=CLAMP, **given)


@pytest.mark.parametrize(
    ("query", "bounds", "best_unseen"),
    [
        # per-term bounds: the product of the terms' limits
        ('"a" AND "b"', [SearchBound(("a",), 0.5), SearchBound(("b",), 0.5)], 0.25),
        # one combined search bounds the sum: the product is best at an even split
        ('"a" AND "b"', [SearchBound(("a", "b"), 1.0)], 0.25),
        # a negated term at its best: 1 - 0.5 * 0
        ('"a" AND NOT "c"', [SearchBound(("a",), 0.6)], 0.6),
        # an OR of a conjunction and a term, each with its own search
        ('("a" AND "b") OR "c"', [SearchBound(("a", "b"), 1.0), SearchBound(("c",), 0.4)], 0.65),
        ('"a" AND "b" AND "c" AND NOT "d"', [SearchBound(("a", "b", "c"), 1.5)], 0.125),
        # a term both wanted and excluded: "b" free, so the NOT can be 1 at best
        ('"a" AND NOT ("a" AND "b")', [SearchBound(("a",), 0.1)], 0.1),
        # a heavy weight under a product AND: max(0, 2x - 1) is 0 below x = 0.5
        ('"a"^2 AND "b"^2', [SearchBound(("a",), 0.1), SearchBound(("b",), 0.1)], 0.0),
        ('"a"^2 AND "b"', [SearchBound(("a",), 0.9), SearchBound(("b",), 0.5)], 0.4),
    ],
)
def test_the_bound_is_the_best_score_an_unseen_document_can_reach(
    query: str, bounds: list[SearchBound], best_unseen: float
) -> None:
    parsed = itlr.parse(query)
    assert unseen_cannot_beat(parsed, bounds, best_unseen + 0.005, SEARCH_OPERATORS, CLAMP)
    assert not unseen_cannot_beat(parsed, bounds, best_unseen - 0.005, SEARCH_OPERATORS, CLAMP)


def test_a_proof_that_cannot_hold_fails_where_every_search_allows_its_most(
    monkeypatch,
) -> None:
    # The best unseen document sits at the bounds' limits, off the grid's steps: it is tried
    # first, so no box is halved to find it; a threshold just above it is still proved.
    import itlr.certificate as certificate

    parsed = itlr.parse('"a" AND "b" AND NOT "c"')
    bounds = [SearchBound(("a",), 0.1159), SearchBound(("b",), 0.1205)]
    best_unseen = 0.1159 * 0.1205  # c at -1: its NOT is 1
    halved = []
    real_split = certificate._split

    def split(*args: Any) -> Any:
        halved.append(1)
        return real_split(*args)

    monkeypatch.setattr(certificate, "_split", split)
    assert not unseen_cannot_beat(parsed, bounds, best_unseen - 1e-5, SEARCH_OPERATORS, CLAMP)
    assert not halved
    assert unseen_cannot_beat(parsed, bounds, best_unseen + 1e-5, SEARCH_OPERATORS, CLAMP)


def test_a_search_that_returned_every_document_leaves_nothing_unseen() -> None:
    bounds = [SearchBound(("a",), 0.0, exhausted=True)]
    assert unseen_cannot_beat(itlr.parse('"a"'), bounds, 0.0, SEARCH_OPERATORS, CLAMP)


SHAPES = [
    '"a" AND "b"',
    '"a"^2 AND "b"',
    '"a"^1.5 AND "b"^0.5 AND NOT "c"',
    '("a" AND "b"^3) OR "c"^0.5',
    '"a" AND NOT ("b"^2 OR "c")',
    '"a"^2 AND NOT "a"',
]
FAMILIES = [
    SEARCH_OPERATORS,
    Operators(and_="min", or_="max"),
    Operators(and_="sum", or_="probsum"),
    Operators(and_="lukasiewicz", not_strength=1.0),
]


@pytest.mark.parametrize("query", SHAPES)
@pytest.mark.parametrize("ops", FAMILIES, ids=lambda o: f"{o.and_}-{o.or_}")
def test_a_proof_holds_against_every_document_the_bounds_allow(query: str, ops: Operators) -> None:
    # Brute force: every point of a grid over the cosines the per-term bounds allow (terms
    # without a search anywhere in [-1, 1]). A proof at a threshold below the grid's best
    # would be a lie; no proof at a threshold well above it would be a useless bound.
    parsed = itlr.parse(query)
    rng = np.random.default_rng(7)
    grid = np.linspace(-1.0, 1.0, 41)
    for _ in range(5):
        searched = [t for t in parsed.terms if t != "c"]
        limits = dict(zip(searched, rng.uniform(-0.2, 0.9, len(searched)), strict=True))
        bounds = [SearchBound((t,), float(limit)) for t, limit in limits.items()]
        axes = [
            np.append(grid[grid <= limits[t]], limits[t]) if t in limits else grid
            for t in parsed.terms
        ]
        points = np.stack(np.meshgrid(*axes), axis=-1).reshape(-1, len(parsed.terms))
        best = float(compose(parsed, points, ops, CLAMP).scores.max())
        assert not unseen_cannot_beat(parsed, bounds, best - 1e-6, ops, CLAMP)
        assert unseen_cannot_beat(parsed, bounds, best * 1.05 + 0.05, ops, CLAMP)


def test_a_reciprocal_not_cannot_be_bounded_by_the_searches() -> None:
    # 1/x of a truth that may be 0 has no useful best case: the proof fails, it never lies.
    query = itlr.parse('"a" AND NOT "c"')
    ops = Operators(not_="reciprocal", not_strength=1.0)
    assert not unseen_cannot_beat(query, [SearchBound(("a",), 0.3)], 0.9, ops, CLAMP)


def test_a_combined_search_bounds_the_sum_of_its_unit_vectors() -> None:
    a, b = np.eye(4)[0], np.eye(4)[1]
    search = CandidateSearch(("a", "b"), (a + b) / np.sqrt(2), 10)
    bound = search_bound(search, {"a": a, "b": 3 * b}, last=0.5)
    assert bound.limit == pytest.approx(0.5 * np.sqrt(2))


def test_a_weighted_search_bounds_the_weighted_sum() -> None:
    # 0.5 cos_a + cos_b <= 0.4 * |0.5 a + b|: cos_a alone may reach 0.4 * sqrt(1.25) / 0.5.
    a, b = np.eye(4)[0], np.eye(4)[1]
    query = itlr.parse('"a"^0.5 AND "b"')
    (search,) = plan_candidates(query, np.stack([a, b]), 10, "combined")
    assert search.weights == (0.5, 1.0)
    np.testing.assert_allclose(search.vector, (0.5 * a + b) / np.sqrt(1.25), rtol=1e-6)
    bound = search_bound(search, {"a": a, "b": b}, last=0.4)
    assert bound.limit == pytest.approx(0.4 * np.sqrt(1.25))
    # (0.5 + 0.5 x) * y under 0.5 x + y <= L, x and y <= 1: best at y = L - 0.5 x
    limit = bound.limit
    xs = np.linspace(-1, 1, 20001)
    ys = np.minimum(1.0, limit - 0.5 * xs)
    best = float(np.max((0.5 + 0.5 * np.clip(xs, 0, 1)) * np.clip(ys, 0, 1)))
    assert unseen_cannot_beat(query, [bound], best + 0.005, SEARCH_OPERATORS, CLAMP)
    assert not unseen_cannot_beat(query, [bound], best - 0.005, SEARCH_OPERATORS, CLAMP)


@pytest.mark.parametrize(
    ("after", "reachable"),
    [
        # 0.5 -> 0.49 from depth 100 to 400: even falling twice as fast, about 0.467 at 2,000,
        # far above the k-th score 0.1. Stop.
        (0.49, False),
        # 0.5 -> 0.3: at twice that rate the bound passes below 0.1 before 2,000. Go on.
        (0.3, True),
    ],
)
def test_rounds_stop_early_only_when_the_bound_cannot_fall_below_the_kth_score_by_the_cap(
    after: float, reachable: bool
) -> None:
    query = itlr.parse('"a"')
    before = [SearchBound(("a",), 0.5)]
    now = [SearchBound(("a",), after)]
    stop = out_of_reach(
        BoundsFall(query, before, now, (100, 400), 2000, 0.1, SEARCH_OPERATORS, CLAMP)
    )
    assert stop is not reachable
    # At the cap there is nothing left to try, and an exhausted search proves everything.
    assert not out_of_reach(
        BoundsFall(query, before, now, (100, 2000), 2000, 0.1, SEARCH_OPERATORS, CLAMP)
    )
    exhausted = [SearchBound(("a",), 0.0, exhausted=True)]
    assert not out_of_reach(
        BoundsFall(query, before, exhausted, (100, 400), 2000, 0.1, SEARCH_OPERATORS, CLAMP)
    )


def test_the_next_round_goes_as_deep_as_the_bounds_falling_on_as_they_fell_would_prove() -> None:
    # 0.5 at 50 neighbours, 0.4 at 100: 0.1 per doubling, so 0.1 (the k-th score) at 800.
    query = itlr.parse('"a"')
    before, now = [SearchBound(("a",), 0.5)], [SearchBound(("a",), 0.4)]
    judged = (query, before, now, (50, 100))
    # Steps of x1.25 from twice the last depth: 767 leaves 0.106, 959 leaves 0.074.
    assert depth_to_prove(BoundsFall(*judged, 2000, 0.1, SEARCH_OPERATORS, CLAMP)) == 959
    # Nothing below the cap would prove: the next round scheduled.
    assert depth_to_prove(BoundsFall(*judged, 900, 0.1, SEARCH_OPERATORS, CLAMP)) is None
    # A bound that already proves at twice the depth goes no deeper than that.
    assert depth_to_prove(BoundsFall(*judged, 2000, 0.35, SEARCH_OPERATORS, CLAMP)) == 200
    # Searches that changed between the rounds: no fall to project.
    other = [SearchBound(("b",), 0.4)]
    assert (
        depth_to_prove(
            BoundsFall(query, before, other, (50, 100), 2000, 0.1, SEARCH_OPERATORS, CLAMP)
        )
        is None
    )


def test_rounds_whose_searches_changed_are_never_out_of_reach() -> None:
    # Seven positive terms: one combined search of 400 x 7 neighbours, then 1,600 x 7 is past
    # the engine's k of 10,000 and the plan falls back to one search per term.
    query = itlr.parse(" AND ".join(f'"t{i}"' for i in range(7)))
    terms = tuple(f"t{i}" for i in range(7))
    before = [SearchBound(terms, 3.0)]
    after = [SearchBound((t,), 0.45) for t in terms]
    assert not out_of_reach(
        BoundsFall(query, before, after, (400, 1600), 2000, 0.01, SEARCH_OPERATORS, CLAMP)
    )


def rounds_sent(backend, monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """The search bodies of every `_msearch` (one per round) the backend sends from now on."""
    rounds: list[list[dict[str, Any]]] = []
    search = backend.searches._multi_search
    monkeypatch.setattr(backend.searches, "_multi_search", lambda b: rounds.append(b) or search(b))
    return rounds


@pytest.mark.opensearch
def test_opensearch_rounds_go_on_when_the_plan_falls_back_to_per_term_searches(
    opensearch_index, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A largest k of 120 makes the second round (80 x 2 for one combined search) one search per
    # term; no round proves, so the rounds ask whether the bounds are out of reach.
    import sys

    from itlr import certificate
    from itlr.engines.opensearch import OpenSearchDialect

    rng = np.random.default_rng(5)
    vectors = unit_rows(rng.normal(size=(600, DIMS))).astype(np.float32)
    backend = opensearch_index(DIMS)
    ids = [f"d{i}" for i in range(600)]
    assert backend.add(ids, [""] * len(ids), vectors) == {}
    backend.refresh()
    monkeypatch.setattr(OpenSearchDialect, "max_k", 120)
    real = certificate.unseen_cannot_beat

    def no_proof(*args: Any) -> bool:
        # The rounds never prove; out_of_reach still judges with the real bound.
        return sys._getframe(1).f_code.co_name != "certify_rounds" and real(*args)

    monkeypatch.setattr(certificate, "unseen_cannot_beat", no_proof)
    # The rounds keep to their schedule (x4) instead of jumping to a projected depth.
    import itlr.engines.cluster_certified as cluster_certified

    monkeypatch.setattr(cluster_certified, "depth_to_prove", lambda *args: None)
    rounds = rounds_sent(backend, monkeypatch)
    query = itlr.parse('"a" AND "b"')
    terms = unit_rows(rng.normal(size=(2, DIMS))).astype(np.float32)
    hits = backend.search(query, terms, cosine_options(k=10, candidates=20, max_candidates=120))
    assert len(hits) == 10 and hits.exact is False
    # 20 and 80 neighbours in one combined search, then 120 per term: every round ran.
    assert [len(bodies) for bodies in rounds] == [2, 3, 3]


# -- the rounds, on an embedded index built so that the first round misses the best document ---

DIMS = 32


def unit_rows(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture()
def crowded(tmp_path: Path) -> EmbeddedBackend:
    """300 documents very near "a" and a little near "b" (sum of cosines 1.21, product 0.23)
    rank above the one document near both (sum 1.20, product 0.36) in a search for a + b."""
    rng = np.random.default_rng(0)
    a, b = np.eye(DIMS)[0], np.eye(DIMS)[1]

    def near(x: float, y: float, count: int) -> np.ndarray:
        noise = rng.normal(size=(count, DIMS))
        noise[:, :2] = 0
        noise = unit_rows(noise) * np.sqrt(1 - x * x - y * y)
        return x * a + y * b + noise

    vectors = np.vstack(
        [near(0.97, 0.24, 300), near(0.6, 0.6, 1), unit_rows(rng.normal(size=(700, DIMS)))]
    )
    ids = [f"crowd{i}" for i in range(300)] + ["best"] + [f"other{i}" for i in range(700)]
    index = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    index.add(ids, [""] * len(ids), unit_rows(vectors).astype(np.float32))
    return index


@pytest.mark.parametrize("filtered", [False, True])
def test_without_the_graph_a_certifiable_query_is_scored_over_every_row_at_once(
    crowded: EmbeddedBackend, filtered: bool
) -> None:
    # Below the graph threshold, or with a filter, a kNN search reads every row's cosines
    # anyway: one pass scores them all and the top k is exact, whatever the cap.
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    exact = crowded.search(query, terms, cosine_options(k=10, mode="exact"))
    assert exact[0].id == "best"
    if filtered:
        crowded.ann_min_rows = 0
    walks, scored = graph_walks(crowded, graph=False)
    every = {"exists": {"field": "id"}} if filtered else None
    for cap in (50, None):
        options = cosine_options(k=10, candidates=50, max_candidates=cap, filter=every)
        hits = crowded.search(query, terms, options)
        assert [h.id for h in hits] == [h.id for h in exact]
        assert hits.exact is True and not hits.warnings
    assert walks == [] and scored == [crowded.count()] * 2


def test_the_cap_stops_the_rounds_and_the_result_says_so(crowded: EmbeddedBackend) -> None:
    walks, _ = graph_walks(crowded)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50, max_candidates=50))
    assert "best" not in {h.id for h in hits} and walks == [[100]]
    assert hits.exact is False
    assert any("not proved exact" in w for w in hits.warnings)


def test_an_easy_query_is_proved_in_the_first_round(crowded: EmbeddedBackend) -> None:
    query = itlr.parse('"a"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50, max_candidates=50))
    assert hits.exact is True


def test_exact_mode_is_exact_and_a_query_that_is_not_anchored_is_not_certified(
    crowded: EmbeddedBackend,
) -> None:
    terms = np.eye(DIMS)[:2].astype(np.float32)
    assert crowded.search(itlr.parse('"a" AND "b"'), terms, cosine_options(mode="exact")).exact
    loose = crowded.search(itlr.parse('"a" OR NOT "b"'), terms, cosine_options(candidates=50))
    assert loose.exact is None


def test_the_search_result_carries_the_certificate(crowded: EmbeddedBackend) -> None:
    from itlr.retriever import SearchResult

    assert SearchResult(itlr.parse('"a"'), [], exact=True).to_dict()["exact"] is True


def test_a_cap_below_the_first_round_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_candidates"):
        cosine_options(candidates=100, max_candidates=50)


# -- the same rounds on a real OpenSearch: a second request only when the bound needs it ------


@pytest.fixture()
def crowded_opensearch(opensearch_index, crowded: EmbeddedBackend):
    backend = opensearch_index(DIMS)
    ids = crowded.ids()
    assert backend.add(ids, [""] * len(ids), np.stack([crowded.vector(i) for i in ids])) == {}
    backend.refresh()
    return backend


@pytest.mark.opensearch
def test_opensearch_deepens_until_the_top_k_is_proved(
    crowded_opensearch, crowded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The crowd ties, so its bound does not fall within the first round and the rounds would
    # give up (the next test); here they go on.
    import itlr.engines.cluster_certified as cluster_certified

    monkeypatch.setattr(cluster_certified, "out_of_reach", lambda *args: False)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    exact = crowded.search(query, terms, cosine_options(k=10, mode="exact"))
    hits = crowded_opensearch.search(query, terms, cosine_options(k=10, candidates=50))
    # The 300 crowding documents tie: ranks agree on scores, and the best one leads.
    assert hits[0].id == "best"
    for mine, theirs in zip(hits, exact, strict=True):
        assert mine.score == pytest.approx(theirs.score, abs=1e-4)
    assert hits.exact is True
    capped = crowded_opensearch.search(
        query, terms, cosine_options(k=10, candidates=50, max_candidates=50)
    )
    assert capped.exact is False and "best" not in {h.id for h in capped}


@pytest.mark.opensearch
def test_opensearch_stops_the_rounds_when_the_bound_is_out_of_reach_and_says_so(
    crowded_opensearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Which bounds are out of reach is tested above; here: the rounds act on the verdict.
    import itlr.engines.cluster_certified as cluster_certified

    rounds = rounds_sent(crowded_opensearch, monkeypatch)
    monkeypatch.setattr(cluster_certified, "out_of_reach", lambda *args: True)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    hits = crowded_opensearch.search(query, terms, cosine_options(k=10, candidates=20))
    assert len(rounds) == 1 and hits.exact is False and len(hits) == 10
    (warning,) = hits.warnings
    assert "stopped at 20" in warning and "up to 400" in warning


@pytest.mark.opensearch
def test_opensearch_gives_up_after_one_round_whose_bound_did_not_fall_from_halfway_down(
    crowded_opensearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The 300 crowding documents tie: the combined search's bound is the same halfway down its
    # 100 neighbours (50 per positive term) as at the last, so falling on at twice that rate it
    # never proves the top k by the cap; one round, not every round up to it.
    rounds = rounds_sent(crowded_opensearch, monkeypatch)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    hits = crowded_opensearch.search(query, terms, cosine_options(k=10, candidates=50))
    assert len(rounds) == 1 and hits.exact is False
    (warning,) = hits.warnings
    assert "stopped at 50" in warning
    # The probe read the farther half of the search: from its 50th neighbour to its 100th.
    probe = rounds[0][1]
    assert (probe["from"], probe["size"]) == (49, 51)


def searches_sent(backend, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(path, bodies) of every kNN search the backend sends to the real engine from now on."""
    sent: list[tuple[str, int]] = []
    transport = backend.client.transport
    perform = transport.perform_request

    def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        body = kwargs.get("body")
        if "knn" in str(body):
            lines = body if isinstance(body, list) else str(body).splitlines()
            bodies = len(lines) // 2 if url.endswith("/_msearch") else 1
            sent.append((url.rsplit("/", 1)[-1], bodies))
        return perform(method, url, *args, **kwargs)

    monkeypatch.setattr(transport, "perform_request", counting)
    return sent


@pytest.mark.opensearch
def test_opensearch_proves_a_single_term_by_its_searchs_order_without_a_probe(
    crowded_opensearch, crowded, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = searches_sent(crowded_opensearch, monkeypatch)
    terms = np.eye(DIMS)[:2].astype(np.float32)
    for text, vectors in (('"a"', terms[:1]), ('"b"^0.5', terms[1:])):
        query = itlr.parse(text)
        exact = crowded.search(query, vectors, cosine_options(k=10, mode="exact"))
        sent.clear()
        hits = crowded_opensearch.search(query, vectors, cosine_options(k=10, candidates=50))
        # One search, no probe: its order proves the top k.
        assert sent == [("_search", 1)] and hits.exact is True
        for mine, theirs in zip(hits, exact, strict=True):
            assert mine.score == pytest.approx(theirs.score, abs=1e-4)
    # A NOT beside the term breaks the order: the probe goes along, as before.
    sent.clear()
    terms = np.eye(DIMS)[:2].astype(np.float32)
    crowded_opensearch.search(itlr.parse('"a" AND NOT "b"'), terms, cosine_options(candidates=50))
    assert sent[0] == ("_msearch", 2)


@pytest.mark.opensearch
def test_opensearch_single_term_order_proves_nothing_below_k_above_zero_until_a_probe_does(
    opensearch_index, sparse, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = opensearch_index(DIMS)
    ids = sparse.ids()
    assert backend.add(ids, [""] * len(ids), np.stack([sparse.vector(i) for i in ids])) == {}
    backend.refresh()
    sent = searches_sent(backend, monkeypatch)
    query = itlr.parse('"a"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    # 3 of 603 above 0: the order proves nothing, so each round's probe follows its search.
    hits = backend.search(query, terms, cosine_options(k=10, candidates=20, max_candidates=40))
    assert hits.exact is False
    assert sent[:2] == [("_search", 1), ("_search", 1)]
    # Every document within the search (fewer than its budget): proved with no probe.
    sent.clear()
    whole = backend.search(query, terms, cosine_options(k=10, candidates=700))
    assert whole.exact is True and sent == [("_search", 1)]
    exact = sparse.search(query, terms, cosine_options(k=10, mode="exact"))
    assert [h.id for h in whole][:3] == [h.id for h in exact][:3]


def test_past_the_graph_threshold_an_unproved_query_is_scored_over_every_row(
    crowded: EmbeddedBackend,
) -> None:
    # Through the graph, a deeper round would trust the graph's recall and cost walks thousands
    # deep: the engine scores every row instead, so the top k is exact by construction.
    crowded.ann_min_rows = crowded.routing_min_rows = 0
    walks = []
    graph_lists = crowded.ann_lists
    crowded.ann_lists = lambda *args: walks.append(args) or graph_lists(*args)  # type: ignore[method-assign]
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    exact = crowded.search(query, terms, cosine_options(k=10, mode="exact"))
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50))
    assert [h.id for h in hits] == [h.id for h in exact] and hits[0].id == "best"
    assert hits.exact is True and not hits.warnings
    assert len(walks) == 1  # one walk: the probe says the round could not prove, so every row
    capped = crowded.search(query, terms, cosine_options(k=10, candidates=50, max_candidates=50))
    assert "best" not in {h.id for h in capped} and capped.exact is False


def graph_walks(index: EmbeddedBackend, graph: bool = True) -> tuple[list[list[int]], list[int]]:
    """From now on: the neighbour counts of every graph search the index makes, and how many
    rows each scoring step scores (a probe, a round, or every row). `graph`: the index
    searches its HNSW graph, however small."""
    if graph:
        index.ann_min_rows = index.routing_min_rows = 0
    walks: list[list[int]] = []
    scored: list[int] = []
    graph_lists, score = index.ann_lists, index.scored_rows

    def counted(queries: np.ndarray, budgets: list[int]) -> list[np.ndarray]:
        walks.append(list(budgets))
        return graph_lists(queries, budgets)

    def scoring(query, term_vectors, rows, *args, **kwargs):  # type: ignore[no-untyped-def]
        scored.append(len(rows))
        return score(query, term_vectors, rows, *args, **kwargs)

    index.ann_lists = counted  # type: ignore[method-assign]
    index.scored_rows = scoring  # type: ignore[method-assign]
    return walks, scored


@pytest.mark.parametrize(("k", "probe"), [(10, 20), (30, 30)])
def test_on_the_graph_a_probe_of_a_fifth_of_the_budget_proves_an_easy_query(
    crowded: EmbeddedBackend, k: int, probe: int
) -> None:
    walks, scored = graph_walks(crowded)
    terms = np.eye(DIMS)[:1].astype(np.float32)
    hits = crowded.search(itlr.parse('"a"'), terms, cosine_options(k=k, candidates=100))
    # One graph walk as deep as the round, of which the probe (at least k) scored the nearest.
    assert walks == [[100]] and scored == [probe]
    exact = crowded.search(itlr.parse('"a"'), terms, cosine_options(k=k, mode="exact"))
    # 300 rows at cosine 0.97: which of them come first is a matter of rounding.
    assert hits.exact is True
    assert [h.score for h in hits] == pytest.approx([h.score for h in exact], abs=1e-6)


@pytest.mark.parametrize(("reachable", "steps"), [(True, [20, 100, 1001]), (False, [20, 1001])])
def test_on_the_graph_the_full_round_follows_the_probe_only_where_its_bounds_could_prove(
    crowded: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch, reachable: bool, steps: list[int]
) -> None:
    from itlr.engines import embedded_knn

    walks, scored = graph_walks(crowded)
    monkeypatch.setattr(embedded_knn, "out_of_reach", lambda *args: not reachable)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50))
    # Two positive terms: the probe walks its own 20 (10 per term) and scores them; the round,
    # where it is tried, walks and scores its 100 (50 per term; here it does not prove: the
    # best document is not among them); then every row (1,001).
    assert walks == ([[20], [100]] if reachable else [[20]]) and scored == steps
    exact = crowded.search(query, terms, cosine_options(k=10, mode="exact"))
    assert hits.exact is True and [h.id for h in hits] == [h.id for h in exact]


def test_on_the_graph_a_probe_of_several_positive_terms_routes_and_never_proves(
    crowded: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its walk is as shallow as itself, so its neighbours are trusted less than a round's: even
    # a bound that would hold there is only read as "a round could prove", and the proof comes
    # from the round's own, deeper walk.
    from itlr import certificate
    from itlr.engines import embedded_knn

    walks, scored = graph_walks(crowded)
    proofs: list[int] = []
    monkeypatch.setattr(embedded_knn, "out_of_reach", lambda *args: False)
    monkeypatch.setattr(certificate, "unseen_cannot_beat", lambda *args: proofs.append(1) or True)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50))
    assert walks == [[20], [100]] and scored[0] == 20 and scored[1] >= 100
    assert len(proofs) == 1 and hits.exact is True


@pytest.mark.parametrize("text", ['"a" AND "b"', '("a" OR "b") AND NOT "c"'])
def test_below_the_routing_threshold_several_positive_terms_are_scored_without_a_walk(
    crowded: EmbeddedBackend, text: str
) -> None:
    walks, scored = graph_walks(crowded)
    crowded.routing_min_rows = crowded.count() + 1
    query = itlr.parse(text)
    terms = np.eye(DIMS)[: len(query.terms)].astype(np.float32)
    hits = crowded.search(query, terms, cosine_options(k=10, candidates=50))
    assert walks == [] and scored == [crowded.count()]
    exact = crowded.search(query, terms, cosine_options(k=10, mode="exact"))
    assert hits.exact is True and [h.id for h in hits] == [h.id for h in exact]
    # A single positive term is still probed: its probe proves most such queries.
    crowded.search(itlr.parse('"a"'), terms[:1], cosine_options(k=10, candidates=50))
    assert walks == [[50]]


def test_the_routing_threshold_is_read_from_the_environment_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ITLR_ROUTING_MIN_ROWS", "0")
    index = EmbeddedBackend.create(tmp_path / "index", "test-model", DIMS)
    assert index.routing_min_rows == 0
    index.close()
    for wrong in ("many", "-5"):
        monkeypatch.setenv("ITLR_ROUTING_MIN_ROWS", wrong)
        with pytest.raises(ConfigurationError, match=r"ITLR_ROUTING_MIN_ROWS=.*integer >= 0"):
            EmbeddedBackend.open(tmp_path / "index")


def test_on_the_graph_a_cap_at_the_budget_means_one_round_without_a_probe(
    crowded: EmbeddedBackend,
) -> None:
    walks, scored = graph_walks(crowded)
    query = itlr.parse('"a" AND "b"')
    terms = np.eye(DIMS)[:2].astype(np.float32)
    crowded.search(query, terms, cosine_options(k=10, candidates=50, max_candidates=50))
    assert walks == [[100]] and scored == [100]


def zebra_corpus(crowd_text: str) -> tuple[list[str], list[str], np.ndarray]:
    """400 passages: 300 near "a" that say `crowd_text`, one orthogonal to "a" that mentions
    "zebra" twice, 99 random ones."""
    rng = np.random.default_rng(1)
    crowd = unit_rows(np.eye(DIMS)[0] * 0.3 + rng.normal(size=(300, DIMS)) * 0.05)
    others = unit_rows(rng.normal(size=(99, DIMS)))
    vectors = unit_rows(np.vstack([crowd, np.eye(DIMS)[1:2], others])).astype(np.float32)
    texts = [crowd_text] * 300 + ["the zebra and another zebra"] + ["gamma delta"] * 99
    return [f"doc{i}" for i in range(len(texts))], texts, vectors


def zebra_index(path: Path, crowd_text: str) -> EmbeddedBackend:
    index = EmbeddedBackend.create(path, "test-model", DIMS)
    index.add(*zebra_corpus(crowd_text))
    return index


def test_hybrid_truths_are_certified_once_the_rows_that_mention_a_term_most_are_candidates(
    tmp_path: Path,
) -> None:
    # The one passage that mentions "zebra" is orthogonal to the term's vector: no kNN search
    # finds it, yet its lexical truth makes it the best hit. The lexical stream puts it among
    # the candidates, and then the proof holds.
    index = zebra_index(tmp_path / "idx", "alpha beta")
    query = itlr.parse('"zebra"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    hybrid = TruthMap("hybrid", lexical=0.9)
    exact = index.search(query, terms, SearchOptions(k=10, mode="exact", truth=hybrid))
    assert exact[0].id == "doc300"
    hits = index.search(query, terms, SearchOptions(k=10, candidates=50, truth=hybrid))
    assert [h.id for h in hits] == [h.id for h in exact]
    assert hits.exact is True


def test_hybrid_rounds_take_the_rows_of_highest_lexical_truth_not_every_mentioning_row(
    tmp_path: Path,
) -> None:
    # 301 rows mention "zebra", more than a stream of 50 takes: it takes the 50 that mention it
    # most (doc300 first: twice, in a short passage) and bounds the rest by the 50th's lexical
    # truth. A search whose first round takes 200 (LEXICAL_DEPTH x 20) proves its top 10, which
    # scores as exact mode's.
    from itlr.engines.embedded_lexical import LexicalStream

    index = zebra_index(tmp_path / "idx", "alpha zebra")
    rows = np.arange(index.count())
    truths = index.lexical_truths(rows, ("zebra",))
    taken, limits = LexicalStream(truths, rows, ("zebra",)).top(50)
    assert len(taken) == 50 and taken[0] == 300 and 0 < limits["zebra"] < 1
    assert LexicalStream(truths, rows, ("zebra",)).top(400)[1] == {"zebra": 0.0}
    query = itlr.parse('"zebra" AND NOT "gamma"')
    terms = np.eye(DIMS)[[0, 2]].astype(np.float32)
    hybrid = TruthMap("hybrid", lexical=0.9)
    exact = index.search(query, terms, SearchOptions(k=10, mode="exact", truth=hybrid))
    hits = index.search(query, terms, SearchOptions(k=10, candidates=20, truth=hybrid))
    assert [h.score for h in hits] == pytest.approx([h.score for h in exact], abs=1e-9)
    assert hits.exact is True


@pytest.mark.parametrize(
    ("limits", "best"),
    [
        ({"apple": 0.0}, 0.7 * 0.5),
        ({"apple": 0.4}, 0.7 * 0.5 + 0.3 * 0.4),
        ({}, 0.7 * 0.5 + 0.3),
    ],
)
def test_an_unseen_documents_lexical_truth_is_bounded_by_what_the_lexical_stream_left(
    limits: dict[str, float], best: float
) -> None:
    # "apple" at cosine <= 0.5 and, unless its mentions were gathered, any lexical truth; the
    # NOT at its best (0 for both kinds of evidence).
    query = itlr.parse('"apple" AND NOT "banana"')
    hybrid = TruthMap("hybrid", lexical=0.3, not_evidence="max")
    bounds = [SearchBound(("apple",), 0.5)]
    assert unseen_cannot_beat(query, bounds, best + 0.005, SEARCH_OPERATORS, hybrid, limits)
    assert not unseen_cannot_beat(query, bounds, best - 0.005, SEARCH_OPERATORS, hybrid, limits)


@pytest.mark.opensearch
def test_opensearch_certifies_hybrid_truths_by_gathering_the_documents_that_mention_a_term(
    opensearch_index, tmp_path: Path
) -> None:
    # The kNN search for "zebra" never reaches doc300; only its words make it the best hit. The
    # cluster's rounds gather every document mentioning "zebra", so it is scored and proved.
    ids, texts, vectors = zebra_corpus("alpha beta")
    backend = opensearch_index(DIMS)
    assert backend.add(ids, texts, vectors) == {}
    backend.refresh()
    embedded = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    embedded.add(ids, texts, vectors)
    query = itlr.parse('"zebra" AND NOT "gamma"')
    terms = np.eye(DIMS)[[0, 2]].astype(np.float32)
    hybrid = TruthMap("hybrid", lexical=0.9)
    exact = embedded.search(query, terms, SearchOptions(k=10, mode="exact", truth=hybrid))
    assert exact[0].id == "doc300"
    hits = backend.search(query, terms, SearchOptions(k=10, candidates=50, truth=hybrid))
    assert hits.exact is True and not hits.warnings
    assert hits[0].id == "doc300"
    for mine, theirs in zip(hits, exact, strict=True):
        assert mine.score == pytest.approx(theirs.score, abs=1e-4)


@pytest.mark.opensearch
def test_opensearch_says_hybrid_truths_are_unproved_when_too_many_documents_mention_a_term(
    opensearch_index,
) -> None:
    # 301 passages mention "zebra": more than the 100 that a cap of 100 per positive term
    # gathers, so the search runs one round and says its top 10 is not proved.
    ids, texts, vectors = zebra_corpus("alpha zebra")
    backend = opensearch_index(DIMS)
    assert backend.add(ids, texts, vectors) == {}
    backend.refresh()
    query = itlr.parse('"zebra"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    options = SearchOptions(k=10, candidates=50, max_candidates=100, truth=TruthMap("hybrid"))
    hits = backend.search(query, terms, options)
    assert hits.exact is False and len(hits) == 10
    (warning,) = [w for w in hits.warnings if "not proved" in w]
    assert "301 documents mention" in warning and "max_candidates" in warning
    roomy = backend.search(query, terms, replace(options, max_candidates=400))
    assert roomy.exact is True


# -- fewer than k documents above 0: the tail ties at 0 with every unseen one (issue 42) --------


@pytest.fixture()
def sparse(tmp_path: Path) -> EmbeddedBackend:
    """3 documents near "a", 600 facing away from it (cosine < 0: a clamp truth of 0)."""
    rng = np.random.default_rng(1)
    a = np.eye(DIMS)[0]
    away = rng.normal(size=(600, DIMS))
    away[:, 0] = -np.abs(away[:, 0]) - 0.5
    near = np.tile(a, (3, 1)) + 0.1 * rng.normal(size=(3, DIMS))
    near[:, 0] = 1.0
    vectors = unit_rows(np.vstack([near, away])).astype(np.float32)
    ids = [f"near{i}" for i in range(3)] + [f"away{i:03d}" for i in range(600)]
    index = EmbeddedBackend.create(tmp_path / "sparse", "test-model", DIMS)
    index.add(ids, [""] * len(ids), vectors)
    return index


def test_fewer_than_k_above_zero_is_not_certified_exact(sparse: EmbeddedBackend) -> None:
    query = itlr.parse('"a"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    exact = sparse.search(query, terms, cosine_options(k=10, mode="exact"))
    assert sum(h.score > 0 for h in exact) == 3 and exact.exact is True
    graph_walks(sparse)  # on the graph: without it, knn mode scores every row
    hits = sparse.search(query, terms, cosine_options(k=10, candidates=20, max_candidates=20))
    assert hits.exact is not True
    assert [h.id for h in hits][:3] == [h.id for h in exact][:3]
    # Every document seen (the cap reaches the index size): the top k is the exact one again.
    whole = sparse.search(query, terms, cosine_options(k=10, candidates=20, max_candidates=700))
    assert whole.exact is True and [h.id for h in whole] == [h.id for h in exact]


def test_an_index_of_fewer_than_k_documents_is_still_exact(tmp_path: Path) -> None:
    index = EmbeddedBackend.create(tmp_path / "tiny", "test-model", DIMS)
    vectors = unit_rows(np.vstack([np.eye(DIMS)[0], -np.eye(DIMS)[0]])).astype(np.float32)
    index.add(["near", "away"], ["", ""], vectors)
    hits = index.search(
        itlr.parse('"a"'), np.eye(DIMS)[:1].astype(np.float32), cosine_options(k=10)
    )
    assert hits.exact is True and [h.id for h in hits] == ["near", "away"]


@pytest.mark.opensearch
def test_opensearch_does_not_certify_fewer_than_k_above_zero(opensearch_index, sparse) -> None:
    backend = opensearch_index(DIMS)
    ids = sparse.ids()
    assert backend.add(ids, [""] * len(ids), np.stack([sparse.vector(i) for i in ids])) == {}
    backend.refresh()
    query = itlr.parse('"a"')
    terms = np.eye(DIMS)[:1].astype(np.float32)
    hits = backend.search(query, terms, cosine_options(k=10, candidates=20, max_candidates=40))
    assert hits.exact is not True
    assert {h.id for h in hits if h.score > 0} == {"near0", "near1", "near2"}
