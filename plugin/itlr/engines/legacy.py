"""Indexes itlr wrote before its SQLite store (format 1), recognised by proof, never by a name.

Format 1 kept, in its folder, exactly `manifest.json` (the five keys format 1, model, dims,
similarity "cosine", count), `vectors.f32` (dims float32 per row) and `docs.jsonl` (one
`{"id", "text", "fields"}` or `{"id", "deleted": true}` per row, only the last line possibly
torn by a kill), and for an instant `manifest.json.tmp`. A `manifest.json` is a common name: a
folder holding one is taken for an old itlr index only when everything in it is exactly that
(or what a cut-short migration left); otherwise it is the user's, and nothing in it is read
further, written, moved or deleted (issue 56, item 1). `refusal` is the cheap look that
decides whether a folder may be opened; `read` proves every row before the migration in
itlr.engines.store writes its first byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itlr.errors import IndexStateError

MANIFEST = "manifest.json"
DOCS = "docs.jsonl"
VECTORS = "vectors.f32"
FORMAT = 1
_MANIFEST_KEYS = frozenset({"format", "model", "dims", "similarity", "count"})
_OWN_FILES = frozenset({MANIFEST, MANIFEST + ".tmp", DOCS, VECTORS})
_ROW_KEYS = frozenset({"id", "text", "fields", "deleted"})
# Format 1 wrote a manifest of about 120 bytes; anything much larger is someone else's file.
_MANIFEST_LIMIT = 4096


@dataclass(frozen=True)
class LegacyRow:
    id: str
    text: str
    fields: dict[str, Any]
    deleted: bool


@dataclass(frozen=True)
class LegacyIndex:
    """A proven format 1 index: its model, dims and the rows that have both a line and a
    vector (a torn last line dropped)."""

    model: str
    dims: int
    rows: list[LegacyRow]


def present(path: Path) -> bool:
    """Whether the folder holds a `manifest.json` at all (itlr's or anyone's)."""
    manifest = path / MANIFEST
    return manifest.is_file() or manifest.is_symlink()


def refusal(path: Path, leftover: Callable[[Path], bool]) -> str | None:
    """None when the folder `path` is, by its manifest and its files, a format 1 index;
    otherwise why not, in a few words. `leftover(file)` says whether a file of another name is
    what a cut-short migration (the new store's creation) left. Reads, never writes."""
    if not present(path):
        return f"it has no {MANIFEST}"
    manifest = _manifest(path)
    if isinstance(manifest, str):
        return manifest
    for entry in sorted(path.iterdir()):
        if entry.name in _OWN_FILES:
            if entry.is_symlink() or not entry.is_file():
                return f"its {entry.name} is not a plain file"
        elif not leftover(entry):
            return f"it also holds {entry.name!r}"
    for name in (DOCS, VECTORS):
        if not (path / name).is_file():
            return f"it has no {name}"
    return None


def read(path: Path, shown: str, leftover: Callable[[Path], bool]) -> LegacyIndex:
    """The proven format 1 index in `path`, every row checked; IndexStateError (one line, the
    folder untouched) for anything that is not exactly what format 1 wrote."""
    reason = refusal(path, leftover)
    manifest = _manifest(path)
    if reason is not None or isinstance(manifest, str):
        raise IndexStateError(not_legacy_message(shown, reason or str(manifest)))
    model, dims = str(manifest["model"]), int(manifest["dims"])
    vector_rows = (path / VECTORS).stat().st_size // (4 * dims)
    rows: list[LegacyRow] = []
    with open(path / DOCS, "rb") as handle:
        lines = handle.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline after the last whole line
    for number, line in enumerate(lines, start=1):
        row = _row(line)
        if row is None:
            if number == len(lines):
                break  # a torn last line: the rows before it are whole
            raise IndexStateError(
                not_legacy_message(shown, f"line {number} of its {DOCS} is no itlr row")
            )
        if len(rows) < vector_rows:
            rows.append(row)
    return LegacyIndex(model, dims, rows)


def not_legacy_message(shown: str, reason: str) -> str:
    return (
        f"{shown} holds a {MANIFEST} that is not an old itlr index's ({reason}): itlr changed "
        "nothing in it; give a new or empty folder, or a bare name for an index under "
        "$ITLR_HOME/indexes"
    )


def _manifest(path: Path) -> dict[str, Any] | str:
    """The manifest when it is exactly format 1's, else why not."""
    file = path / MANIFEST
    if file.is_symlink() or not file.is_file():
        return f"its {MANIFEST} is not a plain file"
    if file.stat().st_size > _MANIFEST_LIMIT:
        return f"its {MANIFEST} is larger than itlr's ever was"
    try:
        manifest = json.loads(file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return f"its {MANIFEST} is not JSON"
    if not isinstance(manifest, dict) or set(manifest) != _MANIFEST_KEYS:
        return f"its {MANIFEST}'s keys are not itlr's (format, model, dims, similarity, count)"
    dims, count = manifest["dims"], manifest["count"]
    if (
        manifest["format"] != FORMAT
        or isinstance(manifest["format"], bool)
        or manifest["similarity"] != "cosine"
        or not isinstance(manifest["model"], str)
        or not manifest["model"]
        or not isinstance(dims, int)
        or isinstance(dims, bool)
        or not 0 < dims <= 1 << 16
        or not isinstance(count, int)
        or isinstance(count, bool)
        or count < 0
    ):
        return f"its {MANIFEST} is not format {FORMAT}'s"
    return manifest


def _row(line: bytes) -> LegacyRow | None:
    """A line of docs.jsonl as format 1 wrote it, or None."""
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or "id" not in record or not set(record) <= _ROW_KEYS:
        return None
    doc_id, text, fields = record["id"], record.get("text", ""), record.get("fields") or {}
    deleted = record.get("deleted", False)
    if (
        not isinstance(doc_id, str)
        or not isinstance(text, str)
        or not isinstance(fields, dict)
        or not isinstance(deleted, bool)
    ):
        return None
    return LegacyRow(doc_id, text, fields, deleted)
