"""Evaluation commands: eval (every method on a BEIR folder) and calibrate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from itlr.cli.app import (
    FROM_FLAGS,
    Mode,
    ModelOpt,
    Rewrite,
    app,
    engine_command,
    err,
    out,
    run_guarded,
    warn,
)
from itlr.cli.options import search_option_command
from itlr.cli.rewrite import LLMFlags, llm_command
from itlr.errors import ConfigurationError
from itlr.evaluation.experiment import (
    CLUSTER_DEPTH,
    DEFAULT_METHODS,
    MEMORY_DEPTH,
    EvalSettings,
)
from itlr.options import search_options

if TYPE_CHECKING:
    from itlr.evaluation.beir import EvalResult
    from itlr.evaluation.datasets import BeirDataset
    from itlr.evaluation.engine_runs import IndexSync

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
EvalIndexOpt = Annotated[
    str | None,
    typer.Option(
        "--index",
        "-i",
        help="Cluster index to load the corpus into and search (created if missing; only "
        "missing documents are added). Default: itlr-eval-<dataset folder>-<model>.",
        rich_help_panel="Engine",
    ),
]
EvalModeOpt = Annotated[
    Mode | None,
    typer.Option(
        help="On a cluster: knn (kNN candidates, rescored exactly; the default) or "
        "exact (score every document). The embedded engine always scores every document.",
        rich_help_panel="Engine",
    ),
]
EvalCandidatesOpt = Annotated[
    int | None,
    typer.Option(
        help="On a cluster with --mode knn: kNN candidates per positive term "
        "(default max(100, 10 x depth), at most 10000).",
        rich_help_panel="Engine",
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


def _print_metrics(
    title: str, metrics: dict[str, dict[str, float]], names: list[str], rows: str = "method"
) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column(rows)
    for name in names:
        table.add_column(name, justify="right")
    for method, values in metrics.items():
        table.add_row(method, *(f"{values[n]:.4f}" if n in values else "-" for n in names))
    out.print(table)


# mode and candidates are eval's own: on a cluster only, with the depth policy's defaults.
EVAL_OPTIONS = (
    "and_",
    "or_",
    "not_",
    "not_strength",
    "truth",
    "tau",
    "lam",
    "lexical",
    "not_evidence",
    "hard_filter",
    "hard_filter_rule",
)


@app.command("eval")
@engine_command
@search_option_command(only=EVAL_OPTIONS)
@llm_command
def eval_command(
    dataset: Annotated[
        Path, typer.Argument(help="A BEIR folder: corpus.jsonl, queries.jsonl, qrels/.")
    ],
    spec: Any = None,
    index: EvalIndexOpt = None,
    mode: EvalModeOpt = None,
    candidates: EvalCandidatesOpt = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated: dense, itlr, itlr-hard, setops, itlr-calibrated, itlr-paper, "
            "random. "
            f"Default: {','.join(DEFAULT_METHODS)}, plus itlr-calibrated when the model is calibrated."
        ),
    ] = None,
    rewrite: Annotated[
        str,
        typer.Option(
            help="Turn each question into a logical query first: none (use the dataset's "
            "'logical' field, else parse the text), rules, or llm; several, comma-separated "
            "(rules,llm), run one evaluation each and compare them.",
            metavar="none|rules|llm[,...]",
        ),
    ] = "none",
    split: SplitOpt = "test",
    qrels: QrelsOpt = None,
    negatives: NegativesOpt = None,
    depth: Annotated[
        int | None,
        typer.Option(
            help=f"Documents ranked per query, for MAP and R@100 (default {MEMORY_DEPTH} in "
            f"process, {CLUSTER_DEPTH} on a cluster)."
        ),
    ] = None,
    model: ModelOpt = None,
    llm: LLMFlags = FROM_FLAGS,
    llm_answers: Annotated[
        Path | None,
        typer.Option(
            help="With --rewrite llm: a JSON-lines file of earlier answers "
            '({"question": ..., "answer": ...} a line) served to the LLM rewriter from a '
            "local OpenAI-compatible endpoint, instead of --llm-base-url / --llm-model.",
            rich_help_panel="LLM rewriter",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Output folder (default results/eval/<dataset name>)."),
    ] = None,
    option_values: Any = None,
) -> None:
    """Compare dense and logical retrieval on a BEIR folder: table, results.json and plots.

    In process by default (exact scores); with --url (or --engine opensearch|elasticsearch) the
    corpus is loaded into a cluster index and dense and the itlr methods run there.
    """

    def action() -> None:
        from itlr.embed import get_embedder
        from itlr.evaluation.datasets import load_beir
        from itlr.evaluation.experiment import (
            answers_endpoint,
            cluster_runner,
            default_results_folder,
            ranked_depth,
            rewriter_comparison,
            rewriter_names,
            run_evaluation,
            write_results,
        )
        from itlr.evaluation.report import metrics_markdown

        on_cluster = spec.engine != "embedded"
        rewriters = rewriter_names(rewrite)
        ranked_depth(depth, on_cluster)  # before an index is created or anything encoded
        if not on_cluster and (mode is not None or candidates is not None or index is not None):
            err.print(
                "[yellow]note:[/] --index, --mode and --candidates apply to a cluster (--url); "
                "the embedded engine scores every document in process"
            )
        if llm_answers is not None and "llm" not in rewriters:
            raise ConfigurationError("--llm-answers serves the LLM rewriter: add --rewrite llm")
        if llm_answers is not None and llm.named:
            raise ConfigurationError(
                "give --llm-answers or --llm-base-url / --llm-model, not both: the answers "
                "file is the endpoint"
            )
        chosen = search_options(**option_values, model=model)
        data = load_beir(dataset, split=split, qrels=qrels, negatives=negatives)
        if data.skipped_queries:
            err.print(
                f"[yellow]note:[/] {data.skipped_queries} judged queries have no text in "
                "queries.jsonl or no relevant document: skipped"
            )
        embedder = get_embedder(model)
        runner = None
        if on_cluster:
            runner, warnings = cluster_runner(
                spec, index, dataset, embedder, (mode or Mode.knn).value, candidates
            )
            for warning in warnings:
                warn(warning)
        folder = out_dir or default_results_folder(data)
        results: dict[str, EvalResult] = {}
        with answers_endpoint(llm_answers, llm.timeout) as answers_config:
            # The LLM options may come from the environment: they only matter with llm.
            config = answers_config or (llm.config() if "llm" in rewriters else None)
            for name in rewriters:
                settings = EvalSettings(
                    methods=[m.strip() for m in methods.split(",")] if methods else None,
                    rewrite=name,
                    llm=config if name == "llm" else None,
                    ops=chosen.ops,
                    truth=chosen.truth,
                    hard_filter=chosen.hard_filter,
                    hard_filter_rule=chosen.hard_filter_rule,
                    split=split,
                    qrels=qrels,
                    negatives=negatives,
                    depth=depth,
                    model=model,
                )
                with staged_progress() as (on_stage, on_progress):
                    result = run_evaluation(data, settings, embedder, runner, on_stage, on_progress)
                results[name] = result
                shown = f" (--rewrite {name})" if len(rewriters) > 1 else ""
                _print_result(result, data, shown)
                written = folder / name if len(rewriters) > 1 else folder
                write_results(result, data, written)
                out.print(
                    f"wrote {written / 'results.json'} and plots in {written}", highlight=False
                )
        if len(rewriters) > 1:
            table = rewriter_comparison(results)
            names = list(next(iter(results.values())).metrics)
            _print_metrics("nDCG@10 by rewriter and number of NOTs", table, names, "questions")
            (folder / "by_rewriter.md").write_text(
                metrics_markdown(table, names, "questions") + "\n", encoding="utf-8"
            )
            out.print(f"wrote {folder / 'by_rewriter.md'}", highlight=False)
        if any(r.index_sync is not None and r.index_sync.failed for r in results.values()):
            # As `itlr ingest`: the results are written, but a partial index is an error.
            raise typer.Exit(1)

    run_guarded(action)


def _print_result(result: EvalResult, data: BeirDataset, shown: str) -> None:
    """One evaluation's tables: the metrics, then nDCG@10 by number of NOTs (with each group's
    question count), and how many questions the LLM rewriter left to the rules."""
    from itlr.evaluation.experiment import metric_names, negation_groups

    if result.index_sync is not None:
        _print_sync(result.index_sync, result.config["computed_in_process"])
    _print_metrics(
        f"{data.name}{shown}: {len(data.queries)} queries, {len(data.corpus)} documents "
        f"(MRR@10 = ir-measures RR@10, MAP = AP)",
        result.metrics,
        metric_names(result),
    )
    groups = negation_groups(result)
    if len(groups) > 1:
        _print_metrics(f"nDCG@10 by number of NOTs{shown}", result.by_negations, groups)
    fallbacks = sum(bool((q.get("rewrite") or {}).get("fallback")) for q in result.queries.values())
    if fallbacks:
        err.print(
            f"[yellow]note:[/] the LLM rewriter failed on {fallbacks} questions, rewritten by the "
            "rules instead (results.json: queries.*.rewrite.warnings)",
            soft_wrap=True,
        )


def _print_sync(sync: IndexSync, in_process: list[str]) -> None:
    """Say what loading the corpus did, every refused document with the engine's reason."""
    from rich.markup import escape

    # soft_wrap: one report per line whatever the terminal width, so that scripts can grep it.
    out.print(
        f"index {sync.index}{' (created)' if sync.created else ''}: added {sync.added}, "
        f"skipped {sync.skipped} already present, failed {len(sync.failed)}; "
        f"it holds {sync.count} documents",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for doc_id, reason in sync.failed.items():
        # Engine reasons hold [field] names: escaped, or rich would read them as markup.
        err.print(f"[red]failed[/] {escape(doc_id)}: {escape(reason)}", soft_wrap=True)
    if sync.failed:
        err.print(
            f"[yellow]warning:[/] {len(sync.failed)} documents are not in the index: the "
            "engine's runs cannot retrieve them",
            soft_wrap=True,
        )
    # Every dataset document in the index was either added or skipped as present.
    foreign = sync.count - sync.added - sync.skipped
    if foreign > 0:
        err.print(
            f"[yellow]warning:[/] index {escape(sync.index)} holds {foreign} documents that are "
            "not in the dataset: the engine's runs can retrieve them (use a fresh --index)",
            soft_wrap=True,
        )
    if in_process:
        err.print(
            f"note: {', '.join(in_process)} computed in process (they need every cosine)",
            highlight=False,
            soft_wrap=True,
        )


@app.command()
def calibrate(
    dataset: Annotated[Path, typer.Argument(help="A labelled BEIR folder.")],
    model: ModelOpt = None,
    split: SplitOpt = "test",
    qrels: QrelsOpt = None,
    negatives: NegativesOpt = None,
    rewrite: Annotated[
        Rewrite,
        typer.Option(
            help="How questions become logical queries for the hard-filter threshold (as in "
            "`itlr eval`): rules, llm, or none."
        ),
    ] = Rewrite.rules,
    seed: Annotated[int, typer.Option(help="Seed for sampling unjudged negatives.")] = 0,
) -> None:
    """Fit a model's sigmoid (tau, lambda) and its hard-filter threshold from relevance
    judgments, and save them for `itlr eval` and `--truth calibrated`."""

    def action() -> None:
        from itlr.embed import get_embedder
        from itlr.evaluation.beir import calibrate_dataset, calibrate_hard_filter, rewriter_for
        from itlr.evaluation.cache import EmbeddingCache
        from itlr.evaluation.calibration import HARD_FILTER_KEEP, save_calibration
        from itlr.evaluation.datasets import load_beir

        data = load_beir(dataset, split=split, qrels=qrels, negatives=negatives)
        embedder = get_embedder(model)
        cache = EmbeddingCache(embedder)
        if rewrite is Rewrite.llm:
            raise ConfigurationError("calibrate rewrites with rules or none, not llm")
        rewriter = rewriter_for(rewrite.value)
        with err.status(f"embedding judged pairs of {data.name}..."):
            fit = calibrate_dataset(data, embedder, cache=cache, seed=seed)
            try:
                theta: float | None = calibrate_hard_filter(data, embedder, rewriter, cache)
            except ConfigurationError as why:
                err.print(f"note: no hard-filter threshold: {why}", markup=False)
                theta = None
        path = save_calibration(model, fit, source=f"{dataset} ({split})", hard_filter=theta)
        kept = (
            f"; hard filter {theta:.3f} (keeps {HARD_FILTER_KEEP:.0%} of relevant documents)"
            if theta is not None
            else ""
        )
        out.print(
            f"{embedder.name}: tau = {fit.tau:.4f}, lambda = {fit.lam:.2f} "
            f"from {fit.positives} relevant and {fit.negatives} non-relevant pairs{kept}; "
            f"saved to {path}",
            highlight=False,
        )

    run_guarded(action)
