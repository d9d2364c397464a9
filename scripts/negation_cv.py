"""What a NOT should mean on real questions: variants of NOT evidence and of the hard filter,
cross-validated with both rewriters on a BEIR folder of negative-constraint questions (issue 52).

    python scripts/negation_cv.py ../shared/negconstraint-dev --split dev \
        --llm-answers ../shared/negconstraint-dev/llm-answers.jsonl [--only PREFIX]

Every question is rewritten twice: by the rule rewriter and by the real LLM rewriter answered
from the answers file (itlr.evaluation.answers serves it on loopback). Every document is scored
exactly, in process, from cached embeddings and itlr.lexical's lexical truths, as `itlr eval`
does; the data is read in place and nothing from it is written anywhere but the caches.

Each variant prints nDCG@10 per rewriter on both folds of itlr.evaluation.folds and over all
questions, and per NOT-count bucket. A family with a parameter grid is also cross-validated:
the parameter is chosen on one fold and measured on the other, in both directions ("cv" rows).
A variant is adopted only if it gains on both rewriters and both folds; gaps under ~0.03 are
noise at 99 questions (docs/hybrid-truths.md, "NOT evidence").
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itlr.embed import get_embedder
from itlr.evaluation.answers import AnswersServer, read_answers
from itlr.evaluation.cache import EmbeddingCache
from itlr.evaluation.datasets import load_beir
from itlr.evaluation.folds import FOLDS, fold_of
from itlr.hard_filter import HardFilter
from itlr.lexical import LexicalCorpus, tokenize
from itlr.query import And, Not, Query, Term, walk
from itlr.rewrite import rewrite_for_search
from itlr.scoring import SEARCH_OPERATORS, Operators, TruthMap

HARD = 0.53  # the bundled model's hard-filter threshold (itlr.calibrations)


@dataclass
class Question:
    """One question under one rewriter, with every matrix the variants read."""

    id: str
    query: Query
    nots: int
    relevant: int  # the row of its one relevant passage
    cos: np.ndarray  # documents x query.terms
    lex: np.ndarray  # documents x query.terms, itlr.lexical's truths
    vectors: np.ndarray  # query.terms x dims, unit
    docs: np.ndarray  # documents x dims, unit (shared)
    lexical: LexicalCorpus  # shared

    @property
    def positives(self) -> list[int]:
        return [self.query.terms.index(t) for t in self.query.positive_terms]

    @property
    def negated(self) -> list[int]:
        return [
            self.query.terms.index(t) for t in self.query.terms if t in self.query.negated_terms
        ]

    @property
    def excluded(self) -> list[int]:
        return [self.query.terms.index(t) for t in self.query.excluded_terms]


Variant = Callable[[Question], np.ndarray]  # scores, -inf = dropped


def ndcg_at_10(scores: np.ndarray, relevant: int, id_order: np.ndarray) -> float:
    """One relevant passage: 1 / log2(rank + 1) within the top 10, ties in id order as
    itlr.evaluation.runner.top_ranked breaks them."""
    mine = scores[relevant]
    if not np.isfinite(mine):
        return 0.0
    above = int(np.sum(scores > mine)) + int(
        np.sum((scores == mine) & (id_order < id_order[relevant]))
    )
    return float(1.0 / np.log2(above + 2)) if above < 10 else 0.0


# -- scoring helpers -----------------------------------------------------------------------


def truths(q: Question, truth: TruthMap | None = None) -> np.ndarray:
    truth = truth or TruthMap()
    weights = truth.lexical_weights(q.query.terms, q.query.negated_terms)
    return np.array(truth.apply(q.cos, q.query.terms, q.lex, weights))


def run(q: Question, t: np.ndarray, ops: Operators = SEARCH_OPERATORS) -> np.ndarray:
    return np.maximum(q.query.program.compose_matrix(t, ops), 0.0)


def best_positive(values: np.ndarray, q: Question) -> np.ndarray:
    if not q.positives:
        return np.zeros(len(values))
    return np.max(values[:, q.positives], axis=1)


def default(q: Question) -> np.ndarray:
    return run(q, truths(q))


def strength(s: float) -> Variant:
    ops = Operators(not_strength=s)
    return lambda q: run(q, truths(q), ops)


def margin_not(s: float, evidence: str) -> Variant:
    """A NOT term's truth is only what exceeds the document's best positive truth:
    max(0, x - best). `evidence`: hybrid (both sides hybrid truths) or cosine (the NOT's
    hybrid truth minus the best positive clamped cosine)."""
    ops = Operators(not_strength=s)

    def score(q: Question) -> np.ndarray:
        t = truths(q)
        side = t if evidence == "hybrid" else np.clip(q.cos, 0.0, 1.0)
        best = best_positive(side, q)
        for j in q.negated:
            t[:, j] = np.maximum(0.0, t[:, j] - best)
        return run(q, t, ops)

    return score


def orthogonal_cosines(q: Question, j: int) -> np.ndarray:
    """Clamped cosines to NOT term j's vector with the positive direction (the sum of the
    positive term vectors) projected out: Widdows' orthogonal negation."""
    if not q.positives:
        return np.clip(q.cos[:, j], 0.0, 1.0)
    p = q.vectors[q.positives].sum(axis=0)
    p = p / (np.linalg.norm(p) or 1.0)
    n = q.vectors[j] - (q.vectors[j] @ p) * p
    n = n / (np.linalg.norm(n) or 1.0)
    return np.clip(q.docs @ n, 0.0, 1.0)


def own_lexical(q: Question, j: int) -> np.ndarray:
    """NOT term j's lexical truth from only its own tokens (those no positive term has)."""
    shared = {w for i in q.positives for w in tokenize(q.query.terms[i])}
    own = [w for w in tokenize(q.query.terms[j]) if w not in shared]
    if not own:
        return np.zeros(len(q.docs))
    rows = np.arange(len(q.docs))
    return q.lexical.matrix(rows, [" ".join(own)], q.lexical.full_stats)[:, 0]


def orthogonal_not(lexical: bool, own: bool = False, s: float = 0.5) -> Variant:
    """Orthogonal negation's cosine in the hybrid max with the lexical truth (`own`: of the
    NOT's own tokens only), or alone."""
    ops = Operators(not_strength=s)

    def score(q: Question) -> np.ndarray:
        t = truths(q)
        for j in q.negated:
            c = orthogonal_cosines(q, j)
            lex = own_lexical(q, j) if own else q.lex[:, j]
            t[:, j] = np.maximum(c, lex) if lexical else c
        return run(q, t, ops)

    return score


def own_tokens_not(cosine: bool) -> Variant:
    """The NOT term's lexical evidence from only its own tokens (those no positive term has);
    with `cosine` in the max with its cosine (the default's max evidence), else alone."""

    def score(q: Question) -> np.ndarray:
        t = truths(q)
        for j in q.negated:
            lex = own_lexical(q, j)
            c = np.clip(q.cos[:, j], 0.0, 1.0)
            t[:, j] = np.maximum(c, lex) if cosine else lex
        return run(q, t)

    return score


def combined_nots(how: str, s: float = 0.5) -> Variant:
    """Several root-level NOTs as one: 1 - s * max(x) or 1 - s * probsum(x) instead of the
    product of the complements."""

    def score(q: Question) -> np.ndarray:
        t = truths(q)
        if len(q.excluded) < 2:
            return run(q, t, Operators(not_strength=s))
        rest = [
            c
            for c in (q.query.root.operands if isinstance(q.query.root, And) else ())
            if not (isinstance(c, Not) and isinstance(c.operand, Term))
        ]
        xs = t[:, q.excluded]
        x = xs.max(axis=1) if how == "max" else 1.0 - np.prod(1.0 - xs, axis=1)
        factor = 1.0 - s * x
        if not rest:
            return np.maximum(factor, 0.0)
        positive = Query(And(tuple(rest)) if len(rest) > 1 else rest[0])
        cols = [q.query.terms.index(term) for term in positive.terms]
        part = np.maximum(positive.program.compose_matrix(t[:, cols], Operators(not_strength=s)), 0)
        return part * factor

    return score


def hard(base: Variant, theta: float, rule: str, margin: float = 0.0) -> Variant:
    """`base` with a hard filter on root-level NOT terms, judged on clamped cosines: the
    product's (itlr.hard_filter) for absolute (cos >= theta) and relative without a margin
    (cos >= theta and cos > best positive cos); a margin (cos > best + margin), or
    relative-hybrid (hybrid truths compared on both sides), only here."""

    def score(q: Question) -> np.ndarray:
        s = base(q).copy()
        if rule in ("absolute", "relative") and not margin:
            shipped = HardFilter(theta, rule)  # type: ignore[arg-type]
            evidence = HardFilter.evidence(q.cos, truths(q), TruthMap())
            s[~shipped.kept(q.query, evidence)] = -np.inf
            return s
        c = np.clip(q.cos, 0.0, 1.0)
        side = truths(q) if rule == "relative-hybrid" else c
        best = best_positive(side, q)
        for j in q.excluded:
            drop = c[:, j] >= theta
            if rule != "absolute":
                drop &= side[:, j] > best + margin
            s[drop] = -np.inf
        return s

    return score


# -- the run -------------------------------------------------------------------------------


def prepare(
    dataset: Path, split: str, answers: Path, only_llm: bool = False
) -> tuple[dict[str, list[Question]], np.ndarray]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = load_beir(dataset, split=split)
    cache = EmbeddingCache(get_embedder(None))
    docs = cache.encode([d.text for d in data.corpus]).astype(np.float64)
    lexical = LexicalCorpus([d.text for d in data.corpus])
    row = {d.id: i for i, d in enumerate(data.corpus)}
    id_order = np.argsort(np.argsort(np.array([d.id for d in data.corpus], dtype=object)))
    rewritten: dict[str, dict[str, Query]] = {"rules": {}, "llm": {}}
    with AnswersServer(read_answers(answers)) as server:
        config = server.config()
        for q in data.queries:
            rewritten["rules"][q.id] = rewrite_for_search(q.text, "rules").query
            result = rewrite_for_search(q.text, "llm", config)
            if result.fallback:
                print(f"note: question {q.id} fell back to the rules: {result.warnings}")
            rewritten["llm"][q.id] = result.query
    terms = sorted({t for r in rewritten.values() for q in r.values() for t in q.terms})
    vectors = dict(zip(terms, cache.encode(terms).astype(np.float64), strict=True))
    out: dict[str, list[Question]] = {}
    for name, queries in rewritten.items():
        out[name] = []
        for q in data.queries:
            query = queries[q.id]
            (relevant,) = [row[d] for d, s in data.qrels[q.id].items() if s > 0]
            tv = np.stack([vectors[t] for t in query.terms])
            out[name].append(
                Question(
                    q.id,
                    query,
                    sum(isinstance(n, Not) for n in walk(query.root)),
                    relevant,
                    docs @ tv.T,
                    lexical.matrix(np.arange(len(docs)), query.terms, lexical.full_stats),
                    tv,
                    docs,
                    lexical,
                )
            )
    return out, id_order


def table(
    questions: dict[str, list[Question]],
    id_order: np.ndarray,
    variants: Sequence[tuple[str, Variant]],
) -> dict[str, dict[str, dict[str, float]]]:
    """Per variant, per rewriter: {question id: nDCG@10}."""
    return {
        name: {
            rw: {q.id: ndcg_at_10(variant(q), q.relevant, id_order) for q in qs}
            for rw, qs in questions.items()
        }
        for name, variant in variants
    }


def summary(values: dict[str, float], questions: list[Question]) -> list[float]:
    folds = [[v for q, v in values.items() if fold_of(q) == f] for f in FOLDS]
    return [float(np.mean(f)) for f in folds] + [float(np.mean(list(values.values())))]


def buckets(values: dict[str, float], questions: list[Question]) -> str:
    groups: dict[int, list[float]] = {}
    for q in questions:
        groups.setdefault(min(q.nots, 3), []).append(values[q.id])
    return " ".join(f"{n}:{np.mean(v):.3f}({len(v)})" for n, v in sorted(groups.items()))


def report(
    questions: dict[str, list[Question]],
    scores: dict[str, dict[str, dict[str, float]]],
) -> None:
    print("| variant | rules f0 | rules f1 | rules | llm f0 | llm f1 | llm | buckets rules / llm |")
    print("|---|---|---|---|---|---|---|---|")
    for name, by_rw in scores.items():
        cells = []
        for rw in ("rules", "llm"):
            cells += [f"{v:.3f}" for v in summary(by_rw[rw], questions[rw])]
        b = " / ".join(buckets(by_rw[rw], questions[rw]) for rw in ("rules", "llm"))
        print(f"| {name} | " + " | ".join(cells) + f" | {b} |")


def cross_validate(
    scores: dict[str, dict[str, dict[str, float]]], family: str, questions: dict[str, list]
) -> None:
    """Choose the family's best member on one fold, measure it on the other."""
    members = [n for n in scores if n.startswith(family)]
    cells = []
    for rw in ("rules", "llm"):
        for chosen_on in FOLDS:
            other = 1 - chosen_on

            def on(name: str, fold: int, rw: str = rw) -> float:
                values = scores[name][rw]
                return float(np.mean([v for q, v in values.items() if fold_of(q) == fold]))

            best = max(members, key=lambda n: on(n, chosen_on))
            cells.append(f"{on(best, other):.3f} ({best[len(family) :].strip()})")
    print(f"| cv {family} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--llm-answers", type=Path, required=True)
    parser.add_argument("--only", default="", help="run only the variants starting with this")
    args = parser.parse_args()
    questions, id_order = prepare(args.dataset, args.split, args.llm_answers)

    variants: list[tuple[str, Variant]] = [("itlr default", default)]
    variants += [(f"strength {s}", strength(s)) for s in (0.0, 0.25, 0.5, 0.75, 1.0)]
    variants += [
        (f"margin-not {ev} s={s}", margin_not(s, ev))
        for ev in ("hybrid", "cosine")
        for s in (0.5, 0.75, 1.0)
    ]
    variants += [("orthogonal-not max", orthogonal_not(True))]
    variants += [("orthogonal-not cosine", orthogonal_not(False))]
    variants += [
        (f"orthogonal-own-not s={s}", orthogonal_not(True, own=True, s=s)) for s in (0.5, 0.75, 1.0)
    ]
    variants += [("own-tokens-not max", own_tokens_not(True))]
    variants += [("own-tokens-not lexical", own_tokens_not(False))]
    variants += [
        (f"combined-nots {h} s={s}", combined_nots(h, s))
        for h in ("max", "probsum")
        for s in (0.5, 0.75)
    ]
    thetas = (0.4, 0.45, 0.5, 0.53, 0.55, 0.6, 0.65)
    variants += [(f"hard absolute {t}", hard(default, t, "absolute")) for t in thetas]
    variants += [(f"hard relative {t}", hard(default, t, "relative")) for t in thetas]
    variants += [
        (f"hard relative-margin {m}", hard(default, HARD, "relative", m)) for m in (0.05, 0.1)
    ]
    variants += [(f"hard relative-hybrid {t}", hard(default, t, "relative-hybrid")) for t in thetas]
    variants = [(n, v) for n, v in variants if n.startswith(args.only)]
    scores = table(questions, id_order, variants)
    report(questions, scores)
    print(
        "\n| cross-validated | rules: chosen f0 -> f1 | rules: f1 -> f0 | llm: f0 -> f1 | llm: f1 -> f0 |"
    )
    print("|---|---|---|---|---|")
    for family in (
        "strength",
        "margin-not",
        "orthogonal-own-not",
        "combined-nots",
        "hard absolute",
        "hard relative ",
        "hard relative-hybrid",
    ):
        if any(n.startswith(family) for n in scores):
            cross_validate(scores, family, questions)
    print("\n| hard filter at 0.53 | rules: answers lost | rules: dropped a question |", end="")
    print(" llm: answers lost | llm: dropped a question |\n|---|---|---|---|---|")
    for rule in ("absolute", "relative"):
        cells = []
        for rw in ("rules", "llm"):
            filtered = [hard(default, HARD, rule)(q) for q in questions[rw]]
            pairs = zip(filtered, questions[rw], strict=True)
            cells.append(str(sum(not np.isfinite(f[q.relevant]) for f, q in pairs)))
            cells.append(f"{np.mean([np.sum(~np.isfinite(f)) for f in filtered]):.2f}")
        print(f"| {rule} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
