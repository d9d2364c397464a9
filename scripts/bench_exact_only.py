"""The two ways to search an OpenSearch index created without `index.knn` (docs/follow.md):
back-filled in place with `--exact-only` (no ANN graph: every search scores every document)
against a copy with `index.knn` (`--into`: ANN candidates, knn mode). Search latency of the
same logical queries on the same documents, at `--documents` of them.

Documents are the demo passages' vectors with a little noise (so neighbours look like real
ones), a text and a hash; both indexes get the same. Each query runs `--repeat` times after one
warm-up; the table gives p50 and p95 per mode.

    python scripts/bench_exact_only.py --url http://127.0.0.1:9200 --documents 20000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugin"))

import itlr
from itlr.documents import read_jsonl
from itlr.embed import get_embedder
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import lexical_fields
from itlr.resources import data_file

QUERIES = [
    '"vitamin D" AND NOT "bone health"',
    '"sleep" AND "memory"',
    '"exercise" OR "muscle strength"',
    '"heart disease" AND NOT "diet"',
]


def create(url: str, name: str, knn: bool, dims: int) -> None:
    vector: dict = {"type": "knn_vector", "dimension": dims}
    if knn:
        vector["method"] = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}
    body = {
        "settings": {"index": {"knn": knn, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {
            "properties": {
                "body": {"type": "text"},
                "vec": vector,
                HASH_FIELD: {"type": "keyword", "index": False},
                "itlr_tokens": {"type": "keyword"},
                "itlr_token_keys": {"type": "long", "index": False},
                "itlr_length": {"type": "integer"},
            }
        },
    }
    httpx.put(f"{url}/{name}", json=body, timeout=60).raise_for_status()


def load(url: str, names: list[str], documents: int, embedder) -> None:
    texts = [d.text for d in read_jsonl(data_file("demo", "corpus.jsonl"))]
    base = embedder.encode(texts)
    rng = np.random.default_rng(7)
    with httpx.Client(timeout=600) as client:
        for start in range(0, documents, 2000):
            lines = []
            for n in range(start, min(documents, start + 2000)):
                vector = base[n % len(texts)] + rng.normal(0, 0.02, base.shape[1])
                vector /= np.linalg.norm(vector)
                text = texts[n % len(texts)]
                source = {
                    "body": text,
                    "vec": vector.round(6).tolist(),
                    HASH_FIELD: content_hash(text, embedder.name),
                    **lexical_fields(text),
                }
                lines += [json.dumps({"index": {"_id": f"d{n}"}}), json.dumps(source)]
            payload = "\n".join(lines) + "\n"
            for name in names:
                answer = client.post(
                    f"{url}/{name}/_bulk",
                    content=payload,
                    headers={"content-type": "application/x-ndjson"},
                )
                assert not answer.json()["errors"], answer.text[:300]
    for name in names:
        httpx.post(f"{url}/{name}/_refresh", timeout=600)
        httpx.post(f"{url}/{name}/_forcemerge?max_num_segments=1", timeout=1800)


def latencies(index, mode: str, repeat: int) -> list[float]:
    took = []
    for query in QUERIES:
        index.search(query, k=10, mode=mode)
        for _ in range(repeat):
            started = time.perf_counter()
            index.search(query, k=10, mode=mode)
            took.append(time.perf_counter() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    embedder = get_embedder(None)
    stem = f"itlr-exact-bench-{uuid.uuid4().hex[:8]}"
    exact_name, knn_name = f"{stem}-exact", f"{stem}-knn"
    try:
        create(args.url, exact_name, False, embedder.dims)
        create(args.url, knn_name, True, embedder.dims)
        load(args.url, [exact_name, knn_name], args.documents, embedder)
        rows = []
        for name, mode in ((exact_name, "exact"), (knn_name, "knn"), (knn_name, "exact")):
            index = itlr.Index.open(name, url=args.url, vector_field="vec", text_field="body")
            took = sorted(latencies(index, mode, args.repeat))
            p95 = took[min(len(took) - 1, round(0.95 * (len(took) - 1)))]
            what = "exact-only, in place" if name == exact_name else "copy with index.knn"
            rows.append(
                f"| {args.documents:,} | {what} | {mode} | {statistics.median(took) * 1000:.0f} "
                f"| {p95 * 1000:.0f} |"
            )
    finally:
        for name in (exact_name, knn_name):
            httpx.delete(f"{args.url}/{name}", timeout=120)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load avg {os.getloadavg()[0]:.1f}"
    )
    print("| documents | index | mode | p50 ms | p95 ms |")
    print("|---:|---|---|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
