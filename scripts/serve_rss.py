"""RSS of a long-lived `itlr serve` over many searches that each produce a warning.

    python scripts/serve_rss.py --url http://127.0.0.1:9200 --searches 10000

Ingests the demo corpus into a throw-away OpenSearch index, serves it, sends `--searches`
POST /search requests whose candidate budget exceeds OpenSearch's k limit (each answer must
carry the capped-budget warning), and prints the server's RSS after a warm-up and at the end.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
# Not anchored (a NOT under an OR): knn mode runs one capped search, not certificate rounds
# (which stay under the engine's k limit and so never warn).
QUERIES = ['"vitamin D" OR NOT "bone health"', '"sleep" OR NOT "coffee"', '"running" OR NOT "knee"']


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="OpenSearch URL")
    parser.add_argument("--searches", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    index = f"itlr-rss-{uuid.uuid4().hex[:8]}"
    engine = ["--engine", "opensearch", "--url", args.url]
    corpus = ROOT / "plugin" / "itlr" / "data" / "demo" / "corpus.jsonl"
    subprocess.run(["itlr", "ingest", str(corpus), "--index", index, *engine], check=True)
    port = free_port()
    quiet = ["--torch-threads", "1", "--log-level", "warning"]
    server = subprocess.Popen(
        ["itlr", "serve", "--index", index, *engine, "--port", str(port), *quiet]
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=120) as client:
            for _ in range(600):
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.5)
            body = {"k": 5, "candidates": 20_000}

            def search(number: int) -> None:
                answer = client.post("/search", json={"query": QUERIES[number % 3], **body})
                answer.raise_for_status()
                warnings = answer.json()["warnings"]
                assert any("exceeds OpenSearch's k limit" in w for w in warnings), warnings

            for number in range(args.warmup):
                search(number)
            before = rss_kib(server.pid)
            started = time.perf_counter()
            for number in range(args.searches):
                search(number)
                if (number + 1) % 1000 == 0:
                    print(f"{number + 1} searches: RSS {rss_kib(server.pid)} KiB", flush=True)
            elapsed = time.perf_counter() - started
            after = rss_kib(server.pid)
        print(
            f"RSS after {args.warmup} warm-up searches: {before} KiB; after {args.searches} more "
            f"(each with a warning): {after} KiB; growth {after - before} KiB; "
            f"{args.searches / elapsed:.1f} searches/s"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        httpx.delete(f"{args.url}/{index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
