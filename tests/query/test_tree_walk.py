"""One tree walk and one query algebra: built, parsed and proxy trees are the same trees."""

from __future__ import annotations

import numpy as np
import pyparsing as pp
import pytest

import itlr
from itlr import Operators, Term
from itlr.engines.factory import dialect_for
from itlr.errors import ConfigurationError, ItlrError
from itlr.proxy.clause import ClauseError
from itlr.query import Query
from itlr.tree import And, Not, Or, fold_nnf, literals


def test_a_built_tree_equals_the_parsed_one() -> None:
    assert Term("a") & ~Term("b") == itlr.parse('"a" AND NOT "b"').root


@pytest.mark.parametrize(
    ("nested", "flat"),
    [
        ("a AND (b AND c)", "a AND b AND c"),
        ("(a AND b) AND c", "a AND b AND c"),
        ("a OR (b OR (c OR d))", "a OR b OR c OR d"),
        ("NOT (a AND (b AND c))", "NOT (a AND b AND c)"),
        ("(a OR (b OR c)) AND (d AND e)", "(a OR b OR c) AND d AND e"),
    ],
)
def test_same_kind_nesting_merges_in_the_parser(nested: str, flat: str) -> None:
    assert itlr.parse(nested).root == itlr.parse(flat).root
    assert str(itlr.parse(nested)) == str(itlr.parse(flat))


def test_built_nesting_merges_like_parsed_nesting() -> None:
    a, b, c = Term("a"), Term("b"), Term("c")
    parsed = itlr.parse("a AND (b AND c)").root
    assert a & (b & c) == (a & b) & c == And((a, And((b, c)))) == parsed
    assert a | (b | c) == itlr.parse("a OR (b OR c)").root == Or((a, b, c))


def test_different_kinds_stay_nested() -> None:
    root = itlr.parse("a AND (b OR c)").root
    assert isinstance(root, And) and isinstance(root.operands[1], Or)
    assert str(root) == '("a" AND ("b" OR "c"))'


def test_a_node_with_a_query_gives_a_query_on_either_side() -> None:
    query = itlr.parse('"b" OR "c"')
    left, right = Term("a") & query, query & Term("a")
    assert isinstance(left, Query) and isinstance(right, Query)
    assert left.root == Term("a") & (Term("b") | Term("c"))
    assert right.root == (Term("b") | Term("c")) & Term("a")
    assert isinstance(Term("a") | query, Query) and isinstance(~query, Query)


def test_query_of_takes_text_a_node_or_a_query() -> None:
    query = itlr.parse('"a" AND NOT "b"')
    assert Query.of(query) is query
    assert Query.of('"a" AND NOT "b"') == query
    assert Query.of(Term("a") & ~Term("b")) == query
    assert str(Query.of(Term("a") & ~Term("b"))) == '("a" AND NOT "b")'
    with pytest.raises(TypeError, match="expected query text, a query or a tree node, not int"):
        Query.of(3)  # type: ignore[arg-type]


def test_nnf_fold_pushes_negations_to_the_terms() -> None:
    root = itlr.parse('NOT ("a" OR NOT "b") AND "c"').root
    assert [(t.text, negated) for t, negated in literals(root)] == [
        ("a", True),
        ("b", False),
        ("c", False),
    ]
    # NOT (a OR NOT b) is (NOT a AND b): a conjunction once the NOT is pushed through.
    shape = fold_nnf(
        root,
        lambda term, negated: ("-" if negated else "") + term.text,
        lambda conjunction, parts: ("&" if conjunction else "|").join(parts).join("()"),
    )
    assert shape == "((-a&b)&c)"


# Lukasiewicz AND is associative only on [0, 1]; a sum OR leaves it (docs/query-language.md, Parsing).
ASSOCIATIVE = [
    (a, o)
    for a in ("product", "sum", "min", "lukasiewicz")
    for o in ("sum", "max", "probsum")
    if (a, o) != ("lukasiewicz", "sum")
]


@pytest.mark.parametrize(("and_", "or_"), ASSOCIATIVE)
def test_merging_keeps_the_scores_of_truths_in_the_unit_interval(and_: str, or_: str) -> None:
    ops = Operators(and_, or_, "complement")
    rng = np.random.default_rng(1)
    x = {t: rng.random(200) for t in "abcd"}
    merged = itlr.parse("a AND (b AND (c OR (d OR a)))")
    by_hand = ops.conjoin([x["a"], ops.conjoin([x["b"], ops.disjoin([x["c"], x["d"], x["a"]])])])
    assert len(merged.root.operands) == 3  # type: ignore[union-attr]
    np.testing.assert_allclose(merged.evaluate(x, ops), by_hand, rtol=1e-12, atol=1e-12)


def test_parsing_leaves_pyparsing_packrat_off_for_the_process() -> None:
    # Other pyparsing users in the process (matplotlib's mathtext) may switch it on themselves:
    # start from off, and put back what was there.
    was_on = pp.ParserElement._packratEnabled
    pp.ParserElement.disable_memoization()
    try:
        itlr.parse('"packrat" AND ("stays" OR NOT "off")')
        assert not pp.ParserElement._packratEnabled
    finally:
        if was_on:
            pp.ParserElement.enable_packrat()


def test_errors_of_the_proxy_clause_and_the_engine_factory_are_itlr_errors() -> None:
    assert issubclass(ClauseError, ItlrError)
    with pytest.raises(ConfigurationError, match="unknown engine 'solr'"):
        dialect_for("solr")


def test_a_not_of_a_query_is_a_query_of_a_not() -> None:
    assert (~itlr.parse('"a"')).root == Not(Term("a"))
