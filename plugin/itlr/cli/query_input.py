"""Where a command's query comes from: the argument, `-` for stdin, or --query-file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from itlr.errors import ConfigurationError

QueryArg = Annotated[
    str | None,
    typer.Argument(
        help='A logical query, e.g. \'"vitamin D" AND NOT "bone health"\'; - reads it from '
        "stdin. A query starting with '-' goes after --: itlr search -- '-a AND b'.",
        show_default=False,
    ),
]
QueryFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--query-file",
        help="Read the query from this UTF-8 file (for long queries).",
        show_default=False,
    ),
]


def query_text(argument: str | None, query_file: Path | None) -> str:
    """The query text; the caller parses it (the parser reports text that is not Unicode)."""
    if query_file is not None:
        if argument is not None:
            raise ConfigurationError("give a QUERY or --query-file, not both")
        try:
            raw = query_file.read_bytes()
        except OSError as bad:
            raise ConfigurationError(
                f"cannot read --query-file {query_file}: {bad.strerror}"
            ) from None
        return _decoded(raw, str(query_file))
    if argument is None:
        raise ConfigurationError(
            "no query: give it as an argument, - to read it from stdin, or --query-file FILE"
        )
    if argument == "-":
        return _decoded(sys.stdin.buffer.read(), "stdin")
    return argument


def _decoded(raw: bytes, where: str) -> str:
    # Bytes that are not UTF-8 become lone surrogates, which the parser points at.
    return raw.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff").strip()
