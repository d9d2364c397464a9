"""One evaluation on a BEIR folder, as `itlr eval` runs it: settings -> methods -> result -> files.

The depth policy, the default methods, the results folder's layout (results.json, metrics.md,
metrics.png, by_negations.png) and the cluster index an evaluation loads live here, so that the
CLI only turns flags into `EvalSettings` and prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from itlr.errors import ConfigurationError
from itlr.hard_filter import DEFAULT_HARD_FILTER_RULE, HardFilterRule
from itlr.scoring import SEARCH_OPERATORS, Operators, TruthMap

if TYPE_CHECKING:
    from itlr.embed import Embedder
    from itlr.engines.factory import EngineSpec
    from itlr.evaluation.beir import EvalResult
    from itlr.evaluation.datasets import BeirDataset
    from itlr.evaluation.engine_runs import EngineRunner
    from itlr.rewrite.llm import LLMConfig

DEFAULT_METHODS = ("dense", "itlr", "itlr-hard", "setops")
# Without `depth`: 1000 in process, 100 on a cluster, where every method is one request per
# query returning `depth` hits and knn mode asks 10 x depth candidates per term (1000 would hit
# the k-NN plugin's k limit of 10000). R@100 needs at least 100.
MEMORY_DEPTH = 1000
CLUSTER_DEPTH = 100
# BoolQuestions' set-operation baseline: each term's top 2k documents, k = 10.
SETOPS_DEPTH = 20


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation compares and how. `methods=None`: DEFAULT_METHODS, plus
    itlr-calibrated when the model has a calibration. `hard_filter=None`: the model's own
    threshold (`itlr calibrate`), else the bundled model's, applied by `hard_filter_rule`
    (itlr.hard_filter). `depth=None`: the depth policy."""

    methods: Sequence[str] | None = None
    rewrite: str = "none"
    llm: LLMConfig | None = None
    ops: Operators = SEARCH_OPERATORS
    truth: TruthMap = field(default_factory=TruthMap)
    hard_filter: float | None = None
    hard_filter_rule: HardFilterRule = DEFAULT_HARD_FILTER_RULE
    split: str = "test"
    qrels: Path | None = None
    negatives: Path | None = None
    depth: int | None = None
    model: str | None = None  # as given to get_embedder: None is the bundled model


def rewriter_names(text: str) -> list[str]:
    """The rewriters an evaluation compares, from `none`, `rules`, `llm` or several
    comma-separated (each once, in the order given)."""
    from itlr.evaluation.beir import REWRITES

    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in REWRITES]
    if not names or unknown:
        raise ConfigurationError(
            f"unknown `rewrite` {','.join(unknown) or text!r}: choose none, rules or llm, or "
            "several comma-separated (rules,llm)"
        )
    return names


@contextmanager
def answers_endpoint(path: Path | None, timeout: float = 30.0) -> Iterator[LLMConfig | None]:
    """The LLM rewriter's configuration for a file of earlier answers served on loopback
    (itlr.evaluation.answers) while the block runs; None without a file."""
    if path is None:
        yield None
        return
    from itlr.evaluation.answers import AnswersServer, read_answers

    with AnswersServer(read_answers(path)) as server:
        yield server.config(timeout)


def rewriter_comparison(results: dict[str, EvalResult]) -> dict[str, dict[str, float]]:
    """{"<rewriter>, all (n)" or "<rewriter>, <k> NOT (n)": {method: nDCG@10}}: every rewriter's
    overall and per-NOT-count nDCG@10, one row each, the methods side by side."""
    table: dict[str, dict[str, float]] = {}
    for rewriter, result in results.items():
        overall = table.setdefault(f"{rewriter}, all ({len(result.queries)})", {})
        for method, metrics in result.metrics.items():
            overall[method] = metrics["nDCG@10"]
            for group, value in result.by_negations.get(method, {}).items():
                label = f"{rewriter}, {group.replace(' queries', '')}"
                table.setdefault(label, {})[method] = value
    return table


def ranked_depth(depth: int | None, on_cluster: bool) -> int:
    """Documents ranked per query: the given depth, or the policy's; refused below 100."""
    ranked = depth if depth is not None else CLUSTER_DEPTH if on_cluster else MEMORY_DEPTH
    if ranked < 100:
        raise ConfigurationError(f"`depth` must be at least 100 for R@100, got {ranked}")
    if on_cluster:
        from itlr.evaluation.engine_runs import check_depth

        check_depth(ranked)
    return ranked


def cluster_runner(
    spec: EngineSpec,
    index_name: str | None,
    dataset: Path,
    embedder: Embedder,
    mode: str = "knn",
    candidates: int | None = None,
) -> tuple[EngineRunner, list[str]]:
    """An EngineRunner on the spec's cluster (its index created from the mapping if missing;
    default name itlr-eval-<dataset>-<model>), and the warnings opening it gave."""
    from itlr.engines.factory import remote_backend
    from itlr.evaluation.engine_runs import EngineRunner, default_index_name

    name = index_name or default_index_name(dataset, embedder.name)
    backend = remote_backend(replace(spec, index_name=name), embedder.name, embedder.dims)
    created = backend.ensure_index(spec.knn_engine)
    runner = EngineRunner(
        backend,
        mode=mode,  # type: ignore[arg-type]
        candidates=candidates,
        index_created=created,
    )
    return runner, list(backend.warnings)


def run_evaluation(
    data: BeirDataset,
    settings: EvalSettings,
    embedder: Embedder,
    engine: EngineRunner | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EvalResult:
    """Every chosen method on every query of `data`, in process or partly on `engine`."""
    from itlr.calibrations import default_hard_filter, load_calibration
    from itlr.evaluation.beir import evaluate_beir, rewriter_for
    from itlr.evaluation.methods import build_methods, parse_method_names
    from itlr.lexical import LexicalCorpus

    depth = ranked_depth(settings.depth, engine is not None)
    rewriter = rewriter_for(settings.rewrite, settings.llm)
    calibrated = load_calibration(settings.model)
    given = settings.methods
    names = parse_method_names(",".join(given if given is not None else DEFAULT_METHODS))
    if given is None and calibrated is not None:
        names.append("itlr-calibrated")
    hard_filter = (
        default_hard_filter(settings.model)
        if settings.hard_filter is None
        else settings.hard_filter
    )
    chosen = build_methods(
        names,
        ops=settings.ops,
        truth=settings.truth,
        hard_filter=hard_filter,
        hard_filter_rule=settings.hard_filter_rule,
        calibrated=calibrated,
        setops_depth=SETOPS_DEPTH,
        lexical_corpus=LexicalCorpus([d.text for d in data.corpus])
        if settings.truth.uses_lexical
        else None,
    )
    ops, truth = settings.ops, settings.truth
    return evaluate_beir(
        data,
        embedder,
        chosen,
        rewriter=rewriter,
        depth=depth,
        on_stage=on_stage,
        on_progress=on_progress,
        engine=engine,
        config={
            # In process; a cluster run overrides these four with its own.
            "engine": "memory",
            "url": None,
            "index": None,
            "mode": "exact",
            "methods": [m.name for m in chosen],
            "rewrite": settings.rewrite,
            "llm_model": settings.llm.model if settings.llm else None,
            "operators": {"and": ops.and_, "or": ops.or_, "not": ops.not_},
            "truth": {"kind": truth.kind, "tau": truth.tau, "lam": truth.lam},
            "hard_filter": hard_filter,
            "hard_filter_rule": settings.hard_filter_rule,
            "split": settings.split,
            "qrels": str(settings.qrels) if settings.qrels else None,
            "negatives": str(settings.negatives) if settings.negatives else None,
            "setops_depth": SETOPS_DEPTH,
        },
    )


def write_results(result: EvalResult, data: BeirDataset, folder: Path) -> list[str]:
    """results.json, metrics.md and the plots into `folder`; returns the metric names shown."""
    from itlr.evaluation.report import grouped_bars, metrics_markdown

    names = metric_names(result)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(
        json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (folder / "metrics.md").write_text(
        metrics_markdown(result.metrics, names) + "\n", encoding="utf-8"
    )
    grouped_bars(
        folder / "metrics.png",
        names,
        {m: [v.get(n, float("nan")) for n in names] for m, v in result.metrics.items()},
        f"{data.name} ({len(data.queries)} queries)",
        "score",
    )
    groups = negation_groups(result)
    if len(groups) > 1:
        grouped_bars(
            folder / "by_negations.png",
            groups,
            {m: list(v.values()) for m, v in result.by_negations.items()},
            f"{data.name}: nDCG@10 by number of NOTs",
            "nDCG@10",
        )
    return names


def metric_names(result: EvalResult) -> list[str]:
    """The metrics some method has, in the standard order."""
    from itlr.evaluation.metrics import METRIC_NAMES

    return [n for n in METRIC_NAMES if any(n in v for v in result.metrics.values())]


def negation_groups(result: EvalResult) -> list[str]:
    """The by-number-of-NOTs columns (one group means the table says nothing new)."""
    return list(next(iter(result.by_negations.values()), {}))


def default_results_folder(data: BeirDataset) -> Path:
    return Path("results") / "eval" / data.name
