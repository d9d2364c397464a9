"""Evaluation commands: eval (every method on a BEIR folder) and calibrate."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from itlr.cli.app import (
    AndOp,
    Engine,
    ModelOpt,
    NotOp,
    OrOp,
    Rewrite,
    Truth,
    app,
    err,
    out,
    run_guarded,
)
from itlr.cli.rewrite import LLMBaseUrlOpt, LLMKeyEnvOpt, LLMModelOpt, LLMTimeoutOpt, llm_config
from itlr.errors import ConfigurationError

DEFAULT_METHODS = "dense,itlr,itlr-hard,setops"
SplitOpt = Annotated[str, typer.Option(help="Which qrels/<split>.tsv to use.")]
QrelsOpt = Annotated[
    Path | None,
    typer.Option(help="A qrels file (BEIR or TREC format) instead of qrels/<split>.tsv."),
]
NegativesOpt = Annotated[
    Path | None,
    typer.Option(
        help="Qrels-format file of explicit negatives (every row counts), for NegRecall@10."
    ),
]


@contextmanager
def staged_progress() -> Iterator[tuple[Callable[[str, int], None], Callable[[int], None]]]:
    """(on_stage, on_progress) callbacks drawing one progress bar per stage on stderr."""
    from itlr.progress import document_progress

    with document_progress(err) as progress:
        current: list[Any] = []

        def on_stage(name: str, total: int) -> None:
            current[:] = [progress.add_task(name, total=total)]

        def on_progress(count: int) -> None:
            if current:
                progress.advance(current[0], count)

        yield on_stage, on_progress


def _print_metrics(title: str, metrics: dict[str, dict[str, float]], names: list[str]) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("method")
    for name in names:
        table.add_column(name, justify="right")
    for method, values in metrics.items():
        table.add_row(method, *(f"{values[n]:.4f}" if n in values else "-" for n in names))
    out.print(table)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@app.command("eval")
def eval_command(
    dataset: Annotated[
        Path, typer.Argument(help="A BEIR folder: corpus.jsonl, queries.jsonl, qrels/.")
    ],
    engine: Annotated[
        Engine, typer.Option(help="Where to score: memory (exact, in process).")
    ] = Engine.memory,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated: dense, itlr, itlr-hard, setops, itlr-calibrated, random. "
            f"Default: {DEFAULT_METHODS}, plus itlr-calibrated when the model is calibrated."
        ),
    ] = None,
    rewrite: Annotated[
        Rewrite,
        typer.Option(
            help="Turn each question into a logical query first: none (use the dataset's "
            "'logical' field, else parse the text), rules, or llm."
        ),
    ] = Rewrite.none,
    and_: Annotated[AndOp, typer.Option("--and", help="AND operator.")] = AndOp.product,
    or_: Annotated[OrOp, typer.Option("--or", help="OR operator.")] = OrOp.sum,
    not_: Annotated[NotOp, typer.Option("--not", help="NOT operator.")] = NotOp.complement,
    truth: Annotated[
        Truth, typer.Option(help="Map cosine to truth for itlr: clamp, shift, sigmoid.")
    ] = Truth.clamp,
    tau: Annotated[float, typer.Option(help="Sigmoid centre (with --truth sigmoid).")] = 0.5,
    lam: Annotated[float, typer.Option(help="Sigmoid steepness (with --truth sigmoid).")] = 10.0,
    hard_filter: Annotated[
        float | None,
        typer.Option(
            help="itlr-hard: drop documents whose truth for a root-level NOT term is >= THETA.",
            metavar="THETA",
        ),
    ] = None,
    split: SplitOpt = "test",
    qrels: QrelsOpt = None,
    negatives: NegativesOpt = None,
    depth: Annotated[int, typer.Option(help="Documents ranked per query (for MAP, R@100).")] = 1000,
    model: ModelOpt = None,
    llm_base_url: LLMBaseUrlOpt = None,
    llm_model: LLMModelOpt = None,
    llm_api_key_env: LLMKeyEnvOpt = "OPENAI_API_KEY",
    llm_timeout: LLMTimeoutOpt = 30.0,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Output folder (default results/eval/<dataset name>)."),
    ] = None,
) -> None:
    """Compare dense and logical retrieval on a BEIR folder: table, results.json and plots."""

    def action() -> None:
        from itlr.embed import get_embedder
        from itlr.evaluation.beir import evaluate_beir, rewriter_for
        from itlr.evaluation.calibration import load_calibration
        from itlr.evaluation.datasets import load_beir
        from itlr.evaluation.methods import (
            DEFAULT_HARD_FILTER,
            build_methods,
            parse_method_names,
        )
        from itlr.evaluation.metrics import METRIC_NAMES
        from itlr.evaluation.report import grouped_bars, metrics_markdown
        from itlr.scoring import Operators, TruthMap

        if engine is not Engine.memory:
            raise ConfigurationError(
                f"itlr eval does not run on --engine {engine.value} yet: use --engine memory"
            )
        if depth < 100:
            raise ConfigurationError(f"--depth must be at least 100 for R@100, got {depth}")
        # The LLM options may come from the environment: they only matter with --rewrite llm.
        config = (
            llm_config(llm_base_url, llm_model, llm_api_key_env, llm_timeout)
            if rewrite is Rewrite.llm
            else None
        )
        rewriter = rewriter_for(rewrite.value, config)
        calibrated = load_calibration(model)
        names = parse_method_names(methods or DEFAULT_METHODS)
        if methods is None and calibrated is not None:
            names.append("itlr-calibrated")
        chosen = build_methods(
            names,
            ops=Operators(and_.value, or_.value, not_.value),  # type: ignore[arg-type]
            truth=TruthMap(truth.value, tau, lam),  # type: ignore[arg-type]
            hard_filter=DEFAULT_HARD_FILTER if hard_filter is None else hard_filter,
            calibrated=calibrated,
            setops_depth=20,
        )
        data = load_beir(dataset, split=split, qrels=qrels, negatives=negatives)
        if data.skipped_queries:
            err.print(
                f"[yellow]note:[/] {data.skipped_queries} judged queries have no text in "
                "queries.jsonl or no relevant document: skipped"
            )
        embedder = get_embedder(model)
        with staged_progress() as (on_stage, on_progress):
            result = evaluate_beir(
                data,
                embedder,
                chosen,
                rewriter=rewriter,
                depth=depth,
                on_stage=on_stage,
                on_progress=on_progress,
                config={
                    "engine": engine.value,
                    "methods": [m.name for m in chosen],
                    "rewrite": rewrite.value,
                    "llm_model": config.model if config else None,
                    "operators": {"and": and_.value, "or": or_.value, "not": not_.value},
                    "truth": {"kind": truth.value, "tau": tau, "lam": lam},
                    "hard_filter": DEFAULT_HARD_FILTER if hard_filter is None else hard_filter,
                    "split": split,
                    "qrels": str(qrels) if qrels else None,
                    "negatives": str(negatives) if negatives else None,
                    "setops_depth": 20,
                },
            )
        metric_names = [n for n in METRIC_NAMES if any(n in v for v in result.metrics.values())]
        _print_metrics(
            f"{data.name}: {len(data.queries)} queries, {len(data.corpus)} documents "
            f"(MRR@10 = ir-measures RR@10, MAP = AP)",
            result.metrics,
            metric_names,
        )
        groups = list(next(iter(result.by_negations.values())))
        if len(groups) > 1:
            _print_metrics("nDCG@10 by number of NOTs", result.by_negations, groups)

        folder = out_dir or Path("results") / "eval" / data.name
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "results.json", result.to_dict())
        (folder / "metrics.md").write_text(
            metrics_markdown(result.metrics, metric_names) + "\n", encoding="utf-8"
        )
        grouped_bars(
            folder / "metrics.png",
            metric_names,
            {m: [v.get(n, float("nan")) for n in metric_names] for m, v in result.metrics.items()},
            f"{data.name} ({len(data.queries)} queries)",
            "score",
        )
        if len(groups) > 1:
            grouped_bars(
                folder / "by_negations.png",
                groups,
                {m: list(v.values()) for m, v in result.by_negations.items()},
                f"{data.name}: nDCG@10 by number of NOTs",
                "nDCG@10",
            )
        out.print(f"wrote {folder / 'results.json'} and plots in {folder}", highlight=False)

    run_guarded(action)


@app.command()
def calibrate(
    dataset: Annotated[Path, typer.Argument(help="A labelled BEIR folder.")],
    model: ModelOpt = None,
    split: SplitOpt = "test",
    qrels: QrelsOpt = None,
    negatives: NegativesOpt = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling unjudged negatives.")] = 0,
) -> None:
    """Fit one sigmoid (tau, lambda) for a model from relevance judgments and save it."""

    def action() -> None:
        from itlr.embed import get_embedder
        from itlr.evaluation.beir import calibrate_dataset
        from itlr.evaluation.calibration import save_calibration
        from itlr.evaluation.datasets import load_beir

        data = load_beir(dataset, split=split, qrels=qrels, negatives=negatives)
        embedder = get_embedder(model)
        with err.status(f"embedding judged pairs of {data.name}..."):
            fit = calibrate_dataset(data, embedder, seed=seed)
        path = save_calibration(model, fit, source=f"{dataset} ({split})")
        out.print(
            f"{embedder.name}: tau = {fit.tau:.4f}, lambda = {fit.lam:.2f} "
            f"from {fit.positives} relevant and {fit.negatives} non-relevant pairs; "
            f"saved to {path}",
            highlight=False,
        )

    run_guarded(action)
