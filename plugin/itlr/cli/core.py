"""Core commands: parse, ingest, search, demo."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from itlr import strict_json
from itlr.cli.app import (
    FROM_FLAGS,
    IndexOpt,
    Rewrite,
    app,
    encoder_command,
    engine_command,
    err,
    out,
    run_guarded,
    say,
    warn,
)
from itlr.cli.options import search_option_command
from itlr.cli.query_input import QueryArg, QueryFileOpt, query_text
from itlr.cli.rewrite import LLMFlags, llm_command
from itlr.errors import ConfigurationError
from itlr.explain import lines as explanation_lines
from itlr.option_groups import EncoderOptions
from itlr.options import search_options
from itlr.query import parse

if TYPE_CHECKING:
    from itlr.engines.factory import EngineSpec
    from itlr.index import Index
    from itlr.results import Hit


@app.command("parse")
def parse_command(
    query: QueryArg = None,
    query_file: QueryFileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tree as JSON.")] = False,
) -> None:
    """Print the canonical form of a logical query (exit 2 on a syntax error)."""

    def action() -> None:
        parsed = parse(query_text(query, query_file))
        if as_json:
            payload = {**parsed.to_dict(), "warnings": list(parsed.warnings)}
            print(json.dumps(payload, indent=2, ensure_ascii=False))
        else:
            print(parsed)
        for warning in parsed.warnings:
            warn(warning)

    run_guarded(action)


def _open(spec: EngineSpec, encoding: EncoderOptions, create: bool) -> Index:
    from itlr.index import Index

    index = Index.from_spec(spec, encoding=encoding, create=create)
    for warning in index.warnings:
        warn(warning)
    return index


@app.command()
@engine_command
@encoder_command()
def ingest(
    source: Annotated[
        Path,
        typer.Argument(
            help="A .jsonl / .ndjson file (JSON lines or Elasticsearch _bulk), a .json array, "
            "a .csv file, or a BEIR folder."
        ),
    ],
    index: IndexOpt,
    spec: Any = None,
    encoding: EncoderOptions = FROM_FLAGS,
    knn_engine: Annotated[
        str | None,
        typer.Option(help="k-NN engine for a new OpenSearch index: lucene (default) or faiss."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Documents per embedding batch.")] = 64,
    strict: Annotated[
        bool,
        typer.Option(help="Refuse the whole file, writing nothing, if any line is not a document."),
    ] = False,
    id_field: Annotated[
        str | None,
        typer.Option(help="Input field read as the id (default: id, _id, doc_id or docid)."),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option(
            "--types",
            help="CSV column types, e.g. year=int,score=float (int, float, bool, str); "
            "without it a column is typed when every cell parses.",
        ),
    ] = None,
    merge: Annotated[
        bool,
        typer.Option(
            help="Partial updates (_bulk update with doc): each document's fields merge into "
            "the stored document, whose other fields stay; a line without a text changes only "
            "the fields it gives."
        ),
    ] = False,
) -> None:
    """Embed documents and upsert them into an index: new ids are added, changed ones replaced,
    unchanged ones skipped (so re-running after a crash or an edit does only what is needed).

    --text-field names the input field read as the text (and the cluster's text field); by
    default the first of text, body, content, passage. Ids are strings (1 and "1" are one
    document); an id repeated in the file keeps its last copy; _bulk delete actions delete.
    Lines that are not documents are listed with their line number and skipped (exit status
    1), or, with --strict, refuse the file. A file without a single document creates nothing.
    The file is read as a stream, in batches: memory does not grow with its size. Fields an
    index's ingest pipeline adds (a time stamp) and itlr's own fields never count as a change.
    """
    from itlr.documents import DocumentStream, parse_types
    from itlr.progress import stream_progress

    def action() -> None:
        text_field = spec.layout.text_field
        stream = DocumentStream(
            source,
            id_field=id_field,
            # The default name keeps the usual fallbacks (text, body, content, passage).
            text_field=None if text_field == "text" else text_field,
            types=parse_types(types),
            merge=merge,
        )
        bad = _BadLines()
        if strict:
            # A first pass over the whole file, writing nothing; the second ingests it.
            for _ in bad.passed(stream):
                pass
            if bad.count:
                raise ConfigurationError(
                    f"{bad.count} lines of {source} are not documents (listed above): nothing "
                    "was ingested; fix them, or drop --strict to ingest the rest"
                )
        changes = bad.passed(stream)
        first = next(changes, None)  # reads up to the first document: none creates nothing
        if first is None:
            raise ConfigurationError(
                f"{source} holds no document ({bad.count} bad lines, listed above): nothing "
                "was ingested and no index was created"
            )
        target = _open(replace(spec, knn_engine=knn_engine), encoding, create=True)
        with stream_progress(err) as progress:
            task = progress.add_task("ingesting", total=stream.size, documents=0)
            read = 0

            def advance(entries: int) -> None:
                nonlocal read
                read += entries
                progress.update(task, completed=stream.position, documents=read)

            report = target.add(
                chain([first], changes),
                batch_size=batch_size,
                on_batch=advance,
                id_field=id_field,
            )
        for doc_id, reason in report.failed.items():
            say(err, "failed", "red", f"{doc_id}: {reason}")
        report.count = target.count()
        notes = (
            f"{stream.duplicates} repeated ids (last copy kept)",
            f"{bad.count} bad lines",
        )
        out.print(
            report.summary(notes),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        if report.failed or bad.count:
            raise typer.Exit(1)

    run_guarded(action)


class _BadLines:
    """Prints each line of an input that is not a document as the stream meets it (a file of
    any size holds none of them), and counts them."""

    def __init__(self) -> None:
        self.count = 0

    def passed(self, stream: Iterable[Any]) -> Iterator[Any]:
        """The stream's entries without its bad lines (reported on stderr)."""
        from itlr.documents import BadLine

        self.count = 0
        for entry in stream:
            if isinstance(entry, BadLine):
                self.count += 1
                say(err, "bad line", "red", str(entry))
            else:
                yield entry


def _print_hits(
    title: str, hits: list[Hit], terms: tuple[str, ...], dropped: list[Hit] | None = None
) -> None:
    table = Table(title=Text(title), title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("id")
    table.add_column("score", justify="right")
    explained = any(hit.truths for hit in hits)
    terms = terms if explained else ()
    for term in terms:
        table.add_column(Text(term[:24]), justify="right")
    table.add_column("text", overflow="fold", max_width=70)
    for rank, hit in enumerate(hits, 1):
        truths = [f"{hit.truths.get(t, 0.0):.3f}" for t in terms]
        table.add_row(str(rank), Text(hit.id), f"{hit.score:.4f}", *truths, Text(hit.text[:160]))
    out.print(table)
    for rank, hit in enumerate(hits, 1):
        if hit.explanation is not None:
            tree = "\n".join(explanation_lines(hit.explanation, "  "))
            out.print(f"#{rank} {hit.id}\n{tree}", highlight=False, markup=False, soft_wrap=True)
        if hit.hard_filter is not None:
            out.print(
                f"  hard filter: {hit.hard_filter['reason']}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    for hit in dropped or ():
        assert hit.hard_filter is not None
        out.print(
            f"dropped by the hard filter: {hit.id} (score {hit.score:.4f}): "
            f"{hit.hard_filter['reason']}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@app.command()
@engine_command
@search_option_command()
@llm_command
@encoder_command("model", "encoder", "encoder_url", "query_prompt")
def search(
    index: IndexOpt,
    query: QueryArg = None,
    query_file: QueryFileOpt = None,
    spec: Any = None,
    option_values: Any = None,
    rewrite: Annotated[
        Rewrite,
        typer.Option(
            help="Treat QUERY as a natural-language question and rewrite it first: rules "
            "(offline) or llm (--llm-model, any OpenAI-compatible endpoint)."
        ),
    ] = Rewrite.none,
    llm: LLMFlags = FROM_FLAGS,
    encoding: EncoderOptions = FROM_FLAGS,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as JSON.")] = False,
) -> None:
    """Search an index with a logical query; prints hits with each term's truth value."""

    def action() -> None:
        text = query_text(query, query_file)
        config = None
        if rewrite is not Rewrite.none:
            config = llm.config()
            if rewrite is Rewrite.llm and config is None:
                raise ConfigurationError("--rewrite llm needs --llm-model (and --llm-base-url)")
        else:
            parse(text)  # a syntax error shows before the model loads
        options = search_options(**option_values, model=encoding.model)
        result = _open(spec, encoding, create=False).search(
            text, options=options, rewrite=rewrite.value, llm=config
        )
        if result.rewrite is not None:
            for warning in result.rewrite.warnings:
                warn(warning)
            err.print(
                f"rewritten ({result.rewrite.method}): {result.query}",
                highlight=False,
                markup=False,
            )
        for warning in result.warnings:
            warn(warning)
        if as_json:
            print(strict_json.dumps(result.to_dict(), indent=2))  # no bare NaN from a field
        else:
            _print_hits(str(result.query), result.hits, result.query.terms, result.dropped)

    run_guarded(action)


@app.command()
def demo(
    k: Annotated[int, typer.Option("--k", "-k", help="Hits per method.")] = 5,
    rebuild: Annotated[bool, typer.Option(help="Re-embed the demo corpus.")] = False,
) -> None:
    """Build the bundled demo index (once) and compare dense and logical retrieval."""
    from itlr.demo import run_demo

    run_guarded(lambda: run_demo(out, k=k, rebuild=rebuild))
