"""Check a cluster against the embedded engine: same scores, same rankings.

    python scripts/parity_check.py --url http://127.0.0.1:9200 [--engine opensearch] [--queries 60]

Loads the demo corpus into a throw-away index, runs random logical queries (random trees over
the demo phrases, every operator family, every truth mapping) in exact mode on both engines and
prints how many top-10 rankings are identical and the largest relative score difference; then
knn mode with a candidate budget that covers the corpus against exact mode. The index is
deleted afterwards. The same comparison, with assertions, is the `opensearch` test suite.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import uuid
from pathlib import Path

import numpy as np

from itlr import Operators, TruthMap
from itlr.benchmarks.text_corpus import DEMO_PHRASES, random_queries
from itlr.documents import read_jsonl
from itlr.embed import get_embedder
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.factory import Connection, EngineSpec, open_backend
from itlr.options import SearchOptions
from itlr.query import parse
from itlr.resources import data_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--engine", default="auto", choices=["auto", "opensearch", "elasticsearch"])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    embedder = get_embedder()
    corpus = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    ids, texts = [d.id for d in corpus], [d.text for d in corpus]
    vectors = embedder.encode(texts)
    rng = random.Random(args.seed)
    queries = [parse(str(q)) for q in random_queries(list(DEMO_PHRASES), args.queries, rng)]
    term_vectors = dict(zip(DEMO_PHRASES, embedder.encode(list(DEMO_PHRASES)), strict=True))

    spec = EngineSpec(args.engine, f"itlr-parity-{uuid.uuid4().hex[:8]}", Connection(args.url))
    remote = open_backend(spec, embedder, create=True)
    with tempfile.TemporaryDirectory() as folder:
        local = EmbeddedBackend.create(Path(folder) / "parity", embedder.name, embedder.dims)
        local.add(ids, texts, vectors, [d.fields for d in corpus])
        try:
            failed = remote.add(ids, texts, vectors, [d.fields for d in corpus])
            if failed:
                raise SystemExit(f"the cluster refused {len(failed)} documents: {failed}")
            remote.refresh()
            same_ids = 0
            worst = 0.0
            knn_same = 0
            anchored = 0
            for query in queries:
                options = SearchOptions(
                    k=10,
                    mode="exact",
                    ops=Operators(
                        rng.choice(["product", "sum", "min", "lukasiewicz"]),
                        rng.choice(["sum", "max", "probsum"]),
                        rng.choice(["complement", "reciprocal"]),
                    ),
                    truth=rng.choice(
                        [TruthMap("clamp"), TruthMap("shift"), TruthMap("sigmoid", 0.3, 8.0)]
                    ),
                )
                matrix = np.stack([term_vectors[t] for t in query.terms])
                theirs = remote.search(query, matrix, options)
                mine = local.search(query, matrix, options)
                same_ids += [h.id for h in theirs] == [h.id for h in mine]
                for a, b in zip(theirs, mine, strict=True):
                    worst = max(worst, abs(a.score - b.score) / max(abs(b.score), 1e-6))
                if query.has_positive_term:
                    anchored += 1
                    full = SearchOptions(
                        k=10,
                        mode="knn",
                        candidates=len(corpus),
                        ops=options.ops,
                        truth=options.truth,
                    )
                    knn = remote.search(query, matrix, full)
                    knn_same += [h.id for h in knn] == [h.id for h in theirs]
        finally:
            remote.client.indices.delete(index=remote.index_name)
    print(
        f"{remote.engine} at {args.url}, {len(corpus)} documents, {len(queries)} random queries:\n"
        f"  exact mode: identical top-10 ids {same_ids}/{len(queries)}, "
        f"largest relative score difference {worst:.1e}\n"
        f"  knn mode (candidates = corpus size) == exact top-10: {knn_same}/{anchored} "
        "queries with a positive term"
    )


if __name__ == "__main__":
    main()
