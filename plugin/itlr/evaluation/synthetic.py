"""The paper's synthetic benchmark: three-term logical queries over tiny per-query corpora.

Protocol (the paper's, rebuilt on a topic bank this project writes itself):
- 32 templates: `(x1 op1 x2) op2 x3` with op1, op2 in {AND, OR} and each xi a term or its NOT.
- N queries per template, each filled with three distinct random topics; a topic's name is the
  term, its sentences are what documents are made of.
- A document covers a set of the query's topics and avoids the others (a document covering none
  of them is about an unrelated topic instead). Positives are documents for assignments that
  satisfy the query; hard negatives are documents whose assignment falsifies it and differs from
  a chosen positive by moving exactly one term to the other side. Up to six documents per query,
  at least one of each kind, and every query is scored on its own small corpus.
- A document covering topics A and B strings the same number (1-3) of sentences of each,
  shuffled together, so order and length vary.
- Chains (Figure 3) use the same machinery with AND-only / OR-only queries of 1..8 terms (one or
  two sentences per topic there, to stay inside the model's input length).
- A few sentences of every topic are held out: calibration documents use only those, test
  documents never do, so a per-term calibration never sees a test sentence.

Everything is drawn from random.Random streams seeded by (seed, template): deterministic, and the
first n queries of a template do not depend on N.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from itlr.errors import ConfigurationError
from itlr.query import And, Node, Not, Or, Query, Term
from itlr.resources import data_file
from itlr.scoring import Operators

MAX_DOCS = 6
HELD_OUT = 3
CHAIN_LENGTHS = tuple(range(1, 9))
# Exact boolean logic on 0/1 truth values: which documents satisfy a query.
BOOLEAN = Operators("min", "max", "complement")


@dataclass(frozen=True)
class Topic:
    name: str
    sentences: tuple[str, ...]  # for test documents
    held_out: tuple[str, ...]  # for calibration documents only


@dataclass(frozen=True)
class TopicBank:
    topics: tuple[Topic, ...]

    @classmethod
    def load(cls, path: Path | None = None, held_out: int = HELD_OUT, seed: int = 0) -> TopicBank:
        path = path or data_file("topics.json")
        if not path.is_file():
            raise ConfigurationError(f"the topic bank {path} is missing: reinstall itlr")
        try:
            records = json.loads(path.read_text(encoding="utf-8"))["topics"]
        except (ValueError, KeyError, TypeError) as bad:
            raise ConfigurationError(f"{path} is not a topic bank ({bad})") from None
        topics = []
        for record in records:
            name, sentences = str(record["name"]), [str(s) for s in record["sentences"]]
            if len(sentences) < held_out + 2:
                raise ConfigurationError(
                    f"{path}: topic {name!r} has {len(sentences)} sentences, needs at least "
                    f"{held_out + 2}"
                )
            # Which sentences are held out is seeded per topic, not "the last ones", so the
            # split does not follow how the bank's author happened to order them.
            reserved = set(
                random.Random(f"{seed}:held-out:{name}").sample(range(len(sentences)), held_out)
            )
            topics.append(
                Topic(
                    name,
                    tuple(s for i, s in enumerate(sentences) if i not in reserved),
                    tuple(s for i, s in enumerate(sentences) if i in reserved),
                )
            )
        if len({t.name for t in topics}) != len(topics):
            raise ConfigurationError(f"{path}: topic names must be distinct")
        if len(topics) < 12:
            raise ConfigurationError(f"{path}: a topic bank needs at least 12 topics")
        return cls(tuple(topics))

    def by_name(self, name: str) -> Topic:
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


@dataclass(frozen=True)
class Template:
    """`(x1 op1 x2) op2 x3`, xi = term i or NOT term i."""

    ops: tuple[str, str]
    negated: tuple[bool, bool, bool]

    @property
    def negations(self) -> int:
        return sum(self.negated)

    @property
    def name(self) -> str:
        return natural_text(self.build(("A", "B", "C")).root)

    def build(self, terms: Sequence[str]) -> Query:
        literals = [
            Not(Term(t)) if neg else Term(t) for t, neg in zip(terms, self.negated, strict=True)
        ]
        inner = _connect(self.ops[0], literals[:2])
        return Query(_connect(self.ops[1], [inner, literals[2]]))


def _connect(op: str, operands: Sequence[Node]) -> Node:
    return And(tuple(operands)) if op == "AND" else Or(tuple(operands))


def templates() -> tuple[Template, ...]:
    """All 32: 2 x 2 operator pairs times 2^3 negation patterns."""
    return tuple(
        Template((op1, op2), cast("tuple[bool, bool, bool]", negated))
        for op1, op2 in itertools.product(("AND", "OR"), repeat=2)
        for negated in itertools.product((False, True), repeat=3)
    )


def natural_text(node: Node) -> str:
    """The query as a person would type it: no quotes, parentheses only where they matter."""
    if isinstance(node, Term):
        return node.text
    if isinstance(node, Not):
        inner = natural_text(node.operand)
        return f"NOT {inner}" if isinstance(node.operand, Term | Not) else f"NOT ({inner})"
    word = " AND " if isinstance(node, And) else " OR "
    parts = []
    for child in node.operands:
        text = natural_text(child)
        needs_parens = isinstance(child, And | Or) and type(child) is not type(node)
        parts.append(f"({text})" if needs_parens else text)
    return word.join(parts)


@dataclass(frozen=True)
class SyntheticDoc:
    id: str
    text: str
    covers: frozenset[str]
    relevant: bool


@dataclass(frozen=True)
class SyntheticQuery:
    id: str
    family: str  # "template", "and-chain" or "or-chain"
    template: str  # the template (A, B, C) or chain name
    negations: int
    terms: tuple[str, ...]
    query: Query
    docs: tuple[SyntheticDoc, ...]

    @property
    def text(self) -> str:
        """What the dense baseline embeds: the query's natural reading."""
        return natural_text(self.query.root)


def satisfies(query: Query, covered: frozenset[str]) -> bool:
    truths = {t: float(t in covered) for t in query.terms}
    return bool(query.evaluate(truths, BOOLEAN) > 0.5)


def document_text(
    topics: Sequence[Topic], rng: random.Random, held_out: bool = False, budget: int = 6
) -> str:
    """The same number of sentences (1-3, fewer when many topics share the document) for every
    topic, shuffled together.

    Equal shares make "covers A and B" mean what it says: with 3 sentences of A and 1 of B, B is
    a passing mention that no single-vector model can be expected to see (see docs/benchmarks.md).
    """
    most = max(1, min(3, budget // max(1, len(topics))))
    count = rng.randint(1, most)
    sentences: list[str] = []
    for topic in topics:
        pool = topic.held_out if held_out else topic.sentences
        sentences.extend(rng.sample(pool, min(len(pool), count)))
    rng.shuffle(sentences)
    return " ".join(sentences)


def make_query(
    qid: str,
    family: str,
    template: str,
    query: Query,
    bank: TopicBank,
    rng: random.Random,
    negations: int = 0,
) -> SyntheticQuery:
    """Choose the assignments (hard negatives, their positive twins, more positives), write docs."""
    terms = query.terms
    subsets = [
        frozenset(t for i, t in enumerate(terms) if mask >> i & 1)
        for mask in range(2 ** len(terms))
    ]
    truth = {s: satisfies(query, s) for s in subsets}
    positives = [s for s in subsets if truth[s]]
    if len(positives) in (0, len(subsets)):
        raise ValueError(f"query {query} is constant: nothing to rank")

    def twins(subset: frozenset[str]) -> list[frozenset[str]]:
        return [subset ^ {term} for term in terms]

    hard = [s for s in subsets if not truth[s] and any(truth[t] for t in twins(s))]
    wanted_negatives = min(len(hard), max(MAX_DOCS - len(positives), MAX_DOCS // 2))
    wanted_positives = min(len(positives), MAX_DOCS - wanted_negatives)
    chosen_negatives = rng.sample(hard, wanted_negatives)
    # Every negative gets its positive twin (one term moved) into the same corpus; there is
    # always room, as at most as many negatives as positive slots are drawn.
    chosen: dict[frozenset[str], None] = {}
    for negative in chosen_negatives:
        chosen.setdefault(rng.choice([t for t in twins(negative) if truth[t]]))
    rest = [p for p in positives if p not in chosen]
    chosen_positives = [*chosen, *rng.sample(rest, wanted_positives - len(chosen))]

    others = [t for t in bank.topics if t.name not in terms]
    assignments = [(s, True) for s in chosen_positives] + [(s, False) for s in chosen_negatives]
    # Shuffled before ids are given, so that ties broken by id favour neither side.
    rng.shuffle(assignments)
    docs = []
    for number, (covered, relevant) in enumerate(assignments):
        topics = [bank.by_name(t) for t in terms if t in covered]
        rng.shuffle(topics)
        if not topics:
            topics = rng.sample(others, rng.randint(1, 2))
        text = document_text(topics, rng, budget=6 if len(topics) <= 3 else 8)
        docs.append(SyntheticDoc(f"{qid}-d{number}", text, covered, relevant))
    return SyntheticQuery(qid, family, template, negations, terms, query, tuple(docs))


def template_queries(bank: TopicBank, per_template: int, seed: int = 0) -> Iterator[SyntheticQuery]:
    for number, template in enumerate(templates()):
        rng = random.Random(f"{seed}:template:{template.name}")
        for i in range(per_template):
            names = [t.name for t in rng.sample(bank.topics, 3)]
            yield make_query(
                f"t{number:02d}-q{i:03d}",
                "template",
                template.name,
                template.build(names),
                bank,
                rng,
                template.negations,
            )


def chain_queries(
    bank: TopicBank, per_length: int, seed: int = 0, lengths: Sequence[int] = CHAIN_LENGTHS
) -> Iterator[SyntheticQuery]:
    """AND-only and OR-only queries of 1..8 terms (Figure 3)."""
    for op in ("AND", "OR"):
        for length in lengths:
            family = f"{op.lower()}-chain"
            rng = random.Random(f"{seed}:{family}:{length}")
            for i in range(per_length):
                names = [t.name for t in rng.sample(bank.topics, length)]
                root: Node = (
                    Term(names[0]) if length == 1 else _connect(op, [Term(n) for n in names])
                )
                yield make_query(
                    f"{family}{length}-q{i:03d}",
                    family,
                    f"{family}-{length}",
                    Query(root),
                    bank,
                    rng,
                )


@dataclass(frozen=True)
class CalibrationDoc:
    text: str
    about: bool


def calibration_docs(
    bank: TopicBank, topic: Topic, seed: int = 0, per_side: int = 20
) -> tuple[CalibrationDoc, ...]:
    """20 documents about the topic (alone or with 1-2 others) and 20 about 1-3 other topics,
    all made of held-out sentences."""
    rng = random.Random(f"{seed}:calibration:{topic.name}")
    others = [t for t in bank.topics if t.name != topic.name]
    docs = []
    for _ in range(per_side):
        topics = [topic, *rng.sample(others, rng.randint(0, 2))]
        rng.shuffle(topics)
        docs.append(CalibrationDoc(document_text(topics, rng, held_out=True), True))
    for _ in range(per_side):
        topics = rng.sample(others, rng.randint(1, 3))
        docs.append(CalibrationDoc(document_text(topics, rng, held_out=True), False))
    return tuple(docs)
