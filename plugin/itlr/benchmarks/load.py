"""A bounded load test of a real `itlr serve`: ordinary searches at high concurrency, without and
then with a few maximal-size queries mixed in (issue 26: the ordinary requests' p99 should grow
no more than 2x when the large ones arrive).

The service runs as its own process (`itlr serve` on a free loopback port), so the clients'
work does not share its interpreter; the clients are one asyncio loop with `concurrency`
connections. A maximal query is the largest the limits admit: LIMITS.max_terms distinct quoted
terms filling LIMITS.max_query_chars.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from itlr.benchmarks.servers import local_server
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

# How much of a failed request's answer or error the report keeps.
FAILURE_TEXT = 160

_WORDS = [
    "vitamin",
    "sunlight",
    "calcium",
    "sleep",
    "memory",
    "exercise",
    "protein",
    "fibre",
    "heart",
    "blood",
    "pressure",
    "insulin",
    "muscle",
    "bone",
    "skin",
    "immune",
    "winter",
    "omega",
    "coffee",
    "tea",
    "sugar",
    "salt",
    "iron",
    "zinc",
    "gut",
]


def maximal_query(seed: int = 0) -> str:
    """LIMITS.max_terms distinct quoted terms OR-ed together, just under max_query_chars."""
    terms = LIMITS.max_terms
    width = LIMITS.max_query_chars // terms - len(' OR ""')
    parts = []
    for n in range(terms):
        words, i = [f"t{n + seed * terms}"], n + seed * terms  # distinct: no term shared
        while len(" ".join(words)) < width:
            words.append(_WORDS[i % len(_WORDS)])
            i = i * 7 + 3
        parts.append('"' + " ".join(words)[:width].strip() + '"')
    query = " OR ".join(parts)
    if len(query) > LIMITS.max_query_chars:
        raise ConfigurationError("the maximal query came out over the limit")  # a bug here
    return query


@dataclass(frozen=True)
class Phase:
    name: str
    ordinary: int
    large: int
    seconds: float
    errors: int
    ordinary_p50_ms: float
    ordinary_p99_ms: float
    large_p50_ms: float | None
    # Why requests failed, and how often: a status and the start of the answer, or the error.
    failures: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def _phase(
    url: str, name: str, bodies: list[dict[str, Any]], large: set[int], concurrency: int
) -> Phase:
    import httpx

    latencies: dict[int, float] = {}
    failures: Counter[str] = Counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(len(bodies)):
        queue.put_nowait(n)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            n = queue.get_nowait()
            started = time.perf_counter()
            try:
                answer = await client.post("/search", json=bodies[n])
                if answer.status_code != 200:
                    failures[f"{answer.status_code} {answer.text[:FAILURE_TEXT]!r}"] += 1
            except httpx.TransportError as error:  # a failed request, not the end of the run
                failures[f"{type(error).__name__}: {str(error)[:FAILURE_TEXT]}"] += 1
            latencies[n] = time.perf_counter() - started

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    ordinary = [t for n, t in latencies.items() if n not in large]
    heavy = [t for n, t in latencies.items() if n in large]
    return Phase(
        name,
        len(ordinary),
        len(heavy),
        seconds,
        failures.total(),
        _percentile(ordinary, 0.5),
        _percentile(ordinary, 0.99),
        _percentile(heavy, 0.5) if heavy else None,
        dict(failures),
    )


def itlr_serve(index: str, torch_threads: int | None = None) -> AbstractContextManager[str]:
    """`itlr serve --index INDEX` as a subprocess on a free loopback port, until the block ends."""

    def arguments(port: int) -> list[str]:
        command = ["-c", "from itlr.cli import app; app(prog_name='itlr')"]
        command += ["serve", "--index", index, "--port", str(port), "--log-level", "warning"]
        if torch_threads is not None:
            command += ["--torch-threads", str(torch_threads)]
        return command

    return local_server(arguments, "/healthz", "itlr serve")


def run(
    index: str,
    queries: Sequence[str],
    requests: int = 1000,
    concurrency: int = 100,
    large: int = 10,
    k: int = 10,
    torch_threads: int | None = None,
) -> list[Phase]:
    """Two phases against one `itlr serve`: `requests` ordinary searches, then the same with
    `large` maximal queries spread evenly among them."""
    if not queries or requests < 1 or concurrency < 1 or large < 0:
        raise ConfigurationError("need queries, and requests/concurrency >= 1, large >= 0")
    ordinary = [{"query": queries[n % len(queries)], "k": k} for n in range(requests)]
    mixed = list(ordinary)
    spots = {round((i + 0.5) * requests / large) for i in range(large)} if large else set()
    heavy: set[int] = set()
    for shift, spot in enumerate(sorted(spots)):
        mixed.insert(spot + shift, {"query": maximal_query(shift), "k": k})
        heavy.add(spot + shift)
    with itlr_serve(index, torch_threads) as url:
        # First calls on each input shape are slow: every ordinary query once, unmeasured.
        warm = [{"query": q, "k": k} for q in queries] + [{"query": maximal_query(99), "k": k}]
        asyncio.run(_phase(url, "warm-up", warm, set(), 1))
        return [
            asyncio.run(_phase(url, "ordinary only", ordinary, set(), concurrency)),
            asyncio.run(_phase(url, f"with {len(heavy)} maximal", mixed, heavy, concurrency)),
        ]


def markdown(phases: Sequence[Phase]) -> str:
    lines = [
        "| phase | ordinary | maximal | seconds | errors | ordinary p50 ms | ordinary p99 ms "
        "| maximal p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in phases:
        heavy = f"{p.large_p50_ms:.0f}" if p.large_p50_ms is not None else "-"
        lines.append(
            f"| {p.name} | {p.ordinary} | {p.large} | {p.seconds:.1f} | {p.errors} "
            f"| {p.ordinary_p50_ms:.0f} | {p.ordinary_p99_ms:.0f} | {heavy} |"
        )
    for p in phases:
        for reason, count in sorted(p.failures.items()):
            lines.append(f"\n{p.name}: {count} failed with {reason}")
    if len(phases) == 2 and phases[0].ordinary_p99_ms:
        ratio = phases[1].ordinary_p99_ms / phases[0].ordinary_p99_ms
        lines.append(f"\nordinary p99 with the maximal queries / without: {ratio:.2f}x")
    return "\n".join(lines)
