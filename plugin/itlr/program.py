"""The query tree compiled to one flat postfix program.

This list of (opcode, argument) pairs is the single source of truth for scoring: numpy runs it
here over all documents at once, and the Painless scripts in scripts/painless/ run the very same
list (flattened to ints in params) inside OpenSearch and Elasticsearch.

Opcodes:
    PUSH i           push the truth value of term i (index into Program.terms)
    AND n / OR n     pop n values, push their conjunction / disjunction
    NOT 0            pop one value, push its negation
    WEIGHT_AND k     pop x, push max(0, a + w_k * (x - a)) with a the AND identity (1, or 0 for
                     sum)
    WEIGHT k         pop x, push w_k * x

Term weights therefore mean "how much this term counts": under an AND a weight below 1 pulls
the term towards the value that leaves the conjunction unchanged (0 = ignore it), one above 1
pushes it away, down to 0 and no further (a truth value stays a truth value: unclamped, two
heavy factors far from their terms would multiply to a high score); everywhere else
(OR, NOT, the root) it scales the truth value, so `NOT "x"^w` is the weighted NOT 1 - w*x.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from itlr.scoring import Operators
from itlr.tree import And, Node, Not, Term

# One truth value per document (an array), or of one document (a float).
Truth = float | np.ndarray


class Op(IntEnum):
    PUSH = 0
    AND = 1
    OR = 2
    NOT = 3
    WEIGHT_AND = 4
    WEIGHT = 5


@dataclass(frozen=True)
class Program:
    instructions: tuple[tuple[Op, int], ...]
    terms: tuple[str, ...]
    weights: tuple[float, ...]

    def flat(self) -> list[int]:
        """Opcodes and arguments interleaved, as the Painless interpreters read them."""
        return [int(value) for pair in self.instructions for value in pair]

    def to_params(self) -> dict[str, object]:
        return {"program": self.flat(), "weights": list(self.weights)}

    def compose(
        self, truths: Mapping[str, float | np.ndarray], ops: Operators
    ) -> float | np.ndarray:
        """Compose named truth values (floats, or arrays over documents) into scores."""
        missing = [t for t in self.terms if t not in truths]
        if missing:
            raise KeyError(f"no truth value for term(s) {missing}")
        columns = [truths[t] for t in self.terms]
        return self.run(columns, ops)

    def compose_matrix(self, truth_matrix: np.ndarray, ops: Operators) -> np.ndarray:
        """Score every row of a (documents x terms) truth matrix."""
        return np.asarray(self.run(list(truth_matrix.T), ops))

    def run(self, columns: list[Truth], ops: Operators) -> Truth:
        stack: list[Truth] = []
        for op, arg in self.instructions:
            if op is Op.PUSH:
                stack.append(columns[arg])
            elif op is Op.NOT:
                stack.append(ops.negate(stack.pop()))
            elif op is Op.WEIGHT:
                stack.append(self.weights[arg] * stack.pop())
            elif op is Op.WEIGHT_AND:
                identity = ops.and_identity
                weighted = identity + self.weights[arg] * (stack.pop() - identity)
                stack.append(np.maximum(weighted, 0.0))
            else:
                operands = stack[-arg:]
                del stack[-arg:]
                stack.append(ops.conjoin(operands) if op is Op.AND else ops.disjoin(operands))
        (result,) = stack
        return result


def compile_tree(root: Node, terms: tuple[str, ...]) -> Program:
    """The postfix program of a tree whose distinct term texts are `terms`, in that order."""
    index = {text: i for i, text in enumerate(terms)}
    instructions: list[tuple[Op, int]] = []
    weights: list[float] = []

    def emit(node: Node, parent: Node | None) -> None:
        if isinstance(node, Term):
            instructions.append((Op.PUSH, index[node.text]))
            if node.weight != 1.0:
                weights.append(node.weight)
                kind = Op.WEIGHT_AND if isinstance(parent, And) else Op.WEIGHT
                instructions.append((kind, len(weights) - 1))
        elif isinstance(node, Not):
            emit(node.operand, node)
            instructions.append((Op.NOT, 0))
        else:
            for child in node.operands:
                emit(child, node)
            kind = Op.AND if isinstance(node, And) else Op.OR
            instructions.append((kind, len(node.operands)))

    emit(root, None)
    return Program(tuple(instructions), terms, tuple(weights))


__all__ = ["Op", "Program", "compile_tree"]
