"""`itlr bench proxy`: what the query-bar proxy adds on top of a direct logical search."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from itlr.benchmarks.reports import machine, throwaway_opensearch
from itlr.cli.app import run_guarded
from itlr.cli.bench import bench_app
from itlr.cli.perf import OutFile, emit

if TYPE_CHECKING:
    from itlr.benchmarks.proxy import ProxyOverhead


@bench_app.command("proxy")
def proxy_overhead(
    url: Annotated[str, typer.Option(help="The OpenSearch cluster (it gets a throw-away index).")],
    repeats: Annotated[int, typer.Option(help="Timed runs per measurement.")] = 60,
    out_file: OutFile = None,
) -> None:
    """Proxy overhead: the same logical queries direct vs through the proxy, p50/p95."""
    from itlr.benchmarks.proxy import OUTSIDE, QUERIES, measure_proxy_overhead, proxy_process
    from itlr.documents import read_jsonl
    from itlr.embed import get_embedder
    from itlr.engines.connection import Connection
    from itlr.proxy import create_proxy_app, serving
    from itlr.proxy.stages import STAGES
    from itlr.resources import data_file

    def action() -> None:
        embedder = get_embedder()
        corpus = list(read_jsonl(data_file("demo", "corpus.jsonl")))
        with throwaway_opensearch(url, "proxy", embedder.name, embedder.dims) as backend:
            backend.add(
                [d.id for d in corpus],
                [d.text for d in corpus],
                embedder.encode([d.text for d in corpus]),
                [d.fields for d in corpus],
            )
            backend.refresh()
            backend.install_scripts()
            app = create_proxy_app(Connection(url), embedder=embedder)
            with serving(app) as proxy_url, proxy_process(url) as own_url:
                result = measure_proxy_overhead(
                    backend,
                    embedder,
                    url,
                    app.state.proxy,
                    proxy_url,
                    repeats,
                    own_process_url=own_url,
                )
        added = max(result.added_p50_ms, result.paired_added_p50_ms)
        verdict = "within" if added <= result.allowed_p50_ms else "over"
        stage_rows = [
            f"| {name} | {result.stages_off[name]:.2f} | {result.stages_on[name]:.2f} |"
            for name in (*STAGES, OUTSIDE)
        ]
        lines = [
            f"### Query-bar proxy overhead (`itlr bench proxy --url URL --repeats {repeats}`)",
            "",
            f"Machine: {machine()}. Demo corpus ({len(corpus)} passages) in OpenSearch, k = 10, "
            f"{len(QUERIES)} logical queries of 1-5 terms in turn, timed round-robin after 10 "
            "warm-up rounds; proxy served by uvicorn on 127.0.0.1 in the same process. First "
            "phase with the term cache off, second with it on (the same queries repeated).",
            "",
            "| measurement | p50 ms | p95 ms |",
            "|---|---:|---:|",
            *(f"| {t.name} | {t.p50_ms:.2f} | {t.p95_ms:.2f} |" for t in result.timings),
            "",
            f"Added by the proxy at p50 (cache off): {result.added_p50_ms:.2f} ms "
            f"({100 * result.added_p50_ms / result.direct.p50_ms:.1f} %); median of the "
            f"per-round differences (same query, same round): {result.paired_added_p50_ms:.2f} ms. "
            f"Goal at most {result.allowed_p50_ms:.2f} ms: {verdict}. Cache on, over the upstream "
            f"search alone: {result.cached_proxy.p50_ms - result.cached_upstream.p50_ms:.2f} ms "
            f"at p50, paired {result.paired_cached_over_upstream_p50_ms:.2f} ms.",
            *own_process_line(result),
            "",
            "Where a proxied request spends its time (p50 of each stage over the timed requests; "
            "the p50s do not add up to the total's p50):",
            "",
            "| stage | cache off p50 ms | cache on p50 ms |",
            "|---|---:|---:|",
            *stage_rows,
        ]
        emit(lines, out_file)

    run_guarded(action)


def own_process_line(result: ProxyOverhead) -> list[str]:
    """The repeated query-bar search against the upstream search alone (goal 1.5x), in the
    benchmark's process and in its own."""
    upstream = result.cached_upstream.p50_ms
    ratios = f"{result.cached_proxy.p50_ms / upstream:.2f}x in the benchmark's process"
    if result.own_process is not None:
        ratios += f", {result.own_process.p50_ms / upstream:.2f}x in its own process"
    return [
        "",
        f"A repeated query-bar search over the upstream search alone (goal 1.5x): {ratios}.",
    ]
