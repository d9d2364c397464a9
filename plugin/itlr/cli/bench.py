"""`itlr bench ...`: reproducible benchmarks. Other modules add subcommands to `bench_app`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from itlr.cli.app import ModelOpt, app, out, print_markdown, run_guarded
from itlr.errors import ConfigurationError

bench_app = typer.Typer(
    help="Benchmarks: the paper's synthetic tables (and speed benchmarks).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


@bench_app.command()
def synthetic(
    queries_per_template: Annotated[
        int, typer.Option(help="Queries per template (32 templates); the paper uses 100.")
    ] = 100,
    chain_queries: Annotated[
        int | None,
        typer.Option(help="Queries per chain length for Figure 3 (default: as per template)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generator.")] = 0,
    topics: Annotated[
        int | None,
        typer.Option(help="Use only the first N topics of the bank (quick runs; at least 12)."),
    ] = None,
    calibration_docs: Annotated[
        int, typer.Option(help="Calibration documents per term and side (positive, negative).")
    ] = 20,
    hard_filter: Annotated[
        float | None,
        typer.Option(
            help="Theta of itlr-hard (default: the model's calibrated threshold).", metavar="THETA"
        ),
    ] = None,
    model: ModelOpt = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path(
        "results/synthetic"
    ),
) -> None:
    """Table 1 (nDCG@10 by negations), Table 2 (operator families), Figure 3 (chains)."""

    def action() -> None:
        from itlr.calibrations import default_hard_filter
        from itlr.cli.evaluation import staged_progress
        from itlr.embed import get_embedder
        from itlr.evaluation.paper_tables import run_synthetic
        from itlr.evaluation.report import synthetic_markdown, synthetic_plots
        from itlr.evaluation.synthetic import TopicBank

        if queries_per_template < 1:
            raise ConfigurationError(
                f"--queries-per-template must be at least 1, got {queries_per_template}"
            )
        if calibration_docs < 1:
            raise ConfigurationError(
                f"--calibration-docs must be at least 1, got {calibration_docs}"
            )
        bank = TopicBank.load(seed=seed)
        if topics is not None:
            if not 12 <= topics <= len(bank.topics):
                raise ConfigurationError(
                    f"--topics must be between 12 and {len(bank.topics)}, got {topics}"
                )
            bank = TopicBank(bank.topics[:topics])
        embedder = get_embedder(model)
        with staged_progress() as (on_stage, on_progress):
            report = run_synthetic(
                embedder,
                per_template=queries_per_template,
                per_chain=chain_queries,
                seed=seed,
                bank=bank,
                calibration_per_side=calibration_docs,
                hard_filter=default_hard_filter(model) if hard_filter is None else hard_filter,
                on_stage=on_stage,
                on_progress=on_progress,
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        markdown = synthetic_markdown(report)
        (out_dir / "synthetic.md").write_text(markdown, encoding="utf-8")
        (out_dir / "results.json").write_text(
            json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8"
        )
        synthetic_plots(report, out_dir)
        print_markdown(markdown)
        out.print(f"wrote synthetic.md, results.json and PNGs to {out_dir}", highlight=False)

    run_guarded(action)


@bench_app.command("serve")
def serve_throughput(
    index: Annotated[
        str, typer.Option("--index", "-i", help="Embedded index (default: the demo index).")
    ] = "",
    clients: Annotated[str, typer.Option(help="Client counts, comma-separated.")] = "1,4,8",
    requests: Annotated[int, typer.Option(help="Requests per client count.")] = 200,
    k: Annotated[int, typer.Option("--k", "-k", help="Hits per request.")] = 10,
    torch_threads: Annotated[
        int | None, typer.Option(help="Torch threads per encode (default: torch's).")
    ] = None,
    term_cache: Annotated[
        str,
        typer.Option(
            help="on: repeated queries hit the term cache; off: every request pays the encoder "
            "(what distinct queries cost); both: one table each."
        ),
    ] = "both",
) -> None:
    """/search throughput of `itlr serve` on the embedded engine (the demo queries)."""

    def action() -> None:
        from itlr.benchmarks import service
        from itlr.demo import demo_index, showcases
        from itlr.embed import set_torch_threads
        from itlr.index import Index

        set_torch_threads(torch_threads)
        counts = [int(c) for c in clients.split(",") if c.strip()]
        if index:
            opened = Index.open(index, create=False)
        else:
            opened = Index.open(str(demo_index().path), create=False)
        queries = [case.query for case in showcases()]
        modes = {"on": [True], "off": [False], "both": [True, False]}.get(term_cache)
        if modes is None:
            raise ConfigurationError(f"--term-cache is on, off or both, not {term_cache!r}")
        results = [
            r for cached in modes for r in service.run(opened, queries, counts, requests, k, cached)
        ]
        print_markdown(service.markdown(results))
        print(json.dumps([r.to_dict() for r in results]))

    run_guarded(action)


@bench_app.command("load")
def load(
    index: Annotated[
        str, typer.Option("--index", "-i", help="Embedded index (default: the demo index).")
    ] = "",
    requests: Annotated[int, typer.Option(help="Ordinary searches per phase.")] = 1000,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = 100,
    large: Annotated[int, typer.Option(help="Maximal-size queries mixed into phase 2.")] = 10,
    k: Annotated[int, typer.Option("--k", "-k", help="Hits per request.")] = 10,
    torch_threads: Annotated[
        int | None, typer.Option(help="--torch-threads of the served process.")
    ] = None,
) -> None:
    """A real `itlr serve` under load: the ordinary searches' p99 without and with a few
    maximal-size queries (the most terms and characters the limits admit) mixed in."""

    def action() -> None:
        from itlr.benchmarks import load as load_test
        from itlr.demo import demo_index, showcases

        target = index or str(demo_index().path)
        queries = [case.query for case in showcases()]
        phases = load_test.run(target, queries, requests, concurrency, large, k, torch_threads)
        print_markdown(load_test.markdown(phases))
        print(json.dumps([p.to_dict() for p in phases]))

    run_guarded(action)
