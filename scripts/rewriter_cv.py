"""Two-fold cross-validation of the rule rewriter on a BEIR folder of real questions.

    python scripts/rewriter_cv.py ../shared/negconstraint-dev --split dev [--show 0|1]

Prints nDCG@10 of dense retrieval and of itlr at its defaults (questions rewritten by the rule
rewriter) on each fold of `itlr.evaluation.folds`, and on both. A rule change is kept only if
it does not lower either fold (gaps under ~0.03 are noise on 50 questions). `--show F` prints
fold F's questions with their rewrites: the fold a rule may be written from; the other fold is
only measured. Every document is scored exactly, in process, from cached embeddings; the data
is read in place.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from itlr.composition import compose
from itlr.embed import get_embedder
from itlr.evaluation.cache import EmbeddingCache
from itlr.evaluation.datasets import BeirDataset, load_beir
from itlr.evaluation.folds import FOLDS, fold_of
from itlr.evaluation.metrics import evaluate_run
from itlr.evaluation.runner import VectorCorpus, top_ranked
from itlr.rewrite.rules import rewrite_rules
from itlr.scoring import SEARCH_OPERATORS, TruthMap

DEPTH = 100


def ndcg(data: BeirDataset, scores: dict[str, np.ndarray], ids: set[str]) -> float:
    corpus = VectorCorpus(tuple(d.id for d in data.corpus), np.zeros((len(data.corpus), 1)))
    order, names = corpus.id_order, np.array(corpus.ids, dtype=object)
    run = {}
    for qid in ids:
        best = top_ranked(scores[qid], order, DEPTH)
        run[qid] = {str(names[i]): float(DEPTH - rank) for rank, i in enumerate(best)}
    qrels = {q: r for q, r in data.qrels.items() if q in ids}
    return evaluate_run(run, qrels, {}).metrics["nDCG@10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--show", type=int, choices=FOLDS, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    data = load_beir(args.dataset, split=args.split)
    cache = EmbeddingCache(get_embedder(None))
    docs = cache.encode([d.text for d in data.corpus])
    queries = {q.id: rewrite_rules(q.text).query for q in data.queries}
    terms = sorted({t for q in queries.values() for t in q.terms})
    term_vectors = dict(zip(terms, cache.encode(terms), strict=True))
    dense_vectors = cache.encode([q.text for q in data.queries])

    dense, logical = {}, {}
    for q, vector in zip(data.queries, dense_vectors, strict=True):
        dense[q.id] = docs @ vector
        query = queries[q.id]
        cosines = docs @ np.stack([term_vectors[t] for t in query.terms], axis=1)
        logical[q.id] = compose(query, cosines, SEARCH_OPERATORS, TruthMap()).scores

    if args.show is not None:
        for q in data.queries:
            if fold_of(q.id) == args.show:
                print(f"{q.id}\t{q.text}\n\t-> {queries[q.id]}")
    print("| method | fold 0 | fold 1 | both |\n|---|---|---|---|")
    folds = [{q.id for q in data.queries if fold_of(q.id) == f} for f in FOLDS]
    both = set().union(*folds)
    for name, scores in (("dense", dense), ("itlr (rules, defaults)", logical)):
        row = [ndcg(data, scores, ids) for ids in (*folds, both)]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + " |")


if __name__ == "__main__":
    main()
