"""Reading documents to ingest: JSON lines, CSV, or a BEIR folder."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itlr.errors import ConfigurationError

ID_KEYS = ("id", "_id", "doc_id", "docid")
TEXT_KEYS = ("text", "body", "content", "passage")


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)


def document_from_record(record: dict[str, Any], where: str) -> Document:
    doc_id = next((record[k] for k in ID_KEYS if record.get(k) not in (None, "")), None)
    text = next((record[k] for k in TEXT_KEYS if isinstance(record.get(k), str)), None)
    if doc_id is None or text is None:
        raise ConfigurationError(
            f"{where}: each document needs an id ({'/'.join(ID_KEYS)}) and a text "
            f"({'/'.join(TEXT_KEYS)}); got keys {sorted(record)}"
        )
    title = record.get("title")
    if isinstance(title, str) and title.strip():
        # BEIR convention: the title is part of what gets embedded.
        text = f"{title.strip()}. {text}"
    fields = {k: v for k, v in record.items() if k not in (*ID_KEYS, *TEXT_KEYS)}
    return Document(str(doc_id), text, fields)


def json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) for each non-blank line of a JSON-lines file."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as bad:
                raise ConfigurationError(f"{path}:{number}: not valid JSON ({bad.msg})") from None


def read_jsonl(path: Path) -> Iterator[Document]:
    for number, record in json_records(path):
        yield document_from_record(record, f"{path}:{number}")


def read_csv(path: Path) -> Iterator[Document]:
    with open(path, encoding="utf-8", newline="") as handle:
        for number, record in enumerate(csv.DictReader(handle), 2):
            yield document_from_record(dict(record), f"{path}:{number}")


def read_documents(source: str | Path) -> Iterator[Document]:
    """Documents from a .jsonl/.json-lines file, a .csv file, or a BEIR folder (corpus.jsonl)."""
    path = Path(source)
    if path.is_dir():
        corpus = path / "corpus.jsonl"
        if not corpus.exists():
            raise ConfigurationError(f"{path} is a folder without corpus.jsonl: not a BEIR folder")
        return read_jsonl(corpus)
    if not path.exists():
        raise ConfigurationError(f"no such file: {path}")
    if path.suffix.lower() == ".csv":
        return read_csv(path)
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return read_jsonl(path)
    raise ConfigurationError(f"{path}: expected a .jsonl, .csv file or a BEIR folder")
