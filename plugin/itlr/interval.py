"""The postfix program run over intervals: for every box of truth values, the least and the
greatest score any point in the box can compose to.

The certificate (itlr.certificate) needs the greatest score an unseen document could reach.
Reading it off the box's upper corner is right only when the score is monotone in every term,
which the program does not promise (a term both wanted and excluded, weighted operands outside
[0, 1] under probsum). Interval arithmetic needs no such property: each
operator maps the intervals of its operands to an interval holding every value it can take.
Where every term occurs once in the query, the result is the exact range over the box (each
operator is evaluated on independent operands); where a term occurs twice it is a valid but
wider enclosure.
"""

from __future__ import annotations

import numpy as np

from itlr.program import Op, Program
from itlr.scoring import Operators

# One interval per box: (lower ends, upper ends), arrays of the same shape.
Interval = tuple[np.ndarray, np.ndarray]


def program_range(
    program: Program, lower: np.ndarray, upper: np.ndarray, ops: Operators
) -> Interval:
    """Per row of the (boxes x terms) truth bounds, the range of the program's score (before
    the engines' clamp at 0)."""
    stack: list[Interval] = []
    for op, arg in program.instructions:
        if op is Op.PUSH:
            stack.append((lower[:, arg], upper[:, arg]))
        elif op is Op.NOT:
            stack.append(_negated(stack.pop(), ops))
        elif op is Op.WEIGHT:
            stack.append(_affine(stack.pop(), program.weights[arg], 0.0))
        elif op is Op.WEIGHT_AND:
            identity = ops.and_identity
            weight = program.weights[arg]
            low, high = _affine(stack.pop(), weight, identity * (1.0 - weight))
            stack.append((np.maximum(low, 0.0), np.maximum(high, 0.0)))
        else:
            operands = stack[-arg:]
            del stack[-arg:]
            combine = _conjoined if op is Op.AND else _disjoined
            result = operands[0]
            for operand in operands[1:]:
                result = combine(result, operand, ops)
            stack.append(result)
    (result,) = stack
    return result


def _affine(x: Interval, scale: float, offset: float) -> Interval:
    """offset + scale * x."""
    a, b = offset + scale * x[0], offset + scale * x[1]
    return np.minimum(a, b), np.maximum(a, b)


def _negated(x: Interval, ops: Operators) -> Interval:
    # Both negations decrease in their operand (strength is >= 0).
    low, high = ops.not_strength * x[0], ops.not_strength * x[1]
    if ops.not_ == "complement":
        return 1.0 - high, 1.0 - low
    return 1.0 / np.maximum(high, ops.eps), 1.0 / np.maximum(low, ops.eps)


def _product(x: Interval, y: Interval) -> Interval:
    # Bilinear: extreme at a corner of the box.
    corners = np.stack([a * b for a in x for b in y])
    return corners.min(axis=0), corners.max(axis=0)


def _conjoined(x: Interval, y: Interval, ops: Operators) -> Interval:
    if ops.and_ == "product":
        return _product(x, y)
    if ops.and_ == "sum":
        return x[0] + y[0], x[1] + y[1]
    if ops.and_ == "min":
        return np.minimum(x[0], y[0]), np.minimum(x[1], y[1])
    # Lukasiewicz max(0, x + y - 1) increases in both operands.
    return np.maximum(0.0, x[0] + y[0] - 1.0), np.maximum(0.0, x[1] + y[1] - 1.0)


def _disjoined(x: Interval, y: Interval, ops: Operators) -> Interval:
    if ops.or_ == "sum":
        return x[0] + y[0], x[1] + y[1]
    if ops.or_ == "max":
        return np.maximum(x[0], y[0]), np.maximum(x[1], y[1])
    # probsum x + y - xy is bilinear, so over a box it is extreme at a corner.
    corners = np.stack([a + b - a * b for a in x for b in y])
    return corners.min(axis=0), corners.max(axis=0)


__all__ = ["Interval", "program_range"]
