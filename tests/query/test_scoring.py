"""Fuzzy composition against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

import itlr
from itlr import ConfigurationError, Operators, TruthMap
from itlr.program import Op

S = {"dog": 0.5, "cat": 0.4, "mouse": 0.3, "giraffe": 0.2}
APPENDIX_A = '("dog" OR "cat" AND "mouse") AND NOT "giraffe"'


def test_appendix_a_query_scores_as_the_paper_writes_it() -> None:
    expected = (S["dog"] + S["cat"] * S["mouse"]) * (1 - S["giraffe"])
    assert itlr.parse(APPENDIX_A).evaluate(S) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        (Operators("product", "sum", "complement"), (0.5 + 0.4 * 0.3) * (1 - 0.2)),
        (Operators("sum", "sum", "complement"), (0.5 + (0.4 + 0.3)) + (1 - 0.2)),
        (Operators("min", "max", "complement"), min(max(0.5, min(0.4, 0.3)), 1 - 0.2)),
        (Operators("product", "max", "reciprocal"), max(0.5, 0.4 * 0.3) * (1 / 0.2)),
        (Operators("min", "sum", "reciprocal"), min(0.5 + min(0.4, 0.3), 1 / 0.2)),
        # cat AND mouse = max(0, .4 + .3 - 1) = 0; dog OR 0 = .5; .5 AND .8 = max(0, .5 + .8 - 1)
        (Operators("lukasiewicz", "probsum"), 0.3),
    ],
)
def test_every_operator_family_composes_as_defined(ops: Operators, expected: float) -> None:
    assert itlr.parse(APPENDIX_A).evaluate(S, ops) == pytest.approx(expected)


def test_reciprocal_not_guards_zero_with_epsilon() -> None:
    ops = Operators(not_="reciprocal", eps=0.01)
    assert itlr.parse("NOT x").evaluate({"x": 0.0}, ops) == pytest.approx(100.0)


def test_evaluate_works_over_arrays_of_documents() -> None:
    truths = {"a": np.array([0.9, 0.1, 0.5]), "b": np.array([0.1, 0.9, 0.5])}
    scores = itlr.parse("a AND NOT b").evaluate(truths)
    np.testing.assert_allclose(scores, [0.9 * 0.9, 0.1 * 0.1, 0.25])


def test_weight_below_one_softens_a_conjunct_towards_the_and_identity() -> None:
    truths = {"a": 0.8, "b": 0.2}
    assert itlr.parse('a AND "b"^0.5').evaluate(truths) == pytest.approx(
        0.8 * (1 + 0.5 * (0.2 - 1))
    )
    assert itlr.parse('a AND "b"^0').evaluate(truths) == pytest.approx(0.8)
    summed = itlr.parse('a AND "b"^0.5').evaluate(truths, Operators(and_="sum"))
    assert summed == pytest.approx(0.8 + 0.5 * 0.2)


def test_a_heavy_conjunct_weight_pushes_down_to_zero_and_no_further() -> None:
    # 1 + 2 * (x - 1): 0.6 -> 0.2, but 0.2 -> 0 (not -0.6), so two heavy factors far from
    # their terms cannot multiply to a high score.
    assert itlr.parse('"a"^2 AND b').evaluate({"a": 0.6, "b": 0.5}) == pytest.approx(0.1)
    assert itlr.parse('"a"^2 AND "b"^2').evaluate({"a": 0.2, "b": 0.1}) == 0.0


def test_weighted_not_is_one_minus_w_x() -> None:
    assert itlr.parse('NOT "b"^0.5').evaluate({"b": 0.6}) == pytest.approx(1 - 0.5 * 0.6)


def test_weight_scales_a_disjunct() -> None:
    assert itlr.parse('"a"^2 OR b').evaluate({"a": 0.3, "b": 0.1}) == pytest.approx(0.7)


def test_program_is_one_flat_postfix_list() -> None:
    program = itlr.parse(APPENDIX_A).program
    assert program.terms == ("dog", "cat", "mouse", "giraffe")
    assert program.instructions == (
        (Op.PUSH, 0),
        (Op.PUSH, 1),
        (Op.PUSH, 2),
        (Op.AND, 2),
        (Op.OR, 2),
        (Op.PUSH, 3),
        (Op.NOT, 0),
        (Op.AND, 2),
    )
    assert program.flat() == [0, 0, 0, 1, 0, 2, 1, 2, 2, 2, 0, 3, 3, 0, 1, 2]


def test_repeated_terms_share_one_slot() -> None:
    program = itlr.parse("a AND (a OR b)").program
    assert program.terms == ("a", "b")
    assert [arg for op, arg in program.instructions if op is Op.PUSH] == [0, 0, 1]


def test_missing_truth_value_is_named() -> None:
    with pytest.raises(KeyError, match="giraffe"):
        itlr.parse(APPENDIX_A).evaluate({"dog": 1, "cat": 1, "mouse": 1})


def test_truth_maps() -> None:
    cosines = np.array([[-0.5, 0.25, 1.0]])
    terms = ("x", "y", "z")
    np.testing.assert_allclose(TruthMap("clamp").apply(cosines, terms), [[0, 0.25, 1]])
    np.testing.assert_allclose(TruthMap("shift").apply(cosines, terms), [[0.25, 0.625, 1]])
    sigmoid = TruthMap("sigmoid", tau=0.25, lam=4.0, per_term={"z": (1.0, 2.0)})
    expected = 1 / (1 + np.exp(-(np.array([-0.5, 0.25, 1.0]) - [0.25, 0.25, 1.0]) * [4, 4, 2]))
    np.testing.assert_allclose(sigmoid.apply(cosines, terms)[0], expected)
    assert TruthMap.from_dict(sigmoid.to_dict()) == sigmoid


@pytest.mark.parametrize("bad", [{"and_": "xor"}, {"or_": "min"}, {"not_": "neg"}, {"eps": 0}])
def test_unknown_operators_are_refused_with_the_choices(bad: dict) -> None:
    with pytest.raises(ConfigurationError, match=r"choose|eps"):
        Operators(**bad)


def test_not_strength_negates_that_share_of_the_value() -> None:
    half = Operators(not_strength=0.5)
    assert itlr.parse("a AND NOT b").evaluate({"a": 0.8, "b": 0.6}, half) == pytest.approx(
        0.8 * (1 - 0.5 * 0.6)
    )
    reciprocal = Operators(not_="reciprocal", not_strength=0.5, eps=0.01)
    assert itlr.parse("NOT b").evaluate({"b": 0.6}, reciprocal) == pytest.approx(1 / 0.3)


def test_query_evaluate_keeps_the_papers_not_while_searches_default_to_half_strength() -> None:
    from itlr.options import SearchOptions
    from itlr.scoring import DEFAULT_NOT_STRENGTH

    assert itlr.parse("NOT b").evaluate({"b": 0.6}) == pytest.approx(0.4)
    assert SearchOptions().ops.not_strength == DEFAULT_NOT_STRENGTH == 0.5
    assert SearchOptions().ops.to_params()["not_strength"] == 0.5


@pytest.mark.parametrize("strength", [-0.1, 1.5, float("nan")])
def test_not_strength_outside_zero_one_is_refused(strength: float) -> None:
    with pytest.raises(ConfigurationError, match="not_strength"):
        Operators(not_strength=strength)
