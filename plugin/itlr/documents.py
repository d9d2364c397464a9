"""Reading documents to ingest: JSON lines, CSV, or a BEIR folder.

Rules, the same for every format and engine:
  - ids are strings: a JSON number id becomes its decimal text, so `1` and `"1"` are one
    document; other id types (floats, booleans, lists, objects) are refused;
  - an id given more than once in a file: the last copy wins, and the copies are counted;
  - a line that cannot be a document (undecodable bytes, not JSON, not an object, no id, no
    text, text that is not valid Unicode) is reported with file, line number and reason, and
    the other documents are kept (`read_documents`); bundled data is read strictly
    (`read_jsonl`), where a bad line is an error;
  - a byte-order mark at the start of a file is ignored.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itlr.errors import ConfigurationError

ID_KEYS = ("id", "_id", "doc_id", "docid")
TEXT_KEYS = ("text", "body", "content", "passage")
BOM = "\ufeff"


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BadLine:
    """A line of an input file that is not a document, and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason}


@dataclass(frozen=True)
class DocumentFile:
    """What a file holds: its documents (one per id, the last copy), the lines that are not
    documents, and how many copies of repeated ids were dropped."""

    documents: list[Document]
    bad_lines: list[BadLine]
    duplicates: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": len(self.documents),
            "bad_lines": [b.to_dict() for b in self.bad_lines],
            "duplicates": self.duplicates,
        }


class _NotADocument(ValueError):
    """Why one record cannot be a document (becomes a BadLine)."""


def _document_id(value: Any) -> str | None:
    if isinstance(value, bool | float | list | dict):
        raise _NotADocument(
            f"id {json.dumps(value)} is a {type(value).__name__}: ids are strings "
            "(or whole numbers, read as their decimal text)"
        )
    if value is None or value == "":
        return None
    return str(value)


def _from_record(record: Any) -> Document:
    if not isinstance(record, dict):
        raise _NotADocument(
            f"a document is a JSON object, this line is {_json_kind(record)}: "
            'write {"id": ..., "text": ...}'
        )
    doc_id = next(
        (i for i in (_document_id(record.get(k)) for k in ID_KEYS) if i is not None), None
    )
    text = next((record[k] for k in TEXT_KEYS if isinstance(record.get(k), str)), None)
    if doc_id is None or text is None:
        missing = "an id" if doc_id is None else "a text"
        raise _NotADocument(
            f"no {missing.split()[1]}: each document needs an id ({'/'.join(ID_KEYS)}) and a "
            f"text ({'/'.join(TEXT_KEYS)}); got keys {sorted(record)}"
        )
    title = record.get("title")
    if isinstance(title, str) and title.strip():
        # BEIR convention: the title is part of what gets embedded.
        text = f"{title.strip()}. {text}"
    fields = {k: v for k, v in record.items() if k not in (*ID_KEYS, *TEXT_KEYS)}
    document = Document(doc_id, text, fields)
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as bad:
        # A JSON escape such as "\ud800" decodes to a lone surrogate: no store can hold it.
        raise _NotADocument(
            f"contains {bad.object[bad.start : bad.end]!a}, a lone surrogate, which is not "
            "valid Unicode text"
        ) from None
    return document


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | BadLine]]:
    """(line number, text) per line, or a BadLine for a line that is not UTF-8."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                yield (
                    number,
                    BadLine(
                        str(path),
                        number,
                        f"not UTF-8 text (byte 0x{raw[bad.start]:02x} at column {bad.start + 1}):"
                        " save the file as UTF-8",
                    ),
                )
                continue
            yield number, line.removeprefix(BOM) if number == 1 else line


def json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) for each non-blank line of a JSON-lines file; the first
    line that is not UTF-8 JSON is an error."""
    for number, line in _decoded_lines(path):
        if isinstance(line, BadLine):
            raise ConfigurationError(str(line))
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as bad:
            raise ConfigurationError(f"{path}:{number}: not valid JSON ({bad.msg})") from None


def read_jsonl(path: Path) -> Iterator[Document]:
    """Documents of a trusted JSON-lines file (bundled data): a bad line is an error."""
    for number, record in json_records(path):
        try:
            yield _from_record(record)
        except _NotADocument as bad:
            raise ConfigurationError(f"{path}:{number}: {bad}") from None


def _jsonl_entries(path: Path) -> Iterator[Document | BadLine]:
    for number, line in _decoded_lines(path):
        if isinstance(line, BadLine):
            yield line
            continue
        if not line.strip():
            continue
        try:
            yield _from_record(json.loads(line))
        except json.JSONDecodeError as bad:
            yield BadLine(str(path), number, f"not valid JSON ({bad.msg}, column {bad.colno})")
        except _NotADocument as bad:
            yield BadLine(str(path), number, str(bad))


def _csv_entries(path: Path) -> Iterator[Document | BadLine]:
    # surrogateescape keeps undecodable bytes as lone surrogates, found again per record, so a
    # bad byte costs its own row only; utf-8-sig drops a byte-order mark.
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for record in reader:
        number = reader.line_num
        values = [*record.keys(), *(v for v in record.values() if isinstance(v, str))]
        if any(not _encodable(str(v)) for v in values):
            yield BadLine(str(path), number, "not UTF-8 text: save the file as UTF-8")
            continue
        try:
            yield _from_record(dict(record))
        except _NotADocument as bad:
            yield BadLine(str(path), number, str(bad))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_documents(source: str | Path) -> DocumentFile:
    """Documents from a .jsonl/.json-lines file, a .csv file, or a BEIR folder (corpus.jsonl),
    with the lines that are not documents and the count of repeated ids (module docstring)."""
    path = Path(source)
    if path.is_dir():
        corpus = path / "corpus.jsonl"
        if not corpus.exists():
            raise ConfigurationError(f"{path} is a folder without corpus.jsonl: not a BEIR folder")
        entries = _jsonl_entries(corpus)
    elif not path.exists():
        raise ConfigurationError(f"no such file: {path}")
    elif path.suffix.lower() == ".csv":
        entries = _csv_entries(path)
    elif path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        entries = _jsonl_entries(path)
    else:
        raise ConfigurationError(f"{path}: expected a .jsonl, .csv file or a BEIR folder")
    by_id: dict[str, Document] = {}
    bad_lines: list[BadLine] = []
    duplicates = 0
    for entry in entries:
        if isinstance(entry, BadLine):
            bad_lines.append(entry)
        else:
            duplicates += entry.id in by_id
            by_id[entry.id] = entry  # the last copy wins; the first copy's place is kept
    return DocumentFile(list(by_id.values()), bad_lines, duplicates)


def document_from_record(record: Any, where: str) -> Document:
    """One document from a mapping (the front door's `add`); a bad one is a one-line error."""
    try:
        return _from_record(record)
    except _NotADocument as bad:
        raise ConfigurationError(f"{where}: {bad}") from None
