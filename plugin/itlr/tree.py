"""The logical query tree: small frozen nodes that remember where they came from.

Spans never take part in equality, so a parsed tree equals the tree parsed from its canonical
form even though the two texts differ. `itlr.query.Query` wraps a tree with what is derived
from it; the nodes know nothing of queries, programs or engines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Union

Span = tuple[int, int]
NO_SPAN: Span = (0, 0)


class _Composable:
    """`&`, `|` and `~` build trees: `Term("a") & ~Term("b")` is `("a" AND NOT "b")`.

    Operands of the same kind merge, as the parser merges `"a" AND "b" AND "c"` into one And, so
    a built tree equals the parsed one.
    """

    __slots__ = ()

    def __and__(self, other: object) -> And:
        return And(_flatten(And, self, other))

    def __or__(self, other: object) -> Or:
        return Or(_flatten(Or, self, other))

    def __invert__(self) -> Not:
        return Not(self)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Term(_Composable):
    text: str
    weight: float = 1.0
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

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


@dataclass(frozen=True)
class And(_Composable):
    operands: tuple[Node, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return "(" + " AND ".join(str(o) for o in self.operands) + ")"


@dataclass(frozen=True)
class Or(_Composable):
    operands: tuple[Node, ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)

    def __str__(self) -> str:
        return "(" + " OR ".join(str(o) for o in self.operands) + ")"


Node = Union[Term, Not, And, Or]  # noqa: UP007 - a runtime alias used in isinstance-free typing


def _node(value: object) -> Node:
    """A node, or the root of a query (anything holding a tree as `root`)."""
    root = getattr(value, "root", value)
    if isinstance(root, Term | Not | And | Or):
        return root
    raise TypeError(
        f"cannot combine a query with {type(value).__name__}: use itlr.Term(...) or a parsed query"
    )


def _flatten(kind: type[And] | type[Or], *parts: object) -> tuple[Node, ...]:
    operands: list[Node] = []
    for part in parts:
        node = _node(part)
        operands.extend(node.operands if isinstance(node, kind) else (node,))
    return tuple(operands)


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal."""
    yield node
    if isinstance(node, Not):
        yield from walk(node.operand)
    elif isinstance(node, And | Or):
        for child in node.operands:
            yield from walk(child)


def _node_to_dict(node: Node) -> dict:
    if isinstance(node, Term):
        return {"term": node.text, "weight": node.weight, "span": list(node.span)}
    if isinstance(node, Not):
        return {"not": _node_to_dict(node.operand), "span": list(node.span)}
    key = "and" if isinstance(node, And) else "or"
    return {key: [_node_to_dict(o) for o in node.operands], "span": list(node.span)}
