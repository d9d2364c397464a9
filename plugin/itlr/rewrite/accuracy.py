"""Score a rewriter against the dev set: exact canonical match and a looser structure match.

- exact: the predicted canonical form equals the gold one, ignoring letter case (whether a term
  starts with "Side" or "side" changes nothing for an embedding, and LLMs recapitalise freely).
- structure: the same operator tree with the same number of terms, whatever the terms say;
  AND/OR operands are compared as multisets since both operators are commutative.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itlr.errors import QuerySyntaxError, RewriteError
from itlr.query import And, Node, Not, Or, Term, parse
from itlr.resources import data_file

CATEGORIES: tuple[str, ...] = ("and", "or", "not", "nested", "none")


def default_devset() -> Path:
    return data_file("rewrite_devset.jsonl")


@dataclass(frozen=True)
class DevItem:
    id: str
    question: str
    gold: str
    category: str
    in_scope: bool
    domain: str = ""
    split: str = "dev"


def load_devset(path: str | Path | None = None) -> list[DevItem]:
    """Read a dev set (JSON lines); gold queries must already be in canonical form."""
    path = Path(path) if path is not None else default_devset()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as bad:
        raise RewriteError(f"cannot read dev set {path}: {bad.strerror}") from None
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
            item = DevItem(
                id=str(row.get("id", number)),
                question=row["question"],
                gold=row["gold"],
                category=row["category"],
                in_scope=bool(row["in_scope"]),
                domain=row.get("domain", ""),
                split=row.get("split", "dev"),
            )
        except (ValueError, KeyError, TypeError) as bad:
            raise RewriteError(
                f"{where}: not a dev-set row ({bad}); each line needs question, gold, "
                "category and in_scope"
            ) from None
        if item.category not in CATEGORIES:
            raise RewriteError(f"{where}: category {item.category!r} is not one of {CATEGORIES}")
        try:
            canonical = str(parse(item.gold))
        except QuerySyntaxError as bad:
            raise RewriteError(f"{where}: gold query does not parse ({bad})") from None
        if canonical != item.gold:
            raise RewriteError(f"{where}: gold is not canonical: write {canonical}")
        items.append(item)
    if not items:
        raise RewriteError(f"dev set {path} is empty")
    return items


def shape(node: Node) -> str:
    """The operator tree with every term replaced by T."""
    if isinstance(node, Term):
        return "T"
    if isinstance(node, Not):
        return f"NOT {shape(node.operand)}"
    name = "AND" if isinstance(node, And) else "OR"
    assert isinstance(node, And | Or)
    return f"{name}(" + ",".join(sorted(shape(o) for o in node.operands)) + ")"


@dataclass(frozen=True)
class Outcome:
    item: DevItem
    predicted: str
    exact: bool
    structure: bool
    fallback: bool = False


@dataclass(frozen=True)
class Tally:
    n: int = 0
    exact: int = 0
    structure: int = 0

    def add(self, outcome: Outcome) -> Tally:
        return Tally(self.n + 1, self.exact + outcome.exact, self.structure + outcome.structure)

    @property
    def exact_rate(self) -> float:
        return self.exact / self.n if self.n else 0.0

    @property
    def structure_rate(self) -> float:
        return self.structure / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "exact": self.exact,
            "structure": self.structure,
            "exact_rate": round(self.exact_rate, 4),
            "structure_rate": round(self.structure_rate, 4),
        }


def tally(outcomes: Iterable[Outcome]) -> Tally:
    total = Tally()
    for outcome in outcomes:
        total = total.add(outcome)
    return total


@dataclass(frozen=True)
class EvalReport:
    method: str
    outcomes: tuple[Outcome, ...]
    seconds: float

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.item.split for o in self.outcomes))

    def select(
        self,
        category: str | None = None,
        in_scope: bool | None = None,
        split: str | None = None,
    ) -> Tally:
        return tally(
            o
            for o in self.outcomes
            if (category is None or o.item.category == category)
            and (in_scope is None or o.item.in_scope == in_scope)
            and (split is None or o.item.split == split)
        )

    @property
    def fallbacks(self) -> int:
        return sum(o.fallback for o in self.outcomes)

    @property
    def failures(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if not o.exact)

    def to_dict(self) -> dict[str, Any]:
        splits: list[str | None] = [None, *self.splits] if len(self.splits) > 1 else [None]
        result: dict[str, Any] = {"method": self.method, "seconds": round(self.seconds, 4)}
        for split in splits:
            key = split or "all"
            result[key] = {
                "total": self.select(split=split).to_dict(),
                "in_scope": self.select(in_scope=True, split=split).to_dict(),
                "out_of_scope": self.select(in_scope=False, split=split).to_dict(),
                "categories": {
                    c: {
                        "all": self.select(c, split=split).to_dict(),
                        "in_scope": self.select(c, True, split).to_dict(),
                    }
                    for c in CATEGORIES
                },
            }
        result["fallbacks"] = self.fallbacks
        result["failures"] = [
            {"id": o.item.id, "question": o.item.question, "gold": o.item.gold,
             "predicted": o.predicted, "in_scope": o.item.in_scope}
            for o in self.failures
        ]  # fmt: skip
        return result


def score(item: DevItem, predicted: Node) -> tuple[bool, bool]:
    gold = parse(item.gold).root
    exact = str(predicted).casefold() == item.gold.casefold()
    return exact, shape(predicted) == shape(gold)


def measure_accuracy(
    items: Iterable[DevItem], rewriter: Callable[[str], object], method: str
) -> EvalReport:
    """Run `rewriter` (question -> RewriteResult) over the items and score every answer."""
    outcomes = []
    started = time.perf_counter()
    for item in items:
        # No per-question error handling: the LLM path already falls back on its own, so what
        # escapes is a configuration problem that would fail every question the same way.
        result = rewriter(item.question)
        query = result.query  # type: ignore[attr-defined]
        exact, structure = score(item, query.root)
        fallback = bool(getattr(result, "fallback", False))
        outcomes.append(Outcome(item, str(query), exact, structure, fallback))
    return EvalReport(method, tuple(outcomes), time.perf_counter() - started)


@dataclass(frozen=True)
class Throughput:
    questions: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.questions / self.seconds if self.seconds else float("inf")


def measure_throughput(
    questions: list[str], rewriter: Callable[[str], object], min_seconds: float = 1.0
) -> Throughput:
    """Questions per second in one process: whole passes over `questions` for >= min_seconds.

    The first pass is a warm-up (regex compilation, imports) and is not counted.
    """
    if not questions:
        raise RewriteError("no questions to time")
    for question in questions:
        rewriter(question)
    done = 0
    started = time.perf_counter()
    while True:
        for question in questions:
            rewriter(question)
        done += len(questions)
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return Throughput(done, elapsed)
