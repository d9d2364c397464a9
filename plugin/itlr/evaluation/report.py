"""Markdown tables and PNG plots of evaluation results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from itlr.evaluation.paper_tables import GRID_NOT, NEGATIONS, SyntheticReport
from itlr.extras import require


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def metrics_markdown(
    metrics: Mapping[str, Mapping[str, float]], names: Sequence[str], rows: str = "method"
) -> str:
    body = [[method, *(_fmt(values.get(n)) for n in names)] for method, values in metrics.items()]
    return markdown_table([rows, *names], body)


def synthetic_markdown(report: SyntheticReport) -> str:
    config = report.config
    table1 = markdown_table(
        ["method", *(f"{n} NOT" for n in NEGATIONS), "all"],
        [
            [name, *(_fmt(row[str(n)]) for n in NEGATIONS), _fmt(row["all"])]
            for name, row in report.table1.items()
        ],
    )
    table2 = markdown_table(
        ["AND / OR", "NOT = 1-x", "NOT = 1/x"],
        [[combo, *(_fmt(row[n]) for n in GRID_NOT)] for combo, row in report.table2.items()],
    )
    lengths = list(next(iter(report.figure3["and-chain"].values())))
    chain_methods = list(report.figure3["and-chain"])
    figure3 = markdown_table(
        [
            "terms",
            *(f"{op}: {m}" for op in ("AND", "OR") for m in chain_methods),
        ],
        [
            [
                length,
                *(
                    _fmt(report.figure3[family][method][length])
                    for family in ("and-chain", "or-chain")
                    for method in chain_methods
                ),
            ]
            for length in lengths
        ],
    )
    return (
        "\n\n".join(
            [
                "# Synthetic benchmark",
                f"{config['template_queries']} template queries ({config['queries_per_template']} per "
                f"template x 32), {config['chain_queries']} chain queries, {config['documents']} "
                f"documents from {config['topics']} topics, model {config['model']}, seed "
                f"{config['seed']}. Metric: nDCG@10, each query on its own corpus of at most 6 "
                "documents.",
                "## Table 1: nDCG@10 by number of negations",
                table1,
                "## Table 2: operator families (nDCG@10 over all 32 templates)",
                table2,
                "## Figure 3: AND-only and OR-only chains (nDCG@10)",
                figure3,
                f"Wall time {report.timings['total_s']:.0f} s (encoding "
                f"{report.timings['encoded_texts']:.0f} new texts: {report.timings['encode_s']:.0f} s).",
            ]
        )
        + "\n"
    )


def _pyplot() -> ModuleType:
    (matplotlib,) = require("eval", "matplotlib")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(
    path: Path,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str,
    ylabel: str,
    xlabel: str = "",
) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(series)) / 2), 4))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        positions = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        axes.bar(positions, [0.0 if math.isnan(v) else v for v in values], width, label=name)
    axes.set_xticks(range(len(groups)), groups)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel(ylabel)
    if xlabel:
        axes.set_xlabel(xlabel)
    axes.set_title(title)
    # Below the axes: inside, the legend hides the bars of the last group.
    axes.legend(
        fontsize="small",
        ncols=min(6, max(1, len(series))),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18 if xlabel else -0.1),
        frameon=False,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def synthetic_plots(report: SyntheticReport, folder: Path) -> list[Path]:
    plt = _pyplot()
    paths = [
        grouped_bars(
            folder / "table1.png",
            [str(n) for n in NEGATIONS],
            {name: [row[str(n)] for n in NEGATIONS] for name, row in report.table1.items()},
            "Synthetic three-term queries",
            "nDCG@10",
            "number of negations",
        ),
        grouped_bars(
            folder / "table2.png",
            list(report.table2),
            {
                "NOT = 1-x": [row["complement"] for row in report.table2.values()],
                "NOT = 1/x": [row["reciprocal"] for row in report.table2.values()],
            },
            "Operator families (AND / OR)",
            "nDCG@10",
        ),
    ]
    figure, panels = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axes, family, title in zip(
        panels, ("and-chain", "or-chain"), ("AND-only chains", "OR-only chains"), strict=True
    ):
        for method, values in report.figure3[family].items():
            lengths = [int(k) for k in values]
            axes.plot(lengths, list(values.values()), marker="o", label=method)
        axes.set_title(title)
        axes.set_xlabel("number of terms")
        axes.set_ylim(0, 1.05)
        axes.grid(alpha=0.3)
        axes.legend()
    panels[0].set_ylabel("nDCG@10")
    figure.tight_layout()
    figure.savefig(folder / "figure3.png", dpi=120)
    plt.close(figure)
    paths.append(folder / "figure3.png")
    return paths
