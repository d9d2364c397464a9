"""`itlr bench latency|recall|ingest|store|first-search|encode|encoders`: flags in, the report of
itlr.benchmarks.reports out (printed, and appended to --out)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from itlr.candidates import PLANS
from itlr.cli.app import err, print_markdown, run_guarded
from itlr.cli.bench import bench_app
from itlr.engines.ann import ANN_MIN_ROWS
from itlr.errors import ConfigurationError

OutFile = Annotated[
    Path | None, typer.Option("--out", help="Append the markdown report to this file.")
]
UrlOpt = Annotated[
    str | None,
    typer.Option(help="Also measure this OpenSearch cluster (it gets a throw-away index)."),
]


def emit(lines: list[str], destination: Path | None) -> None:
    text = "\n".join(lines) + "\n"
    print_markdown(text)
    if destination:
        with open(destination, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")


@bench_app.command()
def latency(
    docs: Annotated[str, typer.Option(help="Index sizes, comma-separated.")] = "10000,100000",
    url: UrlOpt = None,
    repeats: Annotated[int, typer.Option(help="Timed runs per measurement.")] = 50,
    dims: Annotated[int, typer.Option(help="Vector dimensions.")] = 384,
    engines: Annotated[
        str, typer.Option(help="Engines to measure, comma-separated: embedded, opensearch.")
    ] = "embedded,opensearch",
    keep: Annotated[
        Path | None,
        typer.Option(
            help="Keep the embedded indexes in this folder and reuse them in later runs "
            "(a 1M-row graph takes tens of minutes to build)."
        ),
    ] = None,
    out_file: OutFile = None,
) -> None:
    """Plain kNN vs logical queries (1, 3, 5 terms; knn and exact mode), p50/p95, same index.

    Vectors are random unit vectors: latency does not depend on what they mean.
    """
    from itlr.benchmarks.reports import latency_report

    run_guarded(lambda: emit(latency_report(docs, url, repeats, dims, engines, keep), out_file))


@bench_app.command()
def shards(
    url: Annotated[
        str, typer.Option(help="The cluster: one URL, or its nodes' URLs comma-separated.")
    ],
    docs: Annotated[int, typer.Option(help="Random vectors in each index.")] = 100_000,
    shards: Annotated[
        str, typer.Option(help="Primary shard counts to compare, comma-separated.")
    ] = "1,3",
    replicas: Annotated[int, typer.Option(help="Replicas of every shard.")] = 1,
    repeats: Annotated[int, typer.Option(help="Timed runs per measurement.")] = 50,
    out_file: OutFile = None,
) -> None:
    """The same index with 1 and with several primary shards on one cluster: p50 / p95 of plain
    kNN and the 3-term query (start a cluster: scripts/opensearch_local.py run --nodes 3)."""
    from itlr.benchmarks.reports import shards_report

    run_guarded(lambda: emit(shards_report(url, docs, shards, replicas, repeats), out_file))


@bench_app.command()
def certificate(
    queries: Annotated[int, typer.Option(help="Random logical queries.")] = 300,
    passages: Annotated[
        int | None,
        typer.Option(help="Grow the corpus to this many documents (sums of seeded pairs)."),
    ] = None,
    repeats: Annotated[int, typer.Option(help="Timed runs per query (the fastest counts).")] = 3,
    keep: Annotated[
        Path | None,
        typer.Option(help="Keep the index in this folder and reuse it in later runs."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(help="Also measure this OpenSearch cluster (it gets a throw-away index)."),
    ] = None,
    engines: Annotated[
        str,
        typer.Option(
            help="Engines to measure, comma-separated: embedded, opensearch (with --url)."
        ),
    ] = "embedded,opensearch",
    merged: Annotated[
        bool,
        typer.Option(
            "--merged",
            help="Force-merge the OpenSearch index to one segment first, as a long-lived "
            "index ends up (one HNSW graph: the recall the proofs rely on).",
        ),
    ] = False,
    out_file: OutFile = None,
) -> None:
    """knn mode with and without the certificate against exact mode, per query shape: top-10
    score agreement, p50 latency, and how the certificate ended."""
    from itlr.benchmarks.certificate import certificate_report

    run_guarded(
        lambda: emit(
            certificate_report(passages, queries, repeats, keep, url, engines, merged), out_file
        )
    )


@bench_app.command()
def recall(
    budgets: Annotated[
        str, typer.Option(help="Candidate budgets, comma-separated.")
    ] = "10,20,50,100,200",
    queries: Annotated[int, typer.Option(help="Random logical queries to average over.")] = 100,
    plans: Annotated[
        str,
        typer.Option(help="Candidate plans to compare per query shape, comma-separated."),
    ] = ",".join(PLANS),
    url: UrlOpt = None,
    passages: Annotated[
        int | None,
        typer.Option(
            help="Grow the corpus to this many passages (pairs of its passages joined): from "
            f"{ANN_MIN_ROWS:,} the embedded engine takes candidates from its HNSW graph."
        ),
    ] = None,
    out_file: OutFile = None,
) -> None:
    """Top-10 overlap of knn mode with exact mode per candidate budget, on real text.

    On a small corpus the embedded engine's per-term candidates are exact, so it measures only
    what the union of candidates misses; with --passages past its graph threshold, and on
    OpenSearch, it adds what the HNSW graph misses.
    """
    from itlr.benchmarks.reports import recall_report

    run_guarded(lambda: emit(recall_report(budgets, queries, plans, url, passages), out_file))


@bench_app.command("ingest")
def ingest_speed(
    url: UrlOpt = None,
    copies: Annotated[
        int, typer.Option(help="Ingest the demo corpus this many times (new ids).")
    ] = 3,
    out_file: OutFile = None,
) -> None:
    """Documents per second and the share of wall time outside the encoder."""
    from itlr.benchmarks.reports import ingest_report

    run_guarded(lambda: emit(ingest_report(url, copies), out_file))


@bench_app.command()
def store(
    rows: Annotated[int, typer.Option(help="Rows to append.")] = 20_000,
    batch_size: Annotated[int, typer.Option(help="Rows per commit.")] = 64,
    out_file: OutFile = None,
) -> None:
    """What the embedded engine's crash-safe commit per batch costs (no model involved)."""
    from itlr.benchmarks.reports import store_report

    run_guarded(lambda: emit(store_report(rows, batch_size), out_file))


@bench_app.command("first-search")
def first_search(
    passages: Annotated[int, typer.Option(help="Passages in the index.")] = 100_000,
    runs: Annotated[int, typer.Option(help="Fresh processes to time (the median counts).")] = 3,
    keep: Annotated[
        Path | None, typer.Option(help="Keep the index in this folder and reuse it.")
    ] = None,
    out_file: OutFile = None,
) -> None:
    """A fresh process's first hybrid search on an embedded index against its second."""
    from itlr.benchmarks.first_search import first_search_report

    run_guarded(lambda: emit(first_search_report(passages, runs, keep), out_file))


@bench_app.command()
def encode(
    out_file: OutFile = None,
) -> None:
    """Encoding T terms in one batch vs one call per term vs the original question."""
    from itlr.benchmarks.reports import encode_report

    run_guarded(lambda: emit(encode_report(), out_file))


@bench_app.command()
def encoders(
    encoders: Annotated[
        str, typer.Option(help="Encoders to compare, comma-separated (torch is the reference).")
    ] = "torch,onnx,onnx-int8",
    repeats: Annotated[int, typer.Option(help="Timed calls per measurement (median).")] = 20,
    synthetic_per_template: Annotated[
        int, typer.Option(help="Synthetic template queries per template (32 templates); 0: none.")
    ] = 25,
    beir: Annotated[
        list[Path] | None,
        typer.Option(
            help="Also check the judged queries of this BEIR folder, rewritten by the rule "
            "rewriter (e.g. NegConstraint's dev half); repeatable.",
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="The qrels split of --beir folders.")] = "dev",
    out_file: OutFile = None,
) -> None:
    """Encoder backends side by side: encode time, and whether each keeps torch's top 10."""

    def action() -> None:
        from itlr.benchmarks import encoders as bench
        from itlr.benchmarks.reports import machine
        from itlr.embed import resolve_encoder

        chosen = [resolve_encoder(name.strip()) for name in encoders.split(",") if name.strip()]
        if repeats < 1:
            raise ConfigurationError(f"--repeats must be at least 1, got {repeats}")
        corpora = [bench.demo_corpus()]
        if synthetic_per_template > 0:
            corpora.append(bench.synthetic_corpus(synthetic_per_template))
        corpora += [bench.beir_corpus(folder, split) for folder in beir or ()]
        speeds, agreements = bench.run(
            chosen, corpora, repeats, on_stage=lambda stage: err.print(stage, highlight=False)
        )
        emit(
            [
                "### Encoder backends (`itlr bench encoders`)",
                "",
                f"Machine: {machine()}. Median of {repeats} calls.",
                "",
                *bench.markdown(speeds, agreements),
            ],
            out_file,
        )

    run_guarded(action)
