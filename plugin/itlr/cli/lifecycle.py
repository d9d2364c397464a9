"""`itlr delete`: remove documents by id from any engine; `itlr compact`: drop an embedded
index's dead rows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from itlr.cli.app import IndexOpt, ModelOpt, app, engine_command, out, run_guarded, warn
from itlr.errors import ConfigurationError


def _ids_from_file(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as bad:
        raise ConfigurationError(f"cannot read --ids-file {path}: {bad}") from None
    return [line.strip() for line in lines if line.strip()]


@app.command()
@engine_command
def delete(
    index: IndexOpt,
    ids: Annotated[list[str] | None, typer.Argument(help="Ids of the documents to delete.")] = None,
    spec: Any = None,
    ids_file: Annotated[
        Path | None, typer.Option(help="A file with one id per line (blank lines ignored).")
    ] = None,
    model: ModelOpt = None,
) -> None:
    """Delete documents by id; ids the index does not hold are counted, not an error."""

    def action() -> None:
        wanted = [*(ids or []), *(_ids_from_file(ids_file) if ids_file else [])]
        if not wanted:
            raise ConfigurationError(
                "name the documents to delete: itlr delete ID... or --ids-file F"
            )
        from itlr.index import Index

        target = Index.from_spec(spec, model=model, create=False)
        for warning in target.warnings:
            warn(warning)
        report = target.delete(wanted)
        missing = len(set(wanted)) - report.deleted
        out.print(
            f"deleted {report.deleted}, {missing} not found; "
            f"index now holds {target.count()} documents",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    run_guarded(action)


@app.command()
@engine_command
def compact(index: IndexOpt, spec: Any = None, model: ModelOpt = None) -> None:
    """Rewrite an embedded index without the rows of replaced and deleted documents (writes do
    it by themselves past ITLR_COMPACT_DEAD_RATIO); crash-safe like every write."""

    def action() -> None:
        from itlr.index import Index

        target = Index.from_spec(spec, model=model, create=False)
        before, after = target.compact()
        out.print(
            f"compacted: {before} committed rows, now {after} ({target.count()} documents)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

    run_guarded(action)
