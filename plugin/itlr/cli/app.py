"""The typer app, shared options and error handling for every `itlr` command."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from itlr.errors import ItlrError, QuerySyntaxError

app = typer.Typer(
    help="Logical retrieval over dense vectors: AND, OR, NOT for embedding search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


class Engine(StrEnum):
    memory = "memory"
    opensearch = "opensearch"
    elasticsearch = "elasticsearch"
    auto = "auto"


class Mode(StrEnum):
    knn = "knn"
    exact = "exact"


class AndOp(StrEnum):
    product = "product"
    sum = "sum"
    min = "min"
    lukasiewicz = "lukasiewicz"


class OrOp(StrEnum):
    sum = "sum"
    max = "max"
    probsum = "probsum"


class NotOp(StrEnum):
    complement = "complement"
    reciprocal = "reciprocal"


class Truth(StrEnum):
    clamp = "clamp"
    shift = "shift"
    sigmoid = "sigmoid"


def fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def run_guarded(action):
    """Turn our errors into one line and exit status 2 instead of a traceback."""
    try:
        return action()
    except QuerySyntaxError as bad:
        err.print(bad.render(), highlight=False, markup=False)
        raise typer.Exit(2) from None
    except ItlrError as bad:
        raise fail(str(bad)) from None


IndexOpt = Annotated[
    str, typer.Option("--index", "-i", help="Index name (or a folder path for the memory engine).")
]
EngineOpt = Annotated[Engine, typer.Option(help="Where the index lives; memory needs no server.")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Embedding model: a sentence-transformers path or name (default: bundled all-MiniLM-L6-v2)."
    ),
]
