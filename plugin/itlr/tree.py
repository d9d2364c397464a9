"""The logical query tree: small frozen nodes that remember where they came from.

Spans never take part in equality, so a parsed tree equals the tree parsed from its canonical
form even though the two texts differ. `itlr.query.Query` wraps a tree with what is derived
from it; the nodes know nothing of queries, programs or engines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar, Union

from itlr.errors import ConfigurationError

T = TypeVar("T")

Span = tuple[int, int]
NO_SPAN: Span = (0, 0)


class _Composable:
    """`&`, `|` and `~` build trees: `Term("a") & ~Term("b")` is `("a" AND NOT "b")`.

    Two nodes give a node; a node with anything else (a `Query`) defers to the other operand,
    so `Term & Query` and `Query & Term` are both queries.
    """

    __slots__ = ()

    def __and__(self, other: object) -> And:
        if not isinstance(other, Term | Not | And | Or):
            _refuse_non_query(other)
            return NotImplemented  # a Query's reflected operator builds a query
        return And((_as_node(self), other))

    def __or__(self, other: object) -> Or:
        if not isinstance(other, Term | Not | And | Or):
            _refuse_non_query(other)
            return NotImplemented  # a Query's reflected operator builds a query
        return Or((_as_node(self), other))

    def __invert__(self) -> Not:
        return Not(_as_node(self))


# A term's weight: a finite number from 0 to this, whether parsed (`"a"^2`) or built in code.
MAX_WEIGHT = 1000.0


@dataclass(frozen=True)
class Term(_Composable):
    text: str
    weight: float = 1.0
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The parser's bounds, for a term built in code too: NaN scores nothing yet passes
        # for exact, infinity overflows, a negative weight inverts the ranking.
        weight = self.weight
        number = isinstance(weight, int | float) and not isinstance(weight, bool)
        if not number or not math.isfinite(weight) or not 0 <= weight <= MAX_WEIGHT:
            raise ConfigurationError(
                f"the weight of term {self.text!r} is {weight!r}: weights are finite numbers "
                f"from 0 to {MAX_WEIGHT:g}"
            )

    def __str__(self) -> str:
        escaped = self.text.replace("\\", "\\\\").replace('"', '\\"')
        suffix = "" if self.weight == 1.0 else f"^{_plain_number(self.weight)}"
        return f'"{escaped}"{suffix}'


def _plain_number(value: float) -> str:
    """The shortest digits that read back as value, without an exponent (the grammar has none)."""
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class Not(_Composable):
    operand: Node
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return f"NOT {self.operand}"


def _merged(kind: type, operands: tuple[Node, ...]) -> tuple[Node, ...]:
    """Operands with those of the same kind spliced in: AND and OR are associative, so
    `a AND (b AND c)` is `a AND b AND c` however it was written or built."""
    if not any(isinstance(o, kind) for o in operands):
        return operands
    merged: list[Node] = []
    for operand in operands:
        merged.extend(
            operand.operands
            if isinstance(operand, And | Or) and type(operand) is kind
            else (operand,)
        )
    return tuple(merged)


@dataclass(frozen=True)
class And(_Composable):
    """A conjunction; nested conjunctions merge into it, so equal meaning is equal trees."""

    operands: tuple[Node, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", _merged(And, tuple(self.operands)))

    def __str__(self) -> str:
        return "(" + " AND ".join(str(o) for o in self.operands) + ")"


@dataclass(frozen=True)
class Or(_Composable):
    """A disjunction; nested disjunctions merge into it, as conjunctions do into an And."""

    operands: tuple[Node, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", _merged(Or, tuple(self.operands)))

    def __str__(self) -> str:
        return "(" + " OR ".join(str(o) for o in self.operands) + ")"


Node = Union[Term, Not, And, Or]  # noqa: UP007 - a runtime alias used in isinstance-free typing


def _as_node(value: _Composable) -> Node:
    """The node a `_Composable` is (every subclass is one of the four node kinds)."""
    assert isinstance(value, Term | Not | And | Or)
    return value


def _refuse_non_query(value: object) -> None:
    """Refuse an operand that is neither a node nor a query (anything holding a tree as `root`)."""
    if not is_node(getattr(value, "root", None)):
        raise TypeError(
            f"cannot combine a query with {type(value).__name__}: "
            "use itlr.Term(...) or itlr.parse(...)"
        )


def is_node(value: object) -> bool:
    return isinstance(value, Term | Not | And | Or)


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal."""
    yield node
    if isinstance(node, Not):
        yield from walk(node.operand)
    elif isinstance(node, And | Or):
        for child in node.operands:
            yield from walk(child)


def fold(
    node: Node,
    term: Callable[[Term], T],
    negation: Callable[[Not, T], T],
    junction: Callable[[And | Or, list[T]], T],
) -> T:
    """Bottom-up: each node's value from its children's values."""
    if isinstance(node, Term):
        return term(node)
    if isinstance(node, Not):
        return negation(node, fold(node.operand, term, negation, junction))
    return junction(node, [fold(child, term, negation, junction) for child in node.operands])


def fold_nnf(
    node: Node,
    literal: Callable[[Term, bool], T],
    junction: Callable[[bool, list[T]], T],
    negated: bool = False,
) -> T:
    """Fold over the negation normal form: NOTs pushed down to the terms (De Morgan).

    `literal(term, negated)` sees each term with the parity of the NOTs above it;
    `junction(conjunction, values)` sees each AND / OR as what it is once the NOTs above it are
    pushed through (under a NOT, AND and OR trade places). Operators compose fuzzily, so this is
    the shape of what can score well, not an equivalent query.
    """
    if isinstance(node, Term):
        return literal(node, negated)
    if isinstance(node, Not):
        return fold_nnf(node.operand, literal, junction, not negated)
    parts = [fold_nnf(child, literal, junction, negated) for child in node.operands]
    return junction(isinstance(node, And) != negated, parts)


def literals(node: Node) -> Iterator[tuple[Term, bool]]:
    """Each term in order with whether an odd number of NOTs lies above it."""
    if isinstance(node, Term):
        yield node, False
    elif isinstance(node, Not):
        for term, negated in literals(node.operand):
            yield term, not negated
    else:
        for child in node.operands:
            yield from literals(child)


def node_to_dict(node: Node) -> dict[str, object]:
    return fold(
        node,
        lambda t: {"term": t.text, "weight": t.weight, "span": list(t.span)},
        lambda n, inner: {"not": inner, "span": list(n.span)},
        lambda j, parts: {"and" if isinstance(j, And) else "or": parts, "span": list(j.span)},
    )
