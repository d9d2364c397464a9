"""The query language: what parses, what it means, and how errors point at the text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import itlr
from itlr import And, Not, Or, QuerySyntaxError, Term


def canonical(text: str) -> str:
    return str(itlr.parse(text))


def test_appendix_a_query_has_the_papers_canonical_form() -> None:
    assert (
        canonical('("dog" OR "cat" AND "mouse") AND NOT "giraffe"')
        == '(("dog" OR ("cat" AND "mouse")) AND NOT "giraffe")'
    )


def test_not_binds_tighter_than_and_which_binds_tighter_than_or() -> None:
    query = itlr.parse("a OR NOT b AND c")
    assert query.root == Or((Term("a"), And((Not(Term("b")), Term("c")))))


def test_parentheses_override_precedence() -> None:
    assert itlr.parse("(a OR b) AND c").root == And((Or((Term("a"), Term("b"))), Term("c")))


def test_and_or_are_n_ary() -> None:
    assert itlr.parse("a AND b AND c").root == And((Term("a"), Term("b"), Term("c")))


def test_bare_multi_word_phrases_run_until_the_next_operator() -> None:
    assert canonical("vitamin D benefits AND NOT bone health") == (
        '("vitamin D benefits" AND NOT "bone health")'
    )


def test_operators_are_case_insensitive() -> None:
    assert canonical("a and b Or not c") == '(("a" AND "b") OR NOT "c")'


def test_lucene_and_kibana_operator_spellings() -> None:
    assert canonical("a && b || !c") == '(("a" AND "b") OR NOT "c")'


def test_leading_minus_means_and_not() -> None:
    assert canonical('vitamin D -"bone health"') == '("vitamin D" AND NOT "bone health")'
    assert canonical("-x") == 'NOT "x"'


def test_hyphens_and_apostrophes_inside_words_are_text() -> None:
    assert itlr.parse("COVID-19 vaccines").terms == ("COVID-19 vaccines",)
    assert itlr.parse("don't panic").terms == ("don't panic",)


def test_quoted_terms_keep_operators_and_escapes_as_text() -> None:
    query = itlr.parse('"cats AND dogs" OR "say \\"hi\\"" OR \'it\\\'s\'')
    assert query.terms == ("cats AND dogs", 'say "hi"', "it's")


def test_weights_parse_and_print() -> None:
    query = itlr.parse('"bone health"^0.5 AND x')
    assert query.root == And((Term("bone health", 0.5), Term("x")))
    assert str(query) == '("bone health"^0.5 AND "x")'


def test_duplicate_terms_are_listed_once() -> None:
    assert itlr.parse("a AND (a OR b) AND NOT b").terms == ("a", "b")


def test_nodes_carry_source_spans() -> None:
    text = 'x AND NOT "bone health"'
    root = itlr.parse(text).root
    assert isinstance(root, And)
    negation = root.operands[1]
    assert text[slice(*negation.span)] == 'NOT "bone health"'
    assert text[slice(*negation.operand.span)] == '"bone health"'


def test_positive_and_excluded_terms() -> None:
    query = itlr.parse("a AND NOT b AND (c OR NOT d) AND NOT NOT e")
    assert query.positive_terms == ("a", "c", "e")
    assert query.excluded_terms == ("b",)


def test_not_only_query_is_allowed_but_flagged() -> None:
    query = itlr.parse('NOT "bone health"')
    assert not query.has_positive_term
    assert query.warnings and "no positive term" in query.warnings[0]


@pytest.mark.parametrize(
    ("text", "anchored"),
    [
        ("a", True),
        ("a AND NOT b", True),
        ("a AND (b OR NOT c)", True),
        ("a OR b", True),
        ("a OR NOT b", False),
        ("NOT (a OR b)", False),
        ("NOT (NOT a AND NOT b)", True),
        ("NOT (a AND NOT b)", False),
        ("NOT NOT a", True),
        ("NOT a", False),
    ],
)
def test_a_query_is_anchored_when_scoring_well_needs_a_positive_term(
    text: str, anchored: bool
) -> None:
    query = itlr.parse(text)
    assert query.anchored is anchored
    assert bool(query.warnings) is not anchored


def test_a_not_under_an_or_warns_that_knn_mode_may_miss_documents() -> None:
    (warning,) = itlr.parse('"vitamin D" OR NOT "bone health"').warnings
    assert '`mode="exact"`' in warning and "\n" not in warning


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 0, "empty query"),
        ("   ", 0, "empty query"),
        ('""', 0, "empty term"),
        ("a AND", 5, "expected a term"),
        ("AND a", 0, "expected a term before 'AND'"),
        ("a AND OR b", 6, "expected a term before 'OR'"),
        ("(a OR b", 0, "unbalanced '('"),
        ("a OR b)", 6, "unbalanced ')'"),
        ("()", 1, "expected a term"),
        ('"abc', 0, "unterminated quote"),
        ('"a" "b"', 4, "expected AND, OR or NOT"),
        ("a^", 2, "weight needs a number"),
    ],
)
def test_syntax_errors_say_what_and_where(text: str, position: int, fragment: str) -> None:
    with pytest.raises(QuerySyntaxError) as raised:
        itlr.parse(text)
    assert raised.value.position == position
    assert fragment in raised.value.message
    caret_line = raised.value.caret.splitlines()[-1]
    assert caret_line == " " * position + "^"


# -- round trip and fuzzing ------------------------------------------------------------------

term_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
).filter(lambda s: s.strip() == s and s)
weights = st.sampled_from([1.0, 0.5, 2.0, 0.25, 3.0])
terms = st.builds(Term, term_text, weights)


def _n_ary(kind):
    return lambda children: st.lists(children, min_size=2, max_size=4).map(
        lambda items: kind(tuple(items))
    )


trees = st.recursive(
    terms,
    lambda children: st.one_of(children.map(Not), _n_ary(And)(children), _n_ary(Or)(children)),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_canonical_form_parses_back_to_the_same_tree(tree) -> None:
    text = str(itlr.Query(tree))
    assert itlr.parse(text).root == tree


@settings(max_examples=10_000, deadline=None)
@given(
    st.one_of(
        st.lists(
            st.sampled_from([*"ab ()\"'\\^!-&|\t", " AND ", " or ", "NOT ", "0.5", "x y"]),
            max_size=20,
        ).map("".join),
        st.text(max_size=30),
    )
)
def test_random_strings_raise_nothing_but_query_syntax_errors(text: str) -> None:
    try:
        query = itlr.parse(text)
    except QuerySyntaxError as error:
        assert 0 <= error.position <= len(text)
    else:
        assert itlr.parse(str(query)) == query
