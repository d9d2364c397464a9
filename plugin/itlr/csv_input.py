"""CSV files as documents, streamed: a malformed row costs itself only.

The standard `csv` module reads a file as one stream of records, so one unbalanced `"` makes
every later line part of one cell, a cell over its 131,072-character field limit stops the
whole file, and a row of too many cells has nowhere to go. Here each record is read from lines
kept aside until it is whole: a record that cannot be whole (a quoted cell still open at the
end of the file or past `LIMITS.max_document_bytes`, a quote where a comma belongs, a row of
more cells than the header, or a cell spanning lines that leaves the row short) is reported
with its first line's number and reading goes on at the line after that one; the lines a
broken record had swallowed are read again as rows of their own.

Two passes over the file, each holding one record at a time: the first types the columns (a
column whose every non-empty cell is an integer becomes int, else float, else a boolean;
`types` forces a column's type), the second yields the documents.
"""

from __future__ import annotations

import csv
import io
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from itlr.changes import Change
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS
from itlr.records import Fields, NotADocument, record_document

CSV_TYPES = ("int", "float", "bool", "str")
_BOOLEANS = {"true": True, "false": False}
# A Problem: (first line of the record, why it is not a row).
Problem = tuple[int, str]


class _TooLarge(Exception):
    """The record being read is over the size limit."""


class _Lines:
    """The physical lines of a text file, numbered, as `csv.reader` pulls them; the lines of
    the record being read are kept, so that a broken record can be read again from its second
    line."""

    def __init__(self, handle: IO[str], limit: int) -> None:
        self._handle = handle
        self._limit = limit
        self._number = 0
        self._replay: deque[tuple[int, str | None]] = deque()
        self.record: list[tuple[int, str | None]] = []
        self._size = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        if self._replay:
            number, line = self._replay.popleft()
        else:
            number, line = self._read()
        self.record.append((number, line))
        if line is None:
            raise _TooLarge
        self._size += len(line)
        if self._size > self._limit:
            raise _TooLarge
        return line

    def _read(self) -> tuple[int, str | None]:
        line = self._handle.readline(self._limit + 1)
        if not line:
            raise StopIteration
        self._number += 1
        if len(line) > self._limit and not line.endswith(("\n", "\r")):
            # One line over the limit: read past it in chunks, never held whole.
            while (rest := self._handle.readline(1 << 20)) and not rest.endswith(("\n", "\r")):
                pass
            return self._number, None
        return self._number, line

    def start_record(self) -> None:
        self.record = []
        self._size = 0

    def first_line(self) -> int:
        return self.record[0][0] if self.record else self._number + 1

    def read_again_after_first(self) -> None:
        """The record's first line was the broken one: its other lines are read again."""
        self._replay.extendleft(reversed(self.record[1:]))
        self.start_record()


class _Records:
    """(first line, cells) of each record, or a Problem for one that is broken (module
    docstring). `width`, once the header is read, is the number of cells a row may have."""

    def __init__(self, handle: IO[str], limit: int) -> None:
        self._lines = _Lines(handle, limit)
        self._limit = limit
        self.width: int | None = None

    def __iter__(self) -> Iterator[tuple[int, list[str]] | Problem]:
        lines = self._lines
        reader = csv.reader(lines, strict=True)
        while True:
            lines.start_record()
            try:
                cells = next(reader)
            except StopIteration:
                return
            except (csv.Error, _TooLarge) as bad:
                yield lines.first_line(), self._reason(bad)
                lines.read_again_after_first()
                reader = csv.reader(lines, strict=True)  # a fresh state after the error
                continue
            if not cells:
                continue  # a blank line
            first, spans = lines.first_line(), len(lines.record)
            wrong = self.width is not None and (
                len(cells) > self.width or (spans > 1 and len(cells) != self.width)
            )
            if not wrong:
                yield first, cells
                continue
            if spans > 1:
                yield (
                    first,
                    (
                        f"a quoted cell opened here spans {spans} lines and leaves the row with "
                        f"{len(cells)} cells, the header has {self.width}: an unbalanced quote "
                        '("); the lines after it are read as rows of their own'
                    ),
                )
                lines.read_again_after_first()
                reader = csv.reader(lines, strict=True)
            else:
                yield (
                    first,
                    (
                        f"this row has {len(cells)} cells, the header has {self.width}: quote "
                        'cells that hold a comma ("a, b")'
                    ),
                )

    def _reason(self, bad: Exception) -> str:
        if isinstance(bad, _TooLarge) or "field limit" in str(bad):
            return (
                f"this row is over {self._limit:,} characters (max_document_bytes, raise it "
                "with ITLR_MAX_DOCUMENT_BYTES), or a quoted cell opened here is never closed"
            )
        if "unexpected end of data" in str(bad):
            return (
                'a quoted cell opened here is never closed (an unbalanced quote "): this row is '
                "skipped, the lines after it are read as rows of their own"
            )
        return f'malformed row ({bad}): write a quote inside a quoted cell twice ("")'


def _open(path: Path, opened: Callable[[IO[bytes]], None] | None) -> IO[str]:
    raw = open(path, "rb")  # noqa: SIM115 - closed with the text wrapper that owns it
    if opened is not None:
        opened(raw)
    # surrogateescape keeps undecodable bytes as lone surrogates, found again per row, so a bad
    # byte costs its own row only; utf-8-sig drops a byte-order mark.
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")


def csv_entries(
    path: Path,
    keys: Fields,
    types: Mapping[str, str],
    opened: Callable[[IO[bytes]], None] | None = None,
    make: Callable[[dict[str, Any], int], Change] | None = None,
) -> Iterator[tuple[int, Change | str]]:
    """(line, document) per row of a CSV file, or (line, reason) for a row that is not one;
    `opened` is given the binary file of the second pass (its position is the progress);
    `make(record, line)` turns a row's typed cells into a change (default: a document)."""
    build = make or (lambda record, _: record_document(record, keys))
    # The limit the records are read under decides, not csv's own (a process-wide setting).
    limit = LIMITS.max_document_bytes
    csv.field_size_limit(max(csv.field_size_limit(), limit + 1))
    with _open(path, None) as handle:
        survey = _survey(path, _Records(handle, limit), keys, types)
    if survey is None:
        return
    header, column_types = survey
    with _open(path, opened) as handle:
        records = _Records(handle, limit)
        rows = iter(records)
        next(rows, None)  # the header, read in the survey
        records.width = len(header)
        for number, cells in rows:
            if isinstance(cells, str):
                yield number, cells
                continue
            yield number, _change(header, cells, column_types, build, number)


def _survey(
    path: Path, records: _Records, keys: Fields, types: Mapping[str, str]
) -> tuple[list[str], dict[str, str]] | None:
    """The header and each column's type, from a first pass over the rows; None for an empty
    file."""
    rows = iter(records)
    first = next(rows, None)
    if first is None:
        return None
    number, header = first
    if isinstance(header, str) or not all(_encodable(name) for name in header):
        reason = header if isinstance(header, str) else "not UTF-8 text"
        raise ConfigurationError(f"{path}:{number}: the header row is not readable ({reason})")
    unknown = set(types) - set(header)
    if unknown:
        raise ConfigurationError(
            f"--types names {sorted(unknown)}, not columns of {path} (its columns: {header})"
        )
    records.width = len(header)
    # Per column, the types every non-empty cell seen so far parses as.
    possible: dict[str, set[str]] = {}
    for _, cells in rows:
        if isinstance(cells, str) or not all(_encodable(c) for c in cells):
            continue
        for name, value in zip(header, cells, strict=False):
            if value == "":
                continue
            kinds = possible.setdefault(name, {"int", "float", "bool"})
            if kinds:
                kinds -= {k for k in kinds if not _parses(value, k)}
    kept = {*keys.id_keys, *keys.text_keys}
    chosen = dict(types)
    for name, kinds in possible.items():
        if name not in chosen and name not in kept:
            chosen[name] = next((k for k in ("int", "float", "bool") if k in kinds), "str")
    return header, chosen


def _change(
    header: list[str],
    cells: list[str],
    column_types: Mapping[str, str],
    make: Callable[[dict[str, Any], int], Change],
    number: int,
) -> Change | str:
    if not all(_encodable(c) for c in cells):
        return "not UTF-8 text: save the file as UTF-8"
    # An empty cell is no value, so a typed column is not broken by gaps; a short row's
    # missing cells too.
    record = {k: v for k, v in zip(header, cells, strict=False) if v != ""}
    try:
        typed = {k: _typed(v, column_types.get(k, "str"), k) for k, v in record.items()}
        return make(typed, number)
    except NotADocument as bad:
        return str(bad)


def _parses(value: str, kind: str) -> bool:
    try:
        _typed(value, kind, "")
    except NotADocument:
        return False
    return True


def _typed(value: str, kind: str, name: str) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            number = float(value)
            if not math.isfinite(number):  # JSON cannot carry it
                raise ValueError(value)
            return number
        if kind == "bool":
            return _BOOLEANS[value.strip().lower()]
    except (ValueError, KeyError):
        raise NotADocument(f"column {name!r} is {kind}, but this row has {value!r}") from None
    return value


def parse_types(specs: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """`year=int,score=float` (or repeated) -> {"year": "int", "score": "float"}."""
    types: dict[str, str] = {}
    for spec in specs or ():
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, kind = part.partition("=")
            if not name or kind not in CSV_TYPES:
                raise ConfigurationError(
                    f"--types {part!r}: write COLUMN=TYPE with TYPE one of {', '.join(CSV_TYPES)}"
                )
            types[name.strip()] = kind
    return types


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
