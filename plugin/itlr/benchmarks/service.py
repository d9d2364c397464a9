"""Throughput of the JSON service's /search with 1, 4 and 8 concurrent clients.

The service runs in-process under a real uvicorn on loopback; each client is a thread with its
own HTTP connection, sending the same logical queries round-robin. What is measured is what an
application sees: embedding the terms, scoring, JSON, HTTP. With the term cache on (the default)
a repeated query's terms skip the encoder; off, every request pays the encoder, which is what
distinct queries (a cache miss each) cost.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from itlr.errors import ConfigurationError, EngineError
from itlr.index import Index
from itlr.term_cache import set_term_cache_size, term_cache_size, term_cache_stats


@dataclass(frozen=True)
class Throughput:
    clients: int
    requests: int
    seconds: float
    p50_ms: float
    p95_ms: float
    term_cache: bool = True
    # Query terms answered by the term cache / sent to the encoder during the measured calls.
    cache_hits: int = 0
    cache_misses: int = 0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "requests": self.requests,
            "seconds": self.seconds,
            "requests_per_second": self.per_second,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "term_cache": self.term_cache,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
        }


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(url: str, bodies: Sequence[dict[str, Any]], clients: int, requests: int) -> Throughput:
    """`requests` POST /search calls spread over `clients` threads, after one warm-up each."""
    import httpx

    per_client = max(1, requests // clients)

    def client_run(offset: int) -> list[float]:
        latencies = []
        with httpx.Client(base_url=url, timeout=120) as client:
            client.post("/search", json=bodies[offset % len(bodies)]).raise_for_status()
            for i in range(per_client):
                started = time.perf_counter()
                answer = client.post("/search", json=bodies[(offset + i) % len(bodies)])
                latencies.append(time.perf_counter() - started)
                if answer.status_code != 200:
                    raise EngineError(f"/search answered {answer.status_code}: {answer.text}")
        return latencies

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        runs = list(pool.map(client_run, range(clients)))
    seconds = time.perf_counter() - started
    latencies = [x for run in runs for x in run]
    return Throughput(
        clients,
        len(latencies),
        seconds,
        statistics.median(latencies) * 1000,
        _percentile(latencies, 0.95) * 1000,
    )


def run(
    index: Index,
    queries: Sequence[str],
    clients: Sequence[int] = (1, 4, 8),
    requests: int = 200,
    k: int = 10,
    term_cache: bool = True,
) -> list[Throughput]:
    """Serve `index` and measure /search throughput at each client count, in order, with the
    term cache on or off (restored afterwards)."""
    from itlr.service import create_app
    from itlr.service.server import serving

    if not queries:
        raise ConfigurationError("no queries to send")
    if any(c < 1 for c in clients) or requests < 1:
        raise ConfigurationError("`clients` and `requests` must be at least 1")
    bodies = [{"query": q, "k": k} for q in queries]
    previous = term_cache_size()
    if not term_cache:
        set_term_cache_size(0)
    try:
        with serving(create_app(index)) as url:
            # The model's first call on each input shape is many times slower than later ones:
            # every query is sent once, unmeasured, before the first timing.
            measure(url, bodies, 1, len(bodies))
            # Wall time includes the clients' own work (JSON, HTTP) on the same cores.
            return [_counted(url, bodies, c, requests, term_cache) for c in clients]
    finally:
        set_term_cache_size(previous)


def _counted(
    url: str, bodies: Sequence[dict[str, Any]], clients: int, requests: int, term_cache: bool
) -> Throughput:
    """`measure`, with how the term cache answered during it."""
    before = _cache_counts()
    result = measure(url, bodies, clients, requests)
    hits, misses = (after - earlier for after, earlier in zip(_cache_counts(), before, strict=True))
    return replace(result, term_cache=term_cache, cache_hits=hits, cache_misses=misses)


def _cache_counts() -> tuple[int, int]:
    stats = term_cache_stats()
    return sum(s.hits for s in stats), sum(s.misses for s in stats)


def markdown(results: Sequence[Throughput]) -> str:
    lines = [
        "| term cache | clients | requests | requests/s | p50 ms | p95 ms | cache hits / misses |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {'on' if r.term_cache else 'off'} | {r.clients} | {r.requests} "
            f"| {r.per_second:.1f} | {r.p50_ms:.1f} | {r.p95_ms:.1f} "
            f"| {r.cache_hits} / {r.cache_misses} |"
        )
    return "\n".join(lines)
