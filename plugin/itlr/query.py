"""The logical query tree: small frozen nodes that remember where they came from.

Spans never take part in equality, so a parsed tree equals the tree parsed from its canonical
form even though the two texts differ.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    from itlr.program import Program
    from itlr.scoring import Operators

Span = tuple[int, int]
NO_SPAN: Span = (0, 0)


class _Composable:
    """`&`, `|` and `~` build trees: `Term("a") & ~Term("b")` is `("a" AND NOT "b")`.

    Operands of the same kind merge, as the parser merges `"a" AND "b" AND "c"` into one And, so
    a built tree equals the parsed one.
    """

    __slots__ = ()

    def __and__(self, other: Node | Query) -> And:
        return And(_flatten(And, self, other))

    def __or__(self, other: Node | Query) -> Or:
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
    if isinstance(value, Query):
        return value.root
    if isinstance(value, Term | Not | And | Or):
        return value
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


@dataclass(frozen=True)
class Query:
    """A parsed logical query: the tree plus the text it came from.

    What is derived from the tree (terms, program, ...) is computed once per query: a search
    asks for it several times, and the tree never changes.
    """

    root: Node
    source: str = field(default="", compare=False)

    def __str__(self) -> str:
        return str(self.root)

    @classmethod
    def of(cls, value: Query | Node) -> Query:
        """A query from a built tree (`Term("a") & ~Term("b")`); a query stays itself."""
        if isinstance(value, Query):
            return value
        root = _node(value)
        return cls(root, str(root))

    def __and__(self, other: Query | Node) -> Query:
        return Query.of(And(_flatten(And, self, other)))

    def __or__(self, other: Query | Node) -> Query:
        return Query.of(Or(_flatten(Or, self, other)))

    def __invert__(self) -> Query:
        return Query.of(Not(self.root))

    @cached_property
    def terms(self) -> tuple[str, ...]:
        """Distinct term texts in order of first appearance: each is embedded once."""
        seen: dict[str, None] = {}
        for node in walk(self.root):
            if isinstance(node, Term):
                seen.setdefault(node.text)
        return tuple(seen)

    @cached_property
    def positive_terms(self) -> tuple[str, ...]:
        """Terms reached through an even number of NOTs: the ones that gather candidates."""
        found: dict[str, None] = {}

        def visit(node: Node, negated: bool) -> None:
            if isinstance(node, Term):
                if not negated:
                    found.setdefault(node.text)
            elif isinstance(node, Not):
                visit(node.operand, not negated)
            else:
                for child in node.operands:
                    visit(child, negated)

        visit(self.root, False)
        return tuple(found)

    @cached_property
    def excluded_terms(self) -> tuple[str, ...]:
        """Terms of NOT-literals that are conjuncts of the root: safe to hard-filter.

        A document whose truth for such a term is high can never score well, whatever the other
        terms say, which is not true of a NOT below an OR.
        """
        conjuncts = self.root.operands if isinstance(self.root, And) else (self.root,)
        found: dict[str, None] = {}
        for node in conjuncts:
            if isinstance(node, Not) and isinstance(node.operand, Term):
                found.setdefault(node.operand.text)
        return tuple(found)

    @property
    def has_positive_term(self) -> bool:
        return bool(self.positive_terms)

    @cached_property
    def anchored(self) -> bool:
        """Whether every way to score well needs a high truth for some positive term.

        Then the best documents lie near a positive term, where knn mode gathers its candidates.
        `"a" OR NOT "b"` is not anchored: a document far from b scores well wherever it lies,
        and knn candidates (near a) can miss it. Negations are pushed inward (De Morgan), so
        `NOT ("a" OR "b")` is not anchored and `NOT (NOT "a" AND NOT "b")` is.
        """

        def needs_positive(node: Node, negated: bool) -> bool:
            if isinstance(node, Term):
                return not negated
            if isinstance(node, Not):
                return needs_positive(node.operand, not negated)
            parts = [needs_positive(child, negated) for child in node.operands]
            # A conjunction is high only when every part is, so one anchored part suffices;
            # under a NOT, AND and OR trade places.
            conjunction = isinstance(node, And) != negated
            return any(parts) if conjunction else all(parts)

        return needs_positive(self.root, False)

    @property
    def warnings(self) -> tuple[str, ...]:
        if not self.has_positive_term:
            return (
                "query has no positive term: nothing to gather candidates with, "
                "so every document is scored (exact mode)",
            )
        if not self.anchored:
            return (
                "documents far from every positive term can score well on this query (a NOT "
                "under an OR): knn mode gathers candidates near positive terms only and may "
                'miss them; use `mode="exact"` for a complete ranking',
            )
        return ()

    @cached_property
    def program(self) -> Program:
        from itlr.program import compile_query

        return compile_query(self)

    def evaluate(
        self,
        truths: Mapping[str, float | np.ndarray],
        ops: Operators | None = None,
    ) -> float | np.ndarray:
        """Compose per-term truth values (floats or arrays over documents) into one score."""
        from itlr.scoring import Operators

        return self.program.evaluate(truths, ops or Operators())

    def to_dict(self) -> dict:
        return {"query": str(self), "tree": _node_to_dict(self.root), "terms": list(self.terms)}
