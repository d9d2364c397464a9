"""Core commands: parse, ingest, search, demo."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from itlr.cli.app import (
    AndOp,
    IndexOpt,
    Mode,
    ModelOpt,
    NotOp,
    OrOp,
    Rewrite,
    Truth,
    app,
    engine_command,
    err,
    out,
    run_guarded,
)
from itlr.cli.rewrite import (
    LLMBaseUrlOpt,
    LLMKeyEnvOpt,
    LLMModelOpt,
    LLMTimeoutOpt,
    llm_config,
)
from itlr.errors import ConfigurationError
from itlr.parser import parse
from itlr.scoring import Operators, TruthMap
from itlr.search import SearchOptions


@app.command("parse")
def parse_command(
    query: Annotated[
        str, typer.Argument(help='A logical query, e.g. \'"vitamin D" AND NOT "bone health"\'.')
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the tree as JSON.")] = False,
) -> None:
    """Print the canonical form of a logical query (exit 2 on a syntax error)."""

    def action() -> None:
        parsed = parse(query)
        if as_json:
            out.print_json(json.dumps({**parsed.to_dict(), "warnings": list(parsed.warnings)}))
        else:
            print(parsed)
        for warning in parsed.warnings:
            err.print(f"[yellow]warning:[/] {warning}")

    run_guarded(action)


def _open(spec, model: str | None, create: bool):
    from itlr.embed import get_embedder
    from itlr.engines.factory import open_backend

    embedder = get_embedder(model)
    backend = open_backend(spec, embedder, create=create)
    for warning in getattr(backend, "warnings", ()):
        err.print(f"[yellow]warning:[/] {warning}")
    return backend, embedder


@app.command()
@engine_command
def ingest(
    source: Annotated[Path, typer.Argument(help="A .jsonl or .csv file, or a BEIR folder.")],
    index: IndexOpt,
    spec: Any = None,
    model: ModelOpt = None,
    knn_engine: Annotated[
        str | None,
        typer.Option(help="k-NN engine for a new OpenSearch index: lucene (default) or faiss."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Documents per embedding batch.")] = 64,
) -> None:
    """Embed documents and add them to an index (re-running adds only what is missing)."""
    from itlr.documents import read_documents
    from itlr.ingest import ingest as run_ingest
    from itlr.progress import document_progress

    def action() -> None:
        documents = list(read_documents(source))
        backend, embedder = _open(replace(spec, knn_engine=knn_engine), model, create=True)
        with document_progress(err) as progress:
            task = progress.add_task("embedding", total=len(documents))
            report = run_ingest(
                documents,
                backend,
                embedder,
                batch_size=batch_size,
                on_batch=lambda n: progress.advance(task, n),
            )
        out.print(
            f"added {report.added}, skipped {report.skipped} already present, "
            f"failed {len(report.failed)}; index now holds {backend.count()} documents"
        )
        for doc_id, reason in report.failed.items():
            err.print(f"[red]failed[/] {doc_id}: {reason}")
        if report.failed:
            raise typer.Exit(1)

    run_guarded(action)


def _print_hits(title: str, hits: list, terms: tuple[str, ...]) -> None:
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("id")
    table.add_column("score", justify="right")
    explained = any(hit.truths for hit in hits)
    terms = terms if explained else ()
    for term in terms:
        table.add_column(term[:24], justify="right")
    table.add_column("text", overflow="fold", max_width=70)
    for rank, hit in enumerate(hits, 1):
        truths = [f"{hit.truths.get(t, 0.0):.3f}" for t in terms]
        table.add_row(str(rank), hit.id, f"{hit.score:.4f}", *truths, hit.text[:160])
    out.print(table)


@app.command()
@engine_command
def search(
    query: Annotated[str, typer.Argument(help="A logical query.")],
    index: IndexOpt,
    spec: Any = None,
    k: Annotated[int, typer.Option("--k", "-k", help="Number of hits.")] = 10,
    mode: Annotated[
        Mode,
        typer.Option(
            help="knn: per-term kNN candidates, rescored exactly; exact: score every document."
        ),
    ] = Mode.knn,
    candidates: Annotated[
        int | None, typer.Option(help="kNN candidates per positive term (default max(100, 10k)).")
    ] = None,
    hard_filter: Annotated[
        float | None,
        typer.Option(
            help="Drop documents whose truth for a NOT term at the root's AND is >= THETA. A NOT under an OR stays fuzzy.",
            metavar="THETA",
        ),
    ] = None,
    and_: Annotated[AndOp, typer.Option("--and", help="AND operator.")] = AndOp.product,
    or_: Annotated[OrOp, typer.Option("--or", help="OR operator.")] = OrOp.sum,
    not_: Annotated[NotOp, typer.Option("--not", help="NOT operator.")] = NotOp.complement,
    truth: Annotated[
        Truth,
        typer.Option(
            help="Map cosine to truth: clamp max(0,cos), shift (1+cos)/2, sigmoid with "
            "--tau/--lam, or calibrated (the sigmoid `itlr calibrate` saved for the model)."
        ),
    ] = Truth.clamp,
    tau: Annotated[float, typer.Option(help="Sigmoid centre.")] = 0.5,
    lam: Annotated[float, typer.Option(help="Sigmoid steepness.")] = 10.0,
    filter: Annotated[
        str | None,
        typer.Option(
            "--filter", help='JSON query every hit must match, e.g. \'{"term": {"lang": "en"}}\'.'
        ),
    ] = None,
    exclude_lexical: Annotated[
        bool,
        typer.Option(
            help="Also drop documents whose text contains a root-level NOT term as a phrase "
            "(match_phrase in must_not; OpenSearch/Elasticsearch)."
        ),
    ] = False,
    explain: Annotated[
        bool, typer.Option(help="Show each hit's per-term truth values (one round trip).")
    ] = False,
    rewrite: Annotated[
        Rewrite,
        typer.Option(
            help="Treat QUERY as a natural-language question and rewrite it first: rules "
            "(offline) or llm (--llm-model, any OpenAI-compatible endpoint)."
        ),
    ] = Rewrite.none,
    llm_base_url: LLMBaseUrlOpt = None,
    llm_model: LLMModelOpt = None,
    llm_api_key_env: LLMKeyEnvOpt = "OPENAI_API_KEY",
    llm_timeout: LLMTimeoutOpt = 30.0,
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as JSON.")] = False,
) -> None:
    """Search an index with a logical query; prints hits with each term's truth value."""
    from itlr.retriever import Retriever

    def action() -> None:
        rewritten = None
        if rewrite is Rewrite.none:
            parsed = parse(query)
        else:
            from itlr.rewrite import rewrite_for_search

            config = llm_config(llm_base_url, llm_model, llm_api_key_env, llm_timeout)
            if rewrite is Rewrite.llm and config is None:
                raise ConfigurationError("--rewrite llm needs --llm-model (and --llm-base-url)")
            rewritten = rewrite_for_search(query, rewrite.value, config)
            parsed = rewritten.query
            for warning in rewritten.warnings:
                err.print(f"[yellow]warning:[/] {warning}")
            err.print(f"rewritten ({rewritten.method}): {parsed}", highlight=False, markup=False)
        options = SearchOptions(
            k=k,
            mode=mode.value,  # type: ignore[arg-type]
            candidates=candidates,
            hard_filter=hard_filter,
            ops=Operators(and_.value, or_.value, not_.value),  # type: ignore[arg-type]
            truth=_truth_map(truth, tau, lam, model),
            filter=_parse_filter(filter),
            exclude_lexical=exclude_lexical,
            explain=explain,
        )
        backend, embedder = _open(spec, model, create=False)
        result = Retriever(backend, embedder).search(parsed, options)
        for warning in result.warnings:
            err.print(f"[yellow]warning:[/] {warning}")
        if as_json:
            payload = result.to_dict()
            if rewritten is not None:
                payload["rewrite"] = rewritten.to_dict()
            print(json.dumps(payload, indent=2, ensure_ascii=False))
        else:
            _print_hits(str(result.query), result.hits, result.query.terms)

    run_guarded(action)


def _truth_map(truth: Truth, tau: float, lam: float, model: str | None) -> TruthMap:
    if truth is not Truth.calibrated:
        return TruthMap(truth.value, tau, lam)  # type: ignore[arg-type]
    from itlr.evaluation.calibration import load_calibration

    calibrated = load_calibration(model)
    if calibrated is None:
        raise ConfigurationError(
            "no calibration saved for this model: run `itlr calibrate DATASET` first, "
            "or use --truth sigmoid --tau T --lam L"
        )
    return calibrated


def _parse_filter(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as bad:
        raise ConfigurationError(
            f"--filter is not valid JSON: {bad.msg} at character {bad.pos}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            '--filter must be a JSON object, e.g. \'{"term": {"lang": "en"}}\''
        )
    return value


@app.command()
def demo(
    k: Annotated[int, typer.Option("--k", "-k", help="Hits per method.")] = 5,
    rebuild: Annotated[bool, typer.Option(help="Re-embed the demo corpus.")] = False,
) -> None:
    """Build the bundled demo index (once) and compare dense and logical retrieval."""
    from itlr.demo import run_demo

    run_guarded(lambda: run_demo(out, k=k, rebuild=rebuild))
