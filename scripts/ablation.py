"""Ablation of itlr's truth values and operators on a BEIR folder of questions with exclusions.

    python scripts/ablation.py ../shared/negconstraint-dev --split dev [--sentences]

Every variant scores every document exactly, in process, from one set of cached embeddings
(`$ITLR_HOME/cache`), after the rule rewriter turned each question into a logical query; metrics
come from ir-measures through itlr.evaluation. The variants the product ships are also
`itlr eval` methods; the others live only here, because they did not pay enough to ship
(docs/benchmarks.md, "Real questions"). Needs `pip install bm25s` for the lexical variants.
The data is read in place: nothing from the dataset is written anywhere but the cache.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from itlr.embed import get_embedder
from itlr.evaluation.cache import EmbeddingCache
from itlr.evaluation.datasets import BeirDataset, load_beir
from itlr.evaluation.metrics import evaluate_run
from itlr.evaluation.runner import VectorCorpus, top_ranked
from itlr.query import Not, Query, Term, walk
from itlr.rewrite.rules import rewrite_rules
from itlr.scoring import Operators

# (query, term, cosines of every document to the term, is the term negated) -> truth values
TruthFn = Callable[[Query, str, np.ndarray, bool], np.ndarray]
DEPTH = 100


def clamp(cosines: np.ndarray) -> np.ndarray:
    return np.clip(cosines, 0.0, 1.0)


class Lexical:
    """BM25 (bm25s) over the corpus; a term's scores divided by the best document's score."""

    def __init__(self, texts: list[str]) -> None:
        import bm25s

        self._bm25s = bm25s
        self.index = bm25s.BM25()
        tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
        self.index.index(tokens, show_progress=False)
        self._cache: dict[str, np.ndarray] = {}

    def scores(self, term: str) -> np.ndarray:
        if term not in self._cache:
            tokens = self._bm25s.tokenize([term], stopwords="en", show_progress=False)
            words = {i: w for w, i in tokens.vocab.items()}
            raw = np.asarray(self.index.get_scores([words[i] for i in tokens.ids[0]]), float)
            best = raw.max() if raw.size else 0.0
            self._cache[term] = raw / best if best > 0 else raw
        return self._cache[term]


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


def evaluate(data: BeirDataset, score: Callable[[str, str], np.ndarray]) -> dict[str, float]:
    corpus = VectorCorpus(tuple(d.id for d in data.corpus), np.zeros((len(data.corpus), 1)))
    order, ids = corpus.id_order, np.array(corpus.ids, dtype=object)
    run = {}
    for query in data.queries:
        best = top_ranked(np.asarray(score(query.id, query.text), float), order, DEPTH)
        run[query.id] = {str(ids[i]): float(DEPTH - rank) for rank, i in enumerate(best)}
    return evaluate_run(run, data.qrels, data.negatives).metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--sentences", action="store_true", help="add best-sentence variants")
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

    def dense(qid: str, text: str) -> np.ndarray:
        return docs @ cache.encode([text])[0]

    def hybrid(share: float) -> TruthFn:
        return lambda q, t, c, neg: (1 - share) * clamp(c) + share * lexical.scores(t)

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
    variants: list[tuple[str, Callable[[str, str], np.ndarray]]] = [
        ("dense", dense),
        ("itlr-paper: clamp, NOT 1-x", logical(plain, paper)),
        ("itlr, NOT strength 0.25", logical(plain, Operators(not_strength=0.25))),
        ("itlr (default): clamp, NOT strength 0.5", logical(plain, half)),
        ("itlr, NOT strength 0.75", logical(plain, Operators(not_strength=0.75))),
        ("itlr, positive terms only (NOT strength 0)", logical(plain, Operators(not_strength=0))),
        ("itlr-hard, theta 0.3 (old default)", logical(plain, half, hard=0.3)),
        ("itlr-hard, theta 0.53 (calibrated default)", logical(plain, half, hard=0.53)),
        ("truth shift (1+cos)/2, NOT strength 0.5", logical(shift, half)),
        ("truth candidate-relative, NOT strength 0.5", logical(candidate_relative, half)),
        ("hybrid 50/50 cosine+BM25, NOT strength 0.5", logical(hybrid(0.5), half)),
        ("hybrid 50/50 cosine+BM25, NOT strength 0.3", logical(hybrid(0.5), Operators(not_strength=0.3))),
        ("hybrid 50/50 cosine+BM25, NOT 1-x", logical(hybrid(0.5), paper)),
        ("BM25 for NOT terms only, NOT strength 0.5", logical(lexical_not, half)),
    ]  # fmt: skip
    if sentences is not None:
        best_sentence = sentences

        def sentence_not(q: Query, t: str, c: np.ndarray, neg: bool) -> np.ndarray:
            return clamp(best_sentence.best(term_vectors[t])) if neg else clamp(c)

        variants += [
            ("best sentence for NOT terms, NOT strength 0.5", logical(sentence_not, half)),
            ("best sentence for NOT terms, NOT 1-x", logical(sentence_not, paper)),
        ]
    print(f"{len(data.queries)} judged questions, {len(texts)} passages")
    print("| variant | nDCG@10 | MRR@10 |\n|---|---|---|")
    for name, score in variants:
        metrics = evaluate(data, score)
        print(f"| {name} | {metrics['nDCG@10']:.3f} | {metrics['MRR@10']:.3f} |")


if __name__ == "__main__":
    main()
