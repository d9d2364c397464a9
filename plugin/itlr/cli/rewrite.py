"""`itlr rewrite`: a question -> a logical query, or a dev-set evaluation of the rewriter."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from itlr.cli.app import FROM_FLAGS, app, err, out, run_guarded, warn, with_options
from itlr.errors import RewriteError
from itlr.rewrite import RewriteResult, rewrite
from itlr.rewrite.llm import LLMConfig

if TYPE_CHECKING:
    from itlr.rewrite.accuracy import EvalReport, Throughput

# Shared by every command that can rewrite with an LLM, through `llm_command`.
LLMBaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-base-url",
        envvar="ITLR_LLM_BASE_URL",
        help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (default: OpenAI).",
        rich_help_panel="LLM rewriter",
    ),
]
LLMModelOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-model",
        envvar="ITLR_LLM_MODEL",
        help="Model name; giving one selects the LLM rewriter instead of the rules.",
        rich_help_panel="LLM rewriter",
    ),
]
LLMKeyEnvOpt = Annotated[
    str,
    typer.Option(
        "--llm-api-key-env",
        help="Environment variable holding the API key (not needed by local servers).",
        rich_help_panel="LLM rewriter",
    ),
]
LLMTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--llm-timeout",
        min=0.1,
        help="Seconds to wait for one answer before retrying.",
        rich_help_panel="LLM rewriter",
    ),
]
LLM_OPTIONS: dict[str, tuple[Any, Any]] = {
    "llm_base_url": (LLMBaseUrlOpt, None),
    "llm_model": (LLMModelOpt, None),
    "llm_api_key_env": (LLMKeyEnvOpt, "OPENAI_API_KEY"),
    "llm_timeout": (LLMTimeoutOpt, 30.0),
}


@dataclass(frozen=True)
class LLMFlags:
    """The LLM rewriter's flags as given. Read only where a command rewrites with an LLM
    (`config`), so that a flag set in the environment costs nothing elsewhere."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 30.0

    @property
    def named(self) -> bool:
        """Whether an endpoint or a model was given."""
        return bool(self.base_url or self.model)

    def config(self) -> LLMConfig | None:
        """The LLM configuration the flags describe, or None for the rule rewriter."""
        if self.model is None:
            if self.base_url is not None:
                raise RewriteError("--llm-base-url needs --llm-model: name the model to ask")
            return None
        return LLMConfig(
            model=self.model,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            timeout=self.timeout,
        )


def llm_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the LLM rewriter's flags, where its `llm` parameter stands; it receives
    them as `llm` (LLMFlags)."""
    return with_options(
        func,
        LLM_OPTIONS,
        "llm",
        lambda values, _own: LLMFlags(
            base_url=values["llm_base_url"],
            model=values["llm_model"],
            api_key_env=values["llm_api_key_env"],
            timeout=values["llm_timeout"],
        ),
        in_place=True,
    )


def _rewriter(config: LLMConfig | None) -> Callable[[str], RewriteResult]:
    if config is None:
        return lambda question: rewrite(question, "rules")
    return lambda question: rewrite(question, "llm", config)


def _print_result(result: RewriteResult, as_json: bool, explain: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(result.canonical)
    if explain and not as_json:
        for line in result.explain():
            err.print(line, highlight=False, markup=False)
    for warning in result.warnings:
        warn(warning)


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _print_report(report: EvalReport, path: Path, throughput: Throughput | None) -> None:
    from itlr.rewrite.accuracy import CATEGORIES

    table = Table(
        title=f"{report.method} rewriter on {path.name} ({len(report.outcomes)} questions)",
        title_justify="left",
    )
    for name in ("category", "n", "exact", "structure", "in-scope n", "in-scope exact",
                 "in-scope structure"):  # fmt: skip
        first = name == "category"
        table.add_column(name, justify="left" if first else "right", no_wrap=first)

    def row(label: str, **where: Any) -> None:
        every = report.select(**where)
        scoped = report.select(**{**where, "in_scope": True})
        table.add_row(
            label,
            str(every.n),
            _percent(every.exact, every.n),
            _percent(every.structure, every.n),
            str(scoped.n),
            _percent(scoped.exact, scoped.n),
            _percent(scoped.structure, scoped.n),
        )

    for category in CATEGORIES:
        row(category, category=category)
    table.add_section()
    if len(report.splits) > 1:
        for split in report.splits:
            row(f"split: {split}", split=split)
    row("total")
    out.print(table)
    if report.fallbacks:
        out.print(f"{report.fallbacks} questions fell back to the rule rewriter")
    if throughput is not None:
        out.print(
            f"throughput: {throughput.per_second:,.0f} questions/s "
            f"({throughput.questions} rewrites in {throughput.seconds:.2f} s, one process)"
        )
    else:
        mean = report.seconds / max(len(report.outcomes), 1)
        out.print(f"mean time per question: {mean:.2f} s")


def _print_failures(report: EvalReport) -> None:
    for outcome in report.failures:
        scope = "in scope" if outcome.item.in_scope else "out of scope"
        err.print(
            f"{outcome.item.id} ({outcome.item.category}, {scope}): {outcome.item.question}\n"
            f"  gold: {outcome.item.gold}\n  got:  {outcome.predicted}",
            highlight=False,
            markup=False,
        )


@app.command("rewrite")
@llm_command
def rewrite_command(
    question: Annotated[
        str | None,
        typer.Argument(help="A question, e.g. 'benefits of vitamin D, other than bone health'."),
    ] = None,
    eval_path: Annotated[
        Path | None,
        typer.Option(
            "--eval",
            metavar="DEVSET",
            help="Score the rewriter on a JSON-lines dev set instead ('bundled' for ours).",
        ),
    ] = None,
    llm: LLMFlags = FROM_FLAGS,
    explain: Annotated[
        bool, typer.Option(help="Show which words were read as cues, terms and filler.")
    ] = False,
    failures: Annotated[
        bool, typer.Option(help="With --eval: list every question that did not match exactly.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Rewrite a natural-language question into a logical query (rules, or an LLM if configured)."""

    def action() -> None:
        config = llm.config()
        if eval_path is not None:
            if question is not None:
                raise RewriteError("give either a QUESTION or --eval DEVSET, not both")
            _report_accuracy(eval_path, config, as_json, failures)
            return
        if question is None:
            raise RewriteError("no question: itlr rewrite 'your question' (or --eval DEVSET)")
        _print_result(_rewriter(config)(question), as_json, explain)

    run_guarded(action)


def _report_accuracy(path: Path, config: LLMConfig | None, as_json: bool, failures: bool) -> None:
    from itlr.rewrite.accuracy import (
        default_devset,
        load_devset,
        measure_accuracy,
        measure_throughput,
    )

    path = default_devset() if str(path) == "bundled" else path
    items = load_devset(path)
    method = "rules" if config is None else f"llm ({config.model})"
    report = measure_accuracy(items, _rewriter(config), method)
    throughput = None
    if config is None:
        throughput = measure_throughput(
            [i.question for i in items], _rewriter(None), min_seconds=0.5
        )
    if as_json:
        payload = report.to_dict()
        if throughput is not None:
            payload["questions_per_second"] = round(throughput.per_second, 1)
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        _print_report(report, path, throughput)
    if failures:
        _print_failures(report)
