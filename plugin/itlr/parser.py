"""Text -> query tree, with pyparsing.

Grammar (NOT binds tighter than AND, AND tighter than OR, parentheses override):

    query    := disj
    disj     := conj (OR conj)*
    conj     := negation ((AND negation) | prefixed)*      # `a -b` means `a AND NOT b`
    negation := NOT negation | atom
    atom     := term weight? | "(" disj ")"
    weight   := "^" number                                  # a finite number from 0 to 1000
    term     := quoted string | bare phrase (words up to the next operator or parenthesis)

Operators are case-insensitive words (AND, OR, NOT) or the Lucene/Kibana spellings `&&`, `||`,
`!` and a leading `-`.
"""

from __future__ import annotations

import math
import re
from functools import cache

import pyparsing as pp

from itlr.errors import QuerySyntaxError
from itlr.limits import LIMITS
from itlr.tree import MAX_WEIGHT, And, Node, Not, Or, Term

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_BINARY_OPERATOR = re.compile(r"(?i)(and|or)\b|&&|\|\|")


def _located(expr: pp.ParserElement) -> pp.ParserElement:
    return pp.Located(expr)


def _span(tokens: pp.ParseResults) -> tuple[int, int]:
    return int(tokens[0]), int(tokens[2])


def _quoted(mark: str) -> pp.ParserElement:
    return pp.QuotedString(mark, esc_char="\\", convert_whitespace_escapes=False, multiline=True)


@cache
def _grammar() -> pp.ParserElement:
    # No packrat: this grammar barely backtracks, and pyparsing's cache is process-wide (it would
    # switch on for every pyparsing user) and made our parses 1.6-3x slower (docs/query-language.md, Parsing).
    and_op = pp.Suppress(pp.CaselessKeyword("AND") | pp.Literal("&&"))
    or_op = pp.Suppress(pp.CaselessKeyword("OR") | pp.Literal("||"))
    not_word = pp.CaselessKeyword("NOT")
    prefix_not = pp.Literal("!") | pp.Literal("-")
    not_op = pp.Suppress(not_word | prefix_not)
    keyword = pp.CaselessKeyword("AND") | pp.CaselessKeyword("OR") | not_word

    quoted = _quoted('"') | _quoted("'")
    # A bare word may hold '-', '!', "'" inside ("COVID-19", "don't") but may not start with an
    # operator character, and never swallows `&&` / `||`.
    bare_word = pp.Regex(r"""(?![-!'"])(?:(?!&&|\|\|)[^\s()"^])+""")
    bare = pp.original_text_for(pp.OneOrMore(~keyword + bare_word))
    weight = pp.Suppress("^") - pp.Regex(r"\d+(?:\.\d*)?|\.\d+").set_name("a number")

    term = (_located(quoted | bare) + pp.Optional(weight)).set_name("a term")
    term.set_parse_action(_make_term)

    disj = pp.Forward()
    disj.set_name("a term")
    group = pp.Suppress("(") - disj - pp.Suppress(")")
    atom = (term | group).set_name("a term")
    negation = pp.Forward()
    negation.set_name("a term")
    negation <<= (_located(not_op - negation).set_parse_action(_make_not) | atom).set_name("a term")
    implicit_not = pp.FollowedBy(prefix_not) + negation
    conj = _located(negation + pp.ZeroOrMore((and_op - negation) | implicit_not))
    conj.set_parse_action(lambda t: _make_nary(And, t))
    disj <<= _located(conj + pp.ZeroOrMore(or_op - conj)).set_parse_action(
        lambda t: _make_nary(Or, t)
    )
    disj.parse_with_tabs()
    return disj


def _make_term(text: str, loc: int, tokens: pp.ParseResults) -> Term:
    start, end = _span(tokens)
    raw = tokens[1][0]
    value = " ".join(raw.split()) if text[start] not in "\"'" else raw
    if not value.strip():
        raise QuerySyntaxError("empty term: write some text between the quotes", start, text)
    weight = float(tokens[3]) if len(tokens) > 3 else 1.0
    if len(tokens) > 3:
        end = text.index("^", end) + 1 + len(tokens[3])
        if not math.isfinite(weight) or weight > MAX_WEIGHT:
            raise QuerySyntaxError(
                f"weight {tokens[3][:12]}{'...' if len(tokens[3]) > 12 else ''} is too large: "
                f"weights go from 0 to {MAX_WEIGHT:g}",
                end - len(tokens[3]),
                text,
            )
    return Term(value, weight, (start, end))


def _make_not(tokens: pp.ParseResults) -> Not:
    return Not(tokens[1][0], _span(tokens))


def _make_nary(kind: type[And] | type[Or], tokens: pp.ParseResults) -> Node:
    operands: tuple[Node, ...] = tuple(tokens[1])
    if len(operands) == 1:
        return operands[0]
    return kind(operands, _span(tokens))


def _check_brackets_and_quotes(text: str) -> None:
    depth_stack: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        at_term_start = i == 0 or text[i - 1] in " \t\n(!-"
        if char in "\"'" and (char == '"' or at_term_start):
            close = i + 1
            while close < len(text) and text[close] != char:
                close += 2 if text[close] == "\\" else 1
            if close >= len(text):
                raise QuerySyntaxError(f"unterminated quote {char}: close it", i, text)
            i = close + 1
            continue
        if char == "(":
            depth_stack.append(i)
        elif char == ")":
            if not depth_stack:
                raise QuerySyntaxError("unbalanced ')': no '(' opens it", i, text)
            depth_stack.pop()
        i += 1
    if depth_stack:
        raise QuerySyntaxError("unbalanced '(': close it with ')'", depth_stack[-1], text)


def _explain_failure(text: str, position: int) -> str:
    rest = text[position:]
    if text[:position].rstrip().endswith("^") or rest.startswith("^"):
        return "a weight needs a number after '^', e.g. \"bone health\"^0.5"
    if not rest.strip():
        return "query ends after an operator: expected a term"
    operator = _BINARY_OPERATOR.match(rest)
    if operator:
        return f"expected a term before {operator.group(0)!r}"
    if rest.startswith(")"):
        return "expected a term before ')'"
    return "expected AND, OR or NOT between terms (quote text that contains operators)"


def parse_tree(text: str) -> Node:
    """The tree of a logical query's text; raise QuerySyntaxError pointing at the problem.

    Knows nothing of `itlr.query.Query`: `itlr.query.parse` wraps the tree with its text.
    """
    if not isinstance(text, str):
        raise TypeError(f"query must be a str, not {type(text).__name__}")
    LIMITS.check_query_text(text)  # bounded before pyparsing, whose time grows with the terms
    if not text.strip():
        raise QuerySyntaxError("empty query: write at least one term", 0, text)
    surrogate = _LONE_SURROGATE.search(text)
    if surrogate:
        raise QuerySyntaxError(
            f"not valid Unicode text ({surrogate.group()!a}, from bytes that are not UTF-8?): "
            "write the query in UTF-8",
            surrogate.start(),
            text,
        )
    _check_brackets_and_quotes(text)
    try:
        result = _grammar().parse_string(text, parse_all=True)
    except pp.ParseBaseException as failure:
        position = min(max(failure.loc, 0), len(text))
        while position < len(text) and text[position].isspace():
            position += 1
        raise QuerySyntaxError(_explain_failure(text, position), position, text) from None
    except RecursionError:
        raise QuerySyntaxError("query is nested too deeply", 0, text) from None
    root: Node = result[0]
    return root
