"""Cost of the follower's hash sweep (itlr.follow, itlr.changes): how long one pass over an
index takes, unpaced, and what it costs per million documents.

An index of `--documents` demo passages (each with the content hash of its text, as a back-fill
leaves it; no vectors: the sweep never reads them), `--stale` of them with a text changed
after hashing (as a `_bulk update` leaves it). The follower's own sweep (`Follower._verify`,
no pacing) reads it in `_seq_no` order until it is caught up; the table gives the wall time,
documents per second, this process's CPU seconds, the sweep's searches, and the stale hashes it
found (all of them, or the pass is wrong).

    python scripts/bench_hash_sweep.py --url http://127.0.0.1:9200 --documents 100000

Per million documents is documents-per-second extrapolated linearly: the sweep is pages of
`_seq_no` range searches, each the same work wherever the cursor is.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugin"))

from itlr.backfill import cluster_backend
from itlr.documents import read_jsonl
from itlr.embed import get_embedder
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec
from itlr.engines.layout import IndexLayout
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.follow import FollowCycle, Follower
from itlr.option_groups import BackfillOptions
from itlr.resources import data_file


def load(url: str, name: str, documents: int, stale: int, model: str) -> None:
    body = {
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {
            "properties": {
                "body": {"type": "text"},
                HASH_FIELD: {"type": "keyword", "index": False},
            }
        },
    }
    httpx.put(f"{url}/{name}", json=body, timeout=60).raise_for_status()
    texts = [d.text for d in read_jsonl(data_file("demo", "corpus.jsonl"))]
    every = max(1, documents // max(1, stale)) if stale else 0
    with httpx.Client(timeout=300) as client:
        for start in range(0, documents, 5000):
            lines = []
            for n in range(start, min(documents, start + 5000)):
                text = f"{texts[n % len(texts)]} ({n})"
                digest = content_hash(text, model)
                if every and n % every == 0:
                    text += " changed by a _bulk update"
                lines += [
                    json.dumps({"index": {"_id": f"d{n}"}}),
                    json.dumps({"body": text, HASH_FIELD: digest}),
                ]
            answer = client.post(
                f"{url}/{name}/_bulk",
                content="\n".join(lines) + "\n",
                headers={"content-type": "application/x-ndjson"},
            )
            assert not answer.json()["errors"], answer.text[:300]
    httpx.post(f"{url}/{name}/_refresh", timeout=300)


def sweep(url: str, name: str, documents: int) -> dict[str, float]:
    embedder = get_embedder(None)
    spec = EngineSpec(
        engine="opensearch",
        index_name=name,
        connection=Connection(url),
        layout=IndexLayout("vec", "body"),
    )
    unpaced = BackfillOptions(verify_rate=1e12)
    follower = Follower(cluster_backend(spec, embedder), embedder, "body", unpaced)
    follower.prepare()
    searches = 0
    search = follower.operations.search

    def counted(*args, **kwargs):
        nonlocal searches
        searches += 1
        return search(*args, **kwargs)

    follower.operations.search = counted  # type: ignore[method-assign]
    cycle = FollowCycle(1)
    wall, cpu = time.perf_counter(), time.process_time()
    while True:
        follower._tokens = 1e12  # unpaced: the pass as fast as it goes
        follower._verify(cycle)
        if follower.feed.caught_up and follower.feed.verified_through is not None:
            break
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "verified": cycle.verified,
        "stale": cycle.stale,
        "wall": wall,
        "cpu": cpu,
        "searches": searches,
        "rate": cycle.verified / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--stale", type=int, default=100)
    args = parser.parse_args()
    name = f"itlr-sweep-bench-{uuid.uuid4().hex[:8]}"
    model = get_embedder(None).name
    try:
        started = time.perf_counter()
        load(args.url, name, args.documents, args.stale, model)
        loaded = time.perf_counter() - started
        result = sweep(args.url, name, args.documents)
    finally:
        httpx.delete(f"{args.url}/{name}", timeout=120)
    per_million = 1_000_000 / result["rate"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load avg {os.getloadavg()[0]:.1f}; loaded in {loaded:.0f}s"
    )
    print(
        "| documents | stale found | sweep s | docs/s | client CPU s | searches | s per million |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {result['verified']:,} | {result['stale']} of {args.stale} | {result['wall']:.1f} "
        f"| {result['rate']:,.0f} | {result['cpu']:.1f} | {result['searches']} "
        f"| {per_million:,.0f} |"
    )


if __name__ == "__main__":
    main()
