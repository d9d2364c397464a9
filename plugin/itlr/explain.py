"""Why a hit scored what it did: the score as a tree that adds up to it.

Every node is a dict in the engines' own explanation shape (`value`, `description`, `details`),
so the query-bar proxy can hand it to Kibana / OpenSearch Dashboards as a hit's `_explanation`,
plus an `itlr` object with what the node is made of (operator names and parameters, a term's
inputs and truth mapping), which is what `recompute` reads back.

    score = max(0, root)                 node "score"
      AND / OR (operator)                node "and" / "or": the children's values composed
        NOT (operator, strength)         node "not"
          weight w                       node "weight" (under an AND: a + w * (x - a))
            term: inputs -> truth        node "term": a leaf per term occurrence

A term node keeps its inputs by name (`{"cosine": 0.61}`) beside the truth map's kind and
parameters, so a truth map that reads more than the cosine (a lexical value) adds an input
without changing the tree. The tree is built by walking the query's postfix program with the
same `Operators` the engines use, so its root is the score to float precision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from itlr.program import Op
from itlr.query import Query
from itlr.scoring import MAX_EVIDENCE, Operators, TruthMap

# A cluster computes in float32 Painless, itlr in float64: beyond this they disagree.
SCORE_TOLERANCE = 1e-4

Node = dict[str, Any]


def _node(value: float, description: str, details: list[Node], **itlr: Any) -> Node:
    return {"value": float(value), "description": description, "details": details, "itlr": itlr}


def truth_parameters(truth: TruthMap, term: str, share: float = 0.0) -> dict[str, float]:
    """The parameters the mapping uses for this term (none for clamp and shift; the term's
    lexical share for hybrid, or that it takes the larger evidence)."""
    if truth.kind == "hybrid":
        if share == MAX_EVIDENCE:
            return {"lexical_max": 1.0}
        return {"lexical_share": float(share)}
    if truth.kind != "sigmoid":
        return {}
    tau, lam = truth.per_term.get(term, (truth.tau, truth.lam))
    return {"tau": float(tau), "lam": float(lam)}


def _truth_formula(kind: str, parameters: Mapping[str, float]) -> str:
    if kind == "clamp":
        return "max(0, cosine)"
    if kind == "shift":
        return "(1 + cosine) / 2"
    if kind == "sigmoid":
        return f"1 / (1 + exp(-(cosine - {parameters['tau']:g}) * {parameters['lam']:g}))"
    if kind == "hybrid":
        if "lexical_max" in parameters:
            return "max(max(0, cosine), lexical)"
        share = parameters["lexical_share"]
        return f"{1 - share:g} * max(0, cosine) + {share:g} * lexical"
    return f"{kind} truth map"


def _map_truth(kind: str, parameters: Mapping[str, float], inputs: Mapping[str, float]) -> float:
    """A term's truth from its inputs, for the kinds whose formula is known here; a truth map
    this module does not know is taken at its recorded value (see `recompute`)."""
    cosine = inputs["cosine"]
    if kind == "hybrid":
        clamped = min(1.0, max(0.0, cosine))
        if "lexical_max" in parameters:
            return max(clamped, inputs["lexical"])
        share = parameters["lexical_share"]
        return (1.0 - share) * clamped + share * inputs["lexical"]
    if kind == "clamp":
        return min(1.0, max(0.0, cosine))
    if kind == "shift":
        return min(1.0, max(0.0, (1.0 + cosine) / 2.0))
    if kind == "sigmoid":
        return 1.0 / (1.0 + math.exp(-(cosine - parameters["tau"]) * parameters["lam"]))
    raise KeyError(kind)


def term_node(
    term: str,
    truth_value: float,
    inputs: Mapping[str, float],
    truth: TruthMap,
    share: float = 0.0,
) -> Node:
    parameters = truth_parameters(truth, term, share)
    shown = ", ".join(f"{name} {value:.4f}" for name, value in inputs.items())
    return _node(
        truth_value,
        f'"{term}": truth {_truth_formula(truth.kind, parameters)} of {shown}',
        [_node(value, name, [], node="input", name=name) for name, value in inputs.items()],
        node="term",
        term=term,
        inputs={name: float(value) for name, value in inputs.items()},
        truth={"kind": truth.kind, **parameters},
    )


def _operator_node(op: Op, arg: int, operands: list[Node], query: Query, ops: Operators) -> Node:
    if op is Op.NOT:
        (child,) = operands
        value = float(ops.negate(child["value"]))
        formula = (
            f"1 - {ops.not_strength:g} * x"
            if ops.not_ == "complement"
            else f"1 / max({ops.not_strength:g} * x, {ops.eps:g})"
        )
        return _node(
            value,
            f"NOT ({ops.not_}): {formula}",
            operands,
            node="not",
            operator=ops.not_,
            strength=ops.not_strength,
            eps=ops.eps,
        )
    if op in (Op.WEIGHT, Op.WEIGHT_AND):
        (child,) = operands
        weight = query.program.weights[arg]
        identity = ops.and_identity if op is Op.WEIGHT_AND else 0.0
        value = identity + weight * (child["value"] - identity)
        formula = (
            f"{identity:g} + {weight:g} * (x - {identity:g})" if identity else f"{weight:g} * x"
        )
        if op is Op.WEIGHT_AND:
            value, formula = max(0.0, value), f"max(0, {formula})"
        return _node(
            value, f"weight: {formula}", operands, node="weight", weight=weight, identity=identity
        )
    values = [child["value"] for child in operands]
    if op is Op.AND:
        return _node(
            float(ops.conjoin(values)),
            f"AND ({ops.and_}) of {len(values)}",
            operands,
            node="and",
            operator=ops.and_,
        )
    return _node(
        float(ops.disjoin(values)),
        f"OR ({ops.or_}) of {len(values)}",
        operands,
        node="or",
        operator=ops.or_,
    )


def explain_score(
    query: Query,
    inputs: Mapping[str, Sequence[float] | np.ndarray],
    ops: Operators,
    truth: TruthMap,
) -> Node:
    """The explanation tree of one document from its per-term inputs (each input name -> one
    value per query term, in query.terms order; "cosine" is always there)."""
    cosines = np.asarray(inputs["cosine"], dtype=np.float64)
    shares = truth.lexical_weights(query.terms, query.negated_terms)
    lexical_truths = inputs.get("lexical")
    truths = truth.apply(
        cosines[np.newaxis, :],
        query.terms,
        None
        if lexical_truths is None
        else np.asarray(lexical_truths, dtype=np.float64)[np.newaxis, :],
        shares if truth.uses_lexical else None,
    )[0]
    stack: list[Node] = []
    for op, arg in query.program.instructions:
        if op is Op.PUSH:
            term = query.terms[arg]
            term_inputs = {name: float(values[arg]) for name, values in inputs.items()}
            stack.append(
                term_node(term, float(truths[arg]), term_inputs, truth, float(shares[arg]))
            )
            continue
        count = arg if op in (Op.AND, Op.OR) else 1
        operands = stack[-count:]
        del stack[-count:]
        stack.append(_operator_node(op, arg, operands, query, ops))
    (root,) = stack
    return _node(
        max(root["value"], 0.0),
        "score = max(0, composed value): engines refuse negative scores",
        [root],
        node="score",
    )


def recompute(node: Node) -> float:
    """The score recomputed from the tree alone: each term's truth from its inputs (the
    recorded truth where the map is not one this module knows), then every operator as the
    node records it. `explain_score`'s root value and this agree to float precision; a tree
    that does not add up differs."""
    info = node["itlr"]
    kind = info["node"]
    if kind == "term":
        mapping = dict(info["truth"])
        name = mapping.pop("kind")
        try:
            return _map_truth(name, mapping, info["inputs"])
        except KeyError:
            return float(node["value"])
    values = [recompute(child) for child in node["details"]]
    if kind == "score":
        return max(values[0], 0.0)
    if kind == "weight":
        return cast(float, info["identity"] + info["weight"] * (values[0] - info["identity"]))
    if kind == "not":
        negation = Operators(not_=info["operator"], eps=info["eps"], not_strength=info["strength"])
        return float(negation.negate(values[0]))
    if kind == "and":
        return float(Operators(and_=info["operator"]).conjoin(values))
    if kind == "or":
        return float(Operators(or_=info["operator"]).disjoin(values))
    raise ValueError(f"not an itlr explanation node: {kind!r}")


def disagreement(hit_id: str, engine_score: float, explanation: Node) -> str | None:
    """A warning when the engine's score and the explained one differ beyond SCORE_TOLERANCE."""
    difference = abs(engine_score - explanation["value"])
    if difference <= SCORE_TOLERANCE:
        return None
    return (
        f"hit {hit_id}: the engine scored {engine_score:.6f}, the explanation adds up to "
        f"{explanation['value']:.6f} (difference {difference:.2e}): was the index embedded "
        "with another model, or are the stored scripts out of date?"
    )


def lines(node: Node, indent: str = "") -> list[str]:
    """The tree as indented text lines for a terminal, each `value  description`."""
    out = [f"{indent}{node['value']:.4f}  {node['description']}"]
    if node["itlr"]["node"] == "term":
        return out  # its inputs are already on the line
    for child in node["details"]:
        out += lines(child, indent + "  ")
    return out


def without_itlr(node: Node) -> Node:
    """Only the engines' own keys (value, description, details), for a UI that expects an
    Elasticsearch `_explanation` and nothing else."""
    return {
        "value": node["value"],
        "description": node["description"],
        "details": [without_itlr(child) for child in node["details"]],
    }


__all__ = [
    "SCORE_TOLERANCE",
    "disagreement",
    "explain_score",
    "lines",
    "recompute",
    "term_node",
    "truth_parameters",
    "without_itlr",
]
