"""A parsed logical query: the tree (itlr.tree) plus what is derived from it (terms, the
program, whether knn mode can find its best documents)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from types import MappingProxyType

import numpy as np

from itlr.limits import LIMITS
from itlr.parser import parse_tree
from itlr.program import Program, compile_tree
from itlr.scoring import Operators
from itlr.tree import (
    NO_SPAN,
    And,
    Node,
    Not,
    Or,
    Span,
    Term,
    fold_nnf,
    is_node,
    literals,
    node_to_dict,
    walk,
)

__all__ = ["NO_SPAN", "And", "Node", "Not", "Or", "Query", "Span", "Term", "parse", "walk"]


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
    def of(cls, value: Query | Node | str) -> Query:
        """The one coercion: query text is parsed, a built tree (`Term("a") & ~Term("b")`)
        wrapped, and a query stays itself."""
        if isinstance(value, Query):
            return value
        if isinstance(value, str):
            return parse(value)
        if is_node(value):
            LIMITS.check_tree(value)  # before str(), which recurses, walks a tree of any size
            return cls(value, str(value))
        raise TypeError(
            f"expected query text, a query or a tree node, not {type(value).__name__}: "
            "use itlr.Term(...) or itlr.parse(...)"
        )

    def __and__(self, other: Query | Node | str) -> Query:
        return Query.of(And((self.root, Query.of(other).root)))

    def __rand__(self, other: Query | Node | str) -> Query:
        return Query.of(And((Query.of(other).root, self.root)))

    def __or__(self, other: Query | Node | str) -> Query:
        return Query.of(Or((self.root, Query.of(other).root)))

    def __ror__(self, other: Query | Node | str) -> Query:
        return Query.of(Or((Query.of(other).root, self.root)))

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
        return tuple(self.positive_weights)

    @cached_property
    def negated_terms(self) -> frozenset[str]:
        """Terms every occurrence of which sits under an odd number of NOTs: the ones whose
        lexical evidence counts against a document (TruthMap.lexical_weights)."""
        negated: set[str] = set()
        positive: set[str] = set()
        for term, under_not in literals(self.root):
            (negated if under_not else positive).add(term.text)
        return frozenset(negated - positive)

    @cached_property
    def positive_weights(self) -> Mapping[str, float]:
        """Each positive term's weight (the largest where it occurs more than once), in order of
        first appearance: how much of it a candidate search's summed vector carries
        (itlr.candidates)."""
        weights: dict[str, float] = {}
        for term, negated in literals(self.root):
            if not negated:
                weights[term.text] = max(weights.get(term.text, 0.0), term.weight)
        return MappingProxyType(weights)

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

        # A conjunction is high only when every part is, so one anchored part suffices.
        return fold_nnf(
            self.root,
            lambda _term, negated: not negated,
            lambda conjunction, parts: any(parts) if conjunction else all(parts),
        )

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
        return compile_tree(self.root, self.terms)

    def evaluate(
        self,
        truths: Mapping[str, float | np.ndarray],
        ops: Operators | None = None,
    ) -> float | np.ndarray:
        """Compose per-term truth values (floats or arrays over documents) into one score."""
        return self.program.compose(truths, ops or Operators())

    def to_dict(self) -> dict[str, object]:
        return {"query": str(self), "tree": node_to_dict(self.root), "terms": list(self.terms)}


def parse(text: str) -> Query:
    """Parse a logical query; raise QuerySyntaxError pointing at the problem."""
    if not isinstance(text, str):
        raise TypeError(f"query must be a str, not {type(text).__name__}")
    LIMITS.check_query_text(text)  # every call: the limits may change, the cache does not
    return _parse(text)


# A service or the query-bar proxy sees the same query text again and again (a UI re-sends it on
# every refresh), and a parse costs milliseconds; the query is immutable, so the same object is
# handed out for the same text (itlr.query_memo keys on it).
@lru_cache(maxsize=1024)
def _parse(text: str) -> Query:
    return Query(parse_tree(text), text)
