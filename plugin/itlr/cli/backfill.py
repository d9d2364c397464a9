"""`itlr backfill`: embed a text field of the documents already in a cluster index."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from itlr.cli.app import (
    FROM_FLAGS,
    IndexOpt,
    app,
    encoder_command,
    engine_command,
    err,
    out,
    run_guarded,
    say,
)
from itlr.cli.bench import bench_app
from itlr.option_groups import BackfillOptions, EncoderOptions


@app.command()
@engine_command
@encoder_command("model", "encoder", "encoder_url", "passage_prompt")
def backfill(
    index: IndexOpt,
    spec: Any = None,
    encoding: EncoderOptions = FROM_FLAGS,
    into: Annotated[
        str | None,
        typer.Option(
            help="Mirror the index into this new one (created like it, plus index.knn), each "
            "document with its vector (for an OpenSearch index created without index.knn); a "
            "re-run copies changes and deletes what the source no longer holds. An existing "
            "index is written only if itlr made it as a copy of this source; with --follow the "
            "copy is kept current."
        ),
    ] = None,
    alias: Annotated[
        str | None, typer.Option(help="With --into: point this alias at the new index when done.")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Documents per embedding batch.")] = 64,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep running: embed the documents written since (no itlr_hash) every "
            "--interval seconds (with --into: copy every write of the source), until "
            "SIGINT/SIGTERM (the batch under way is finished).",
        ),
    ] = False,
    install_pipeline: Annotated[
        bool,
        typer.Option(
            "--install-pipeline",
            help="Make itlr's ingest pipeline the index's final pipeline: a write that changes "
            "a document drops its itlr_hash, so --follow checks its text again.",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.05, max=3600, help="--follow: seconds between idle looks.")
    ] = 1.0,
    verify_rate: Annotated[
        float,
        typer.Option(
            min=0,
            max=1_000_000,
            help="--follow in place: documents a second the hash sweep re-reads to catch texts "
            "changed without the hash noticing (a _bulk update); 0 turns it off.",
        ),
    ] = 1000.0,
    exact_only: Annotated[
        bool,
        typer.Option(
            "--exact-only",
            help="In place on an OpenSearch index created without index.knn: map the vector "
            "without an ANN method, so only --mode exact searches it (no copy needed).",
        ),
    ] = False,
) -> None:
    """Give every document of an existing index a vector of its --text-field, written into
    --vector-field beside a content hash: a re-run (or a resumed one after a kill) embeds only
    documents whose text changed or that have no vector yet."""
    from itlr.backfill import backfill_spec
    from itlr.errors import ConfigurationError
    from itlr.progress import document_progress

    def action() -> None:
        options = BackfillOptions(
            into=into,
            alias=alias,
            install_pipeline=install_pipeline,
            exact_only=exact_only,
            batch_size=batch_size,
            interval=interval,
            verify_rate=verify_rate,
        )
        if spec.engine == "memory":
            raise ConfigurationError("backfill works on a cluster index: give --url")
        if follow:
            return follow_index(spec, encoding, options)
        with document_progress(err) as progress:
            task = progress.add_task("back-filling", total=None)
            report = backfill_spec(
                spec,
                encoding,
                options,
                on_batch=lambda n: progress.advance(task, n),
                on_total=lambda n: progress.update(task, total=n),
            )
        for doc_id, reason in list(report.failed.items())[:20]:
            say(err, "failed", "red", f"{doc_id}: {reason}")
        out.print(report.summary(), highlight=False, soft_wrap=True)
        if report.failed:
            raise typer.Exit(1)

    run_guarded(action)


def follow_index(spec: Any, encoding: EncoderOptions, options: BackfillOptions) -> None:
    """`--follow`: a line at the start, one per busy cycle and one a minute while idle on
    stdout, a live count on a terminal, a summary at the end; SIGINT and SIGTERM stop it after
    the batch under way (exit 0). A change it cannot handle stops it: the summary, then the
    one-line error (exit 2)."""
    import signal
    import threading

    from itlr.follow_run import follow_spec
    from itlr.progress import follow_progress

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with follow_progress(err) as progress:
            task = progress.add_task(f"following {spec.index_name}", total=None)
            report = follow_spec(
                spec,
                encoding,
                options,
                stop=stop,
                on_cycle=lambda c: out.print(
                    c.line(spec.index_name), highlight=False, soft_wrap=True
                ),
                on_batch=lambda n: progress.advance(task, n),
                on_error=lambda line: say(err, "retrying", "yellow", line),
                on_line=lambda line: out.print(line, highlight=False, soft_wrap=True),
            )
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    out.print(report.summary(), highlight=False, soft_wrap=True)


@bench_app.command("backfill")
def backfill_speed(
    url: Annotated[str, typer.Option(help="The OpenSearch cluster (it gets throw-away indexes).")],
    copies: Annotated[
        int, typer.Option(help="Back-fill the demo corpus this many times (new ids).")
    ] = 3,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Append the markdown report to this file.")
    ] = None,
) -> None:
    """Back-fill docs/s against `itlr ingest` of the same documents, and the encoder's share."""
    from itlr.benchmarks.backfill import backfill_report
    from itlr.cli.perf import emit

    run_guarded(lambda: emit(backfill_report(url, copies), out_file))
