"""Ablation of itlr's truth values and operators on a BEIR folder of questions with exclusions.

    python scripts/ablation.py ../shared/negconstraint-dev --split dev [--sentences]
        [--synthetic-per-template 25]

Every variant scores every document exactly, in process, from one set of cached embeddings
(`$ITLR_HOME/cache`), after the rule rewriter turned each question into a logical query; metrics
come from ir-measures through itlr.evaluation. The variants the product ships are also
`itlr eval` methods; the others live only here, because they did not pay enough to ship
(docs/benchmarks.md, "Real questions"). Lexical evidence is itlr.lexical's, exactly what the
engines compute for `truth="hybrid"` (the shipped variants go through composition.compose).
The data is read in place: nothing from the dataset is written anywhere but the cache.

Each variant prints dev nDCG@10 over all judged questions and over two folds (FOLD_SEED: the
judged ids, sorted, permuted by numpy's default_rng(FOLD_SEED), the first half being fold A),
and, for the default candidates, the synthetic Table 1 row (nDCG@10 at 0/1/2/3 NOTs, template
queries of `itlr bench synthetic`, lexical statistics over the whole synthetic corpus).

THE RULE THAT CHOOSES THE DEFAULT, written down and committed before any hybrid variant was run:
among the candidates (the current default "itlr" and the rows marked "candidate"), the default is
the one with the best mean of the two folds' nDCG@10, subject to
  (a) its synthetic Table 1 row is >= 0.97 at every number of NOTs, and
  (b) it loses no more than 0.01 nDCG@10 to the current default on either fold;
a candidate whose mean is less than 0.01 above a simpler admissible candidate's loses to it.
Simplicity order: itlr (clamp) < hybrid share 0.5 with BM25 NOT < hybrid share 0.5 with another
NOT evidence < hybrid with another share or NOT strength.

PRE-REGISTERED SECOND ROUND (issue 23), added and committed before any of these was run; the rule
above is unchanged. The diagnosis of the first round (docs/benchmarks.md, "Ablation"): the
synthetic benchmark's excluded topics are described by sentences that rarely contain the topic's
name, so a BM25 NOT cannot see them, and a positive term's lexical half rewards common words in
hard negatives; real exclusions are mostly mentions of named things. Two mechanisms follow:
  - NOT evidence "max": a NOT term's truth is max(max(0, cos), lex), mentioned OR semantically
    close, so a topic NOT keeps its cosine and a named exclusion gets its BM25.
  - lexical share by rarity: a term's lexical share is scaled by r_t = min(1, idf_t / idf_ref),
    idf_t the arithmetic mean of the Lucene BM25 idf (itlr.lexical.CorpusStats.idf) of the
    term's distinct tokens, idf_ref = ln(N) / 2 with N the live documents (a token in about
    sqrt(N) documents or fewer counts as fully rare). Positive terms: w = share * r_t; NOT terms
    with BM25 NOT evidence: w = r_t; with max NOT evidence the max is taken as it is (the cosine
    already speaks for the unmentioned). A term without tokens keeps w = 0.
The five new candidates (all at NOT strength 0.5): hybrid 0.5 with max NOT; hybrid 0.3 with max
NOT; hybrid 0.5 by rarity with BM25 NOT by rarity; hybrid 0.5 by rarity with max NOT; hybrid 0.3
by rarity with max NOT. Their places in the simplicity order: hybrid 0.5 with max NOT is "hybrid
share 0.5 with another NOT evidence", hybrid 0.3 with max NOT is "hybrid with another share", and
every rarity-scaled candidate comes after all fixed-share candidates (one more statistic per term),
in the order listed. Their synthetic rows are computed like the others' (same template queries).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from itlr.embed import get_embedder
from itlr.evaluation.cache import EmbeddingCache
from itlr.evaluation.datasets import BeirDataset, load_beir
from itlr.evaluation.folds import fold_of
from itlr.evaluation.methods import Case, Logical
from itlr.evaluation.metrics import Evaluation, evaluate_run, mean
from itlr.evaluation.runner import VectorCorpus, run_methods, top_ranked
from itlr.evaluation.synthetic import TopicBank, template_queries
from itlr.lexical import CorpusStats, LexicalCorpus, tokenize
from itlr.query import Not, Query, Term, walk
from itlr.rewrite.rules import rewrite_rules
from itlr.scoring import SEARCH_OPERATORS, Operators, TruthMap

# (query, term, cosines of every document to the term, is the term negated) -> truth values
TruthFn = Callable[[Query, str, np.ndarray, bool], np.ndarray]
DEPTH = 100


def clamp(cosines: np.ndarray) -> np.ndarray:
    return np.clip(cosines, 0.0, 1.0)


FOLD_SEED = 23
NEGATIONS = (0, 1, 2, 3)


def folds(ids: list[str]) -> tuple[list[str], list[str]]:
    """The fixed two-fold split of the judged questions."""
    order = np.random.default_rng(FOLD_SEED).permutation(len(ids))
    shuffled = [sorted(ids)[i] for i in order]
    half = (len(shuffled) + 1) // 2
    return shuffled[:half], shuffled[half:]


class Lexical:
    """itlr.lexical over the whole corpus: each term's lexical truth for every passage."""

    def __init__(self, texts: list[str]) -> None:
        self.corpus = LexicalCorpus(texts)
        self.rows = np.arange(len(texts))
        self._cache: dict[str, np.ndarray] = {}

    def scores(self, term: str) -> np.ndarray:
        if term not in self._cache:
            stats = self.corpus.full_stats
            self._cache[term] = self.corpus.matrix(self.rows, [term], stats)[:, 0]
        return self._cache[term]


@dataclass(frozen=True)
class Variant:
    """A pre-registered hybrid variant the engines do not compute (module docstring): shares
    scaled by the term's rarity, with NOT evidence "lexical" or "max". At rarity=False it
    scores exactly as TruthMap("hybrid", share, not_evidence)."""

    name: str = "variant"
    ops: Operators = SEARCH_OPERATORS
    share: float = 0.5
    not_evidence: str = "lexical"
    rarity: bool = False
    lexical_corpus: LexicalCorpus | None = field(default=None, compare=False, repr=False)

    def rarity_of(self, term: str, stats: CorpusStats) -> float:
        tokens = list(dict.fromkeys(tokenize(term)))
        if not self.rarity or not tokens:
            return 1.0
        reference = math.log(max(stats.documents, 2)) / 2
        return min(1.0, float(np.mean([stats.idf(t) for t in tokens])) / reference)

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        assert self.lexical_corpus is not None
        terms = case.query.terms
        rows = case.rows if case.rows is not None else np.arange(len(self.lexical_corpus))
        stats = self.lexical_corpus.full_stats
        lex = self.lexical_corpus.matrix(rows, terms, stats)
        cos = np.clip(np.asarray(term_cosines, dtype=np.float64), 0.0, 1.0)
        negated = case.query.negated_terms
        truths = cos.copy()
        for j, term in enumerate(terms):
            if not tokenize(term):
                continue
            rarity = self.rarity_of(term, stats)
            if term in negated and self.not_evidence == "max":
                truths[:, j] = np.maximum(cos[:, j], lex[:, j])
                continue
            weight = rarity if term in negated else self.share * rarity
            truths[:, j] = (1.0 - weight) * cos[:, j] + weight * lex[:, j]
        return np.maximum(case.query.program.compose_matrix(truths, self.ops), 0.0)


def synthetic_rows(
    cache: EmbeddingCache, variants: dict[str, Logical | Variant], per_template: int
) -> dict[str, tuple[float, ...]]:
    """Table 1 (nDCG@10 at 0..3 NOTs) of `itlr bench synthetic`'s template queries."""
    bank = TopicBank.load(seed=0)
    queries = list(template_queries(bank, per_template, 0))
    docs = [d for q in queries for d in q.docs]
    texts = [d.text for d in docs]
    vectors = cache.encode(texts + [q.text for q in queries] + [t.name for t in bank.topics])
    vector_of = dict(
        zip(texts + [q.text for q in queries] + [t.name for t in bank.topics], vectors, strict=True)
    )
    corpus = VectorCorpus(tuple(d.id for d in docs), np.stack([vector_of[t] for t in texts]))
    lexical = LexicalCorpus(texts)
    cases, row = [], 0
    for query in queries:
        cases.append(
            Case(query.id, query.text, query.query, tuple(range(row, row + len(query.docs))))
        )
        row += len(query.docs)
    methods = [replace(m, name=name, lexical_corpus=lexical) for name, m in variants.items()]
    runs = run_methods(cases, methods, corpus, vector_of)
    qrels = {q.id: {d.id: int(d.relevant) for d in q.docs} for q in queries}
    rows = {}
    for name, run in runs.items():
        per_query = evaluate_run(run, qrels).per_query
        rows[name] = tuple(
            mean(per_query, "nDCG@10", [q.id for q in queries if q.negations == n]) or 0.0
            for n in NEGATIONS
        )
    return rows


class Sentences:
    """Each passage's best-matching sentence: max cosine over its sentences."""

    def __init__(self, texts: list[str], cache: EmbeddingCache) -> None:
        pieces = [[s for s in re.split(r"(?<=[.!?])\s+", t) if s.strip()] or [t] for t in texts]
        flat = [s for p in pieces for s in p]
        self.owner = np.repeat(np.arange(len(texts)), [len(p) for p in pieces])
        self.vectors = cache.encode(flat)
        self.count = len(texts)

    def best(self, vector: np.ndarray) -> np.ndarray:
        out = np.full(self.count, -1.0)
        np.maximum.at(out, self.owner, self.vectors @ vector)
        return out


def evaluate(data: BeirDataset, score: Callable[[str, str], np.ndarray]) -> Evaluation:
    corpus = VectorCorpus(tuple(d.id for d in data.corpus), np.zeros((len(data.corpus), 1)))
    order, ids = corpus.id_order, np.array(corpus.ids, dtype=object)
    run = {}
    for query in data.queries:
        best = top_ranked(np.asarray(score(query.id, query.text), float), order, DEPTH)
        run[query.id] = {str(ids[i]): float(DEPTH - rank) for rank, i in enumerate(best)}
    return evaluate_run(run, data.qrels, data.negatives)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--sentences", action="store_true", help="add best-sentence variants")
    parser.add_argument(
        "--synthetic-per-template", type=int, default=25, help="0 skips the synthetic rows"
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    data = load_beir(args.dataset, split=args.split)
    embedder = get_embedder(None)
    cache = EmbeddingCache(embedder)
    texts = [d.text for d in data.corpus]
    docs = cache.encode(texts)
    queries = {q.id: rewrite_rules(q.text).query for q in data.queries}
    terms = sorted({t for q in queries.values() for t in q.terms})
    term_vectors = dict(zip(terms, cache.encode(terms), strict=True))
    lexical = Lexical(texts)
    sentences = Sentences(texts, cache) if args.sentences else None

    def logical(truth: TruthFn, ops: Operators, hard: float | None = None):
        def score(qid: str, text: str) -> np.ndarray:
            query = queries[qid]
            negated = {
                n.operand.text
                for n in walk(query.root)
                if isinstance(n, Not) and isinstance(n.operand, Term)
            }
            columns = []
            for term in query.terms:
                cosines = docs @ term_vectors[term]
                columns.append(truth(query, term, cosines, term in negated))
            truths = np.stack(columns, axis=1)
            scores = np.maximum(query.program.compose_matrix(truths, ops), 0.0)
            if hard is not None:
                for term in query.excluded_terms:
                    scores[clamp(docs @ term_vectors[term]) >= hard] = -np.inf
            return scores

        return score

    def shipped(method: Logical | Variant):
        """A variant exactly as the engines score it: composition.compose, hybrid included."""

        def score(qid: str, text: str) -> np.ndarray:
            query = queries[qid]
            cosines = docs @ np.stack([term_vectors[t] for t in query.terms]).T
            case = Case(qid, text, query)
            return replace(method, lexical_corpus=lexical.corpus).score(
                case, cosines, cosines[:, 0]
            )

        return score

    def dense(qid: str, text: str) -> np.ndarray:
        return docs @ cache.encode([text])[0]

    def lexical_not(q: Query, t: str, c: np.ndarray, neg: bool) -> np.ndarray:
        return lexical.scores(t) if neg else clamp(c)

    def candidate_relative(q: Query, t: str, c: np.ndarray, neg: bool) -> np.ndarray:
        # How far above the term's median cosine over the corpus, in units of the distance
        # from the median to the best document: a term judged against its own distribution.
        median, best = np.median(c), c.max()
        return clamp((c - median) / (best - median)) if best > median else clamp(c)

    def shift(q: Query, t: str, c: np.ndarray, neg: bool) -> np.ndarray:
        return np.clip((1 + c) / 2, 0, 1)

    plain = lambda q, t, c, neg: clamp(c)  # noqa: E731
    half, paper = Operators(not_strength=0.5), Operators()

    def hybrid_truth(share: float, not_evidence: str) -> TruthMap:
        return TruthMap("hybrid", lexical=share, not_evidence=not_evidence)  # type: ignore[arg-type]

    # The default candidates, in the rule's order of simplicity (module docstring).
    candidates: dict[str, Logical | Variant] = {
        "itlr (default before the rule): clamp, NOT strength 0.5": Logical(
            ops=half, truth=TruthMap("clamp")
        ),
        "candidate: hybrid 0.5, BM25 NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.5, "lexical")
        ),
        "candidate: hybrid 0.5, cosine NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.5, "cosine")
        ),
        "candidate: hybrid 0.5, mixed NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.5, "mixed")
        ),
        "candidate: hybrid 0.3, BM25 NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.3, "lexical")
        ),
        "candidate: hybrid 0.7, BM25 NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.7, "lexical")
        ),
        "candidate: hybrid 0.5, BM25 NOT, strength 1": Logical(
            ops=paper, truth=hybrid_truth(0.5, "lexical")
        ),
        "candidate: hybrid 0.5, BM25 NOT, strength 0.3": Logical(
            ops=Operators(not_strength=0.3), truth=hybrid_truth(0.5, "lexical")
        ),
        # The pre-registered second round (module docstring), in its simplicity order.
        # Max NOT evidence ships (TruthMap not_evidence="max"): these two rows score through
        # the engines' path; as Variant(not_evidence="max") they scored identically.
        "candidate: hybrid 0.5, max NOT, strength 0.5": Logical(
            ops=half, truth=hybrid_truth(0.5, "max")
        ),
        # The rule's winner, shipped as the default since (itlr.scoring.DEFAULT_TRUTH).
        "candidate: hybrid 0.3, max NOT, strength 0.5 (the default now)": Logical(ops=half),
        "candidate: hybrid 0.5 by rarity, BM25 NOT by rarity, strength 0.5": Variant(
            share=0.5, not_evidence="lexical", rarity=True
        ),
        "candidate: hybrid 0.5 by rarity, max NOT, strength 0.5": Variant(
            share=0.5, not_evidence="max", rarity=True
        ),
        "candidate: hybrid 0.3 by rarity, max NOT, strength 0.5": Variant(
            share=0.3, not_evidence="max", rarity=True
        ),
    }
    variants: list[tuple[str, Callable[[str, str], np.ndarray]]] = [
        ("dense", dense),
        *((name, shipped(method)) for name, method in candidates.items()),
        ("itlr-paper: clamp, NOT 1-x", logical(plain, paper)),
        ("itlr, NOT strength 0.25", logical(plain, Operators(not_strength=0.25))),
        ("itlr, NOT strength 0.75", logical(plain, Operators(not_strength=0.75))),
        ("itlr, positive terms only (NOT strength 0)", logical(plain, Operators(not_strength=0))),
        ("itlr-hard, theta 0.3 (old default)", logical(plain, half, hard=0.3)),
        ("itlr-hard, theta 0.53 (calibrated default)", logical(plain, half, hard=0.53)),
        ("truth shift (1+cos)/2, NOT strength 0.5", logical(shift, half)),
        ("truth candidate-relative, NOT strength 0.5", logical(candidate_relative, half)),
        ("BM25 for NOT terms only (cosine positive terms), NOT strength 0.5", logical(lexical_not, half)),
    ]  # fmt: skip
    if sentences is not None:
        best_sentence = sentences

        def sentence_not(q: Query, t: str, c: np.ndarray, neg: bool) -> np.ndarray:
            return clamp(best_sentence.best(term_vectors[t])) if neg else clamp(c)

        variants += [
            ("best sentence for NOT terms, NOT strength 0.5", logical(sentence_not, half)),
            ("best sentence for NOT terms, NOT 1-x", logical(sentence_not, paper)),
        ]
    fold_a, fold_b = folds([q.id for q in data.queries])
    synthetic = (
        synthetic_rows(cache, candidates, args.synthetic_per_template)
        if args.synthetic_per_template
        else {}
    )
    print(
        f"{len(data.queries)} judged questions ({len(fold_a)} + {len(fold_b)}), {len(texts)} passages"
    )
    # The rewriter's folds (itlr.evaluation.folds, a hash of the id), shown beside the rule's.
    hashed = [[q.id for q in data.queries if fold_of(q.id) == f] for f in (0, 1)]
    print(
        "| variant | nDCG@10 | fold A | fold B | mean of folds | MRR@10 | synthetic 0/1/2/3 NOT "
        "| hash fold 0 | hash fold 1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, score in variants:
        result = evaluate(data, score)
        a = mean(result.per_query, "nDCG@10", fold_a) or 0.0
        b = mean(result.per_query, "nDCG@10", fold_b) or 0.0
        row = "/".join(f"{v:.3f}" for v in synthetic[name]) if name in synthetic else "-"
        print(
            f"| {name} | {result.metrics['nDCG@10']:.3f} | {a:.3f} | {b:.3f} | {(a + b) / 2:.3f} "
            f"| {result.metrics['MRR@10']:.3f} | {row} "
            f"| {mean(result.per_query, 'nDCG@10', hashed[0]) or 0.0:.3f} "
            f"| {mean(result.per_query, 'nDCG@10', hashed[1]) or 0.0:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
