"""What the query-bar proxy adds to a logical search: the same logical queries sent directly
(embed the terms, build the request, POST it to the cluster: what `itlr search` does) and typed
in a query bar (POST the UI's body to the proxy, which does the same and forwards)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from itlr.benchmarks.latency import Timing, time_interleaved
from itlr.embed import Embedder
from itlr.engines.cluster import ClusterBackend
from itlr.parser import parse
from itlr.search import SearchOptions

# Real questions over the demo corpus, 1 to 5 terms.
QUERIES = (
    '"vitamin D benefits"',
    '"vitamin D benefits" AND NOT "bone health"',
    '("sleep quality" OR "insomnia") AND NOT "caffeine"',
    '"exercise" AND "heart health" AND NOT "weight loss"',
    '("calcium" OR "vitamin D") AND NOT ("kidney stones" OR "supplements")',
    '"depression" AND NOT "medication"',
)


@dataclass(frozen=True)
class ProxyOverhead:
    embed: Timing
    direct: Timing
    proxy: Timing

    @property
    def added_p50_ms(self) -> float:
        return self.proxy.p50_ms - self.direct.p50_ms

    @property
    def allowed_p50_ms(self) -> float:
        """The goal: at most 10 % or 2 ms at p50, whichever is larger."""
        return max(0.10 * self.direct.p50_ms, 2.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "timings": [vars(t) for t in (self.embed, self.direct, self.proxy)],
            "added_p50_ms": self.added_p50_ms,
            "allowed_p50_ms": self.allowed_p50_ms,
        }


def measure_proxy_overhead(
    backend: ClusterBackend,
    embedder: Embedder,
    cluster_url: str,
    proxy_url: str,
    repeats: int,
    field: str = "itlr",
) -> ProxyOverhead:
    queries = [parse(text) for text in QUERIES]
    options = SearchOptions(k=10)
    path = f"/{backend.index}/_search"
    with httpx.Client(timeout=60) as client:

        def embed_only(i: int) -> None:
            embedder.encode(list(queries[i % len(queries)].terms))

        def direct(i: int) -> None:
            query = queries[i % len(queries)]
            body = backend.build_request(query, embedder.encode(list(query.terms)), options)
            _hits(client.post(cluster_url + path, json=body))

        def through_proxy(i: int) -> None:
            text = QUERIES[i % len(QUERIES)]
            body = {"size": 10, "query": {"query_string": {"query": f"{field}:({text})"}}}
            _hits(client.post(proxy_url + path, json=body))

        calls: dict[str, Callable[[int], object]] = {
            "embed the terms only": embed_only,
            "direct: embed + build + POST to OpenSearch": direct,
            "through the proxy: POST the query-bar body": through_proxy,
        }
        embed, direct_timing, proxy_timing = time_interleaved(calls, repeats)
    return ProxyOverhead(embed, direct_timing, proxy_timing)


def _hits(response: httpx.Response) -> list[Any]:
    if response.status_code != 200:
        raise RuntimeError(
            f"benchmark request failed ({response.status_code}): {response.text[:300]}"
        )
    return json.loads(response.content)["hits"]["hits"]
