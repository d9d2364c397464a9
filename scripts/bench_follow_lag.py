"""Lag of `itlr backfill --follow`: from a REST write to "found by itlr search".

Writer threads PUT documents (the demo corpus' texts, each with its own `tag`) into an index
made through REST, at a steady rate, one request each; the follower (`itlr backfill --follow`,
its own process) embeds them; a checker runs one `Index.search` every 100 ms
over the documents written but not yet found (knn mode, a `terms` filter on their tags: a
document without a vector cannot be a kNN candidate) and notes when each first comes back. The
lag of a document is that moment minus the end of its PUT.

    python scripts/bench_follow_lag.py --url http://127.0.0.1:9200 --rate 50 --seconds 60

prints a markdown table (p50 / p95 / max lag, documents written and found). With `--into` the
index is made without `index.knn` (OpenSearch's default) and followed into a copy
(`--follow --into`): the checker searches the copy.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugin"))

import itlr
from itlr.documents import read_jsonl
from itlr.resources import data_file


def create(url: str, name: str, knn: bool = True) -> None:
    body = {
        "settings": {"index": {"knn": knn, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}}},
    }
    httpx.put(f"{url}/{name}", json=body, timeout=60).raise_for_status()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run(url: str, rate: float, seconds: float, interval: float, into: bool) -> list[str]:
    texts = [d.text for d in read_jsonl(data_file("demo", "corpus.jsonl"))]
    name = f"itlr-follow-bench-{uuid.uuid4().hex[:8]}"
    searched = f"{name}-itlr" if into else name
    create(url, name, knn=not into)
    command = [
        *(sys.executable, "-m", "itlr", "backfill", "--url", url, "--index", name),
        *("--text-field", "body", "--vector-field", "vec", "--follow"),
        *("--interval", str(interval)),
        *(("--into", searched) if into else ()),
    ]
    plugin = str(Path(__file__).resolve().parent.parent / "plugin")
    env = {**os.environ, "PYTHONPATH": plugin, "HF_HUB_OFFLINE": "1"}
    written: dict[str, float] = {}
    found: dict[str, float] = {}
    lock = threading.Lock()
    done_writing = threading.Event()

    def put(client: httpx.Client, n: int) -> None:
        tag = f"t{n}"
        doc = {"body": texts[n % len(texts)], "tag": tag}
        client.put(f"{url}/{name}/_doc/{tag}", json=doc).raise_for_status()
        with lock:
            written[tag] = time.perf_counter()

    def write() -> None:
        # Several connections: one PUT's latency must not slow the steady rate down.
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
            start = time.perf_counter()
            n = 0
            while time.perf_counter() - start < seconds:
                pause = start + n / rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                pool.submit(put, client, n)
                n += 1
        done_writing.set()

    # The mapping gets its vector field from the follower before the first write.
    follower = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120

    def mapped() -> bool:
        answer = httpx.get(f"{url}/{searched}/_mapping", timeout=30)
        return answer.status_code == 200 and "vec" in answer.json()[searched]["mappings"].get(
            "properties", {}
        )

    while not mapped():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    index = itlr.Index.open(searched, url=url, vector_field="vec", text_field="body")
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    give_up = None
    while True:
        with lock:
            pending = [t for t in written if t not in found]
        if done_writing.is_set() and not pending:
            break
        if done_writing.is_set():
            give_up = give_up or time.perf_counter() + 60
            if time.perf_counter() > give_up:
                break
        if pending:
            pending = pending[:1000]
            result = index.search(
                '"health"', k=len(pending), filter={"terms": {"tag": pending}}, mode="knn"
            )
            now = time.perf_counter()
            for hit in result.hits:
                found.setdefault(hit.id, now)
        time.sleep(0.1)
    follower.send_signal(signal.SIGTERM)
    follower.wait(60)
    lags = [found[t] - written[t] for t in found]
    httpx.delete(f"{url}/{name}", timeout=60)
    httpx.delete(f"{url}/{searched}", timeout=60)
    load = os.getloadavg()[0]
    how = " into a copy" if into else ""
    return [
        f"| {rate:g} docs/s for {seconds:g} s, follow{how} interval {interval:g} s "
        f"| {len(written)} "
        f"| {len(found)} | {percentile(lags, 0.5):.2f} | {percentile(lags, 0.95):.2f} "
        f"| {max(lags):.2f} | {statistics.mean(lags):.2f} | {load:.1f} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, nargs="+", default=[1.0])
    parser.add_argument("--into", action="store_true", help="follow into a copy (--into)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}")
    print(
        "| writes | written | found | lag p50 (s) | lag p95 (s) | max (s) | mean (s) "
        "| load avg (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for interval in args.interval:
        for line in run(args.url, args.rate, args.seconds, interval, args.into):
            print(line, flush=True)


if __name__ == "__main__":
    main()
