"""Reading documents to ingest: JSON lines, Elasticsearch `_bulk` NDJSON, a JSON array, CSV,
or a BEIR folder.

Rules, the same for every format and engine:
  - ids are strings: a JSON number id becomes its decimal text, so `1` and `"1"` are one
    document; other id types (floats, booleans, lists, objects) are refused;
  - the id and the text are read from `id_field` / `text_field` when given, else from the first
    of ID_KEYS / TEXT_KEYS present; the text is stored as given (a `title` stays its own field;
    only the BEIR loader `read_jsonl` joins title and text, as BEIR's baselines do);
  - entries apply in the file's order (itlr.changes.combine): an id given more than once: the
    last copy wins, and the copies are counted; a `_bulk` `update` merges its fields into the
    document before it (in the file, or stored in the index when the file is streamed); a
    `_bulk` `delete` of an id drops its earlier copies and asks the index to delete it;
  - a file is read as a stream (`DocumentStream`): memory holds one line, one CSV record or one
    array element at a time (and 8 bytes per id, to count repeats), whatever the file's size;
  - a `_bulk` file is told from JSON lines by an action line among its first records, not by
    its first line alone, so a damaged first action line costs its own document only;
  - a line that cannot be a document (undecodable bytes, not JSON, not an object, no id, empty
    or whitespace-only text, JSON nested deeper than `LIMITS.max_depth`, a NaN / Infinity
    number, text that is not valid Unicode) is reported with file, line number and reason, and
    the other documents are kept (`read_documents`); bundled data is read strictly
    (`read_jsonl`), where a bad line is an error;
  - nesting is measured on the raw text before any JSON parsing, so a line nested 100,000 deep
    costs one linear scan, never a recursion;
  - CSV (itlr.csv_input): a malformed row (an unbalanced quote, more cells than the header, a
    cell over the size limit) is a bad line and reading goes on at the next line; cells are
    typed per column: a column whose every non-empty cell is an integer becomes int, else
    float, else a boolean (true/false); `types` forces a column's type; an empty cell is no
    value;
  - a byte-order mark at the start of a file is ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from pathlib import Path
from typing import IO, Any

import numpy as np

from itlr import json_values
from itlr.changes import Change, Delete, Patch, Update, combine
from itlr.csv_input import CSV_TYPES as CSV_TYPES
from itlr.csv_input import csv_entries
from itlr.csv_input import parse_types as parse_types
from itlr.errors import ConfigurationError
from itlr.json_array import ArrayElements
from itlr.limits import LIMITS
from itlr.records import (
    ID_KEYS,
    Fields,
    NotADocument,
    check_value,
    document_id,
    record_document,
    too_deep,
    too_large,
)

# Re-exported: callers read documents through itlr.documents.
from itlr.records import Document as Document
from itlr.seen_ids import SeenIds

BOM = "\ufeff"
BULK_ACTIONS = ("index", "create", "update", "delete")
# Records looked at to tell a `_bulk` file from JSON lines: one action line among them is enough.
_BULK_WINDOW = 16
# Told where a reader opened its file (the progress of a stream is its position).
Opened = Callable[[IO[bytes]], None]


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
    """What a file holds: its documents (one per id, the last copy), the ids a `_bulk` file
    deletes, the lines that are not documents, and how many copies of repeated ids were
    dropped."""

    documents: list[Document]
    bad_lines: list[BadLine]
    duplicates: int
    deletions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": len(self.documents),
            "deletions": len(self.deletions),
            "bad_lines": [b.to_dict() for b in self.bad_lines],
            "duplicates": self.duplicates,
        }


def _decoded_lines(path: Path, opened: Opened | None = None) -> Iterator[tuple[int, str | BadLine]]:
    """(line number, text) per line, or a BadLine for a line that is not UTF-8."""
    with open(path, "rb") as handle:
        if opened is not None:
            opened(handle)
        for number, raw in enumerate(_bounded_lines(handle), 1):
            if raw is None:
                yield number, BadLine(str(path), number, too_large("this line", -1))
                continue
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


def _bounded_lines(handle: Any) -> Iterator[bytes | None]:
    """The lines of a binary file, None for each longer than LIMITS.max_document_bytes (read
    past in chunks, never held whole)."""
    limit = LIMITS.max_document_bytes
    while raw := handle.readline(limit + 2):
        if len(raw) <= limit + 1 or raw.endswith(b"\n"):
            yield raw
            continue
        while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass
        yield None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _depth_profile(text: str) -> np.ndarray:
    """Nesting depth after each character of JSON text, strings blanked out first."""
    blank = _STRING.sub(lambda m: " " * len(m.group()), text)
    codes = np.frombuffer(blank.encode("utf-32-le"), dtype=np.uint32)
    steps = np.zeros(len(codes), dtype=np.int64)
    steps[(codes == ord("{")) | (codes == ord("["))] = 1
    steps[(codes == ord("}")) | (codes == ord("]"))] = -1
    return np.cumsum(steps)


def _nested_too_deep(text: str, allowed: int) -> bool:
    if text.count("{") + text.count("[") <= allowed:
        return False  # cheap: too few brackets to nest that deep
    profile = _depth_profile(text)
    return bool(profile.size and profile.max() > allowed)


def _loads(text: str) -> Any:
    """Parse one JSON value whose size and nesting were checked, refusing numbers that are no
    finite double (NaN, 1e999, 400 digits) and lone surrogates (itlr.json_values)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > LIMITS.max_document_bytes:
        raise NotADocument(too_large("this line", size))
    if _nested_too_deep(text, LIMITS.max_depth):
        raise NotADocument(too_deep("this line"))
    try:
        return json_values.loads(text)
    except json_values.BadValue as bad:
        raise NotADocument(f"field {bad}" if bad.path else bad.reason) from None


def json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) for each non-blank line of a JSON-lines file; the first
    line that is not UTF-8 JSON is an error."""
    for number, line in _decoded_lines(path):
        if isinstance(line, BadLine):
            raise ConfigurationError(str(line))
        if not line.strip():
            continue
        try:
            yield number, _loads(line)
        except json.JSONDecodeError as bad:
            raise ConfigurationError(f"{path}:{number}: not valid JSON ({bad.msg})") from None
        except NotADocument as bad:
            raise ConfigurationError(f"{path}:{number}: {bad}") from None


def read_jsonl(path: Path) -> Iterator[Document]:
    """Documents of a trusted JSON-lines file (bundled data, BEIR corpora): a bad line is an
    error. BEIR convention: a title is joined to the text, as the benchmark's baselines embed
    it."""
    for number, record in json_records(path):
        try:
            document = record_document(record)
        except NotADocument as bad:
            raise ConfigurationError(f"{path}:{number}: {bad}") from None
        title = document.fields.get("title")
        if isinstance(title, str) and title.strip():
            fields = {k: v for k, v in document.fields.items() if k != "title"}
            yield Document(document.id, f"{title.strip()}. {document.text}", fields)
        else:
            yield document


# What one parsed entry of an input file asks for (itlr.changes), or a line that is not one.
_Entry = Change | BadLine


@dataclass(frozen=True)
class Reading:
    """How records become changes: the id and text keys, and whether each is a partial update
    (`--merge`: `_bulk` `update` semantics)."""

    keys: Fields
    merge: bool = False

    def change(self, record: Any, path: str, line: int) -> Change:
        """A record as a document, or under `merge` an update (with a text) or a patch of its
        fields (without one); NotADocument says why it is neither."""
        if not self.merge:
            return record_document(record, self.keys)
        if isinstance(record, dict) and not any(
            isinstance(record.get(k), str) for k in self.keys.text_keys
        ):
            doc_id = next(
                (i for i in (document_id(record.get(k)) for k in self.keys.id_keys) if i), None
            )
            if doc_id is None:
                raise NotADocument(
                    f"no id: each document needs an id ({'/'.join(self.keys.id_keys)}); got "
                    f"keys {sorted(record)}"
                )
            used = self.keys.id_keys if self.keys.id_field else ID_KEYS
            fields = {k: v for k, v in record.items() if k not in used}
            check_value(fields, f"document {doc_id!r}")
            return Patch(doc_id, fields, path, line)
        return Update(record_document(record, self.keys))


def _parsed_lines(path: Path, opened: Opened | None) -> Iterator[tuple[int, Any | BadLine]]:
    for number, line in _decoded_lines(path, opened):
        if isinstance(line, BadLine):
            yield number, line
            continue
        if not line.strip():
            continue
        try:
            yield number, _loads(line)
        except json.JSONDecodeError as bad:
            yield (
                number,
                BadLine(str(path), number, f"not valid JSON ({bad.msg}, column {bad.colno})"),
            )
        except NotADocument as bad:
            yield number, BadLine(str(path), number, str(bad))


def _bulk_action(record: Any) -> tuple[str, dict[str, Any]] | None:
    """(action, metadata) when the record is a `_bulk` action line."""
    if isinstance(record, dict) and len(record) == 1:
        ((action, meta),) = record.items()
        if action in BULK_ACTIONS and isinstance(meta, dict):
            return action, meta
    return None


class _Pushback:
    """An iterator of parsed lines that can take one back (the line after an action that
    turned out to be the next action, not its document)."""

    def __init__(self, lines: Iterator[tuple[int, Any]]) -> None:
        self._lines = lines
        self._back: list[tuple[int, Any]] = []

    def __iter__(self) -> _Pushback:
        return self

    def __next__(self) -> tuple[int, Any]:
        return self._back.pop() if self._back else next(self._lines)

    def push(self, item: tuple[int, Any]) -> None:
        self._back.append(item)


def _jsonl_entries(path: Path, reading: Reading, opened: Opened | None) -> Iterator[_Entry]:
    """JSON lines, or `_bulk` NDJSON when an action line is among the first records."""
    parsed = _parsed_lines(path, opened)
    window = list(islice(parsed, _BULK_WINDOW))
    bulk = any(_bulk_action(record) is not None for _, record in window)
    lines = _Pushback(chain(window, parsed))
    if not bulk:
        for number, record in lines:
            if isinstance(record, BadLine):
                yield record
                continue
            try:
                yield reading.change(record, str(path), number)
            except NotADocument as bad:
                yield BadLine(str(path), number, str(bad))
        return
    damaged: int | None = None  # the line of the last action line that was not JSON
    for number, record in lines:
        if isinstance(record, BadLine):
            damaged = number
            yield record
            continue
        action = _bulk_action(record)
        if action is None:
            after = (
                f"its action line {damaged} is damaged, so its id is lost: fix line {damaged}"
                if damaged == number - 1
                else 'a _bulk file alternates action lines ({"index": {"_id": ...}}) and '
                "documents: this line is not an action"
            )
            yield BadLine(str(path), number, after)
            continue
        damaged = None
        yield from _bulk_entry(path, number, action, lines, reading)


def _bulk_entry(
    path: Path,
    number: int,
    action: tuple[str, dict[str, Any]],
    lines: _Pushback,
    reading: Reading,
) -> Iterator[_Entry]:
    keys = reading.keys
    kind, meta = action
    try:
        doc_id = document_id(meta.get("_id"))
    except NotADocument as bad:
        doc_id, reason = None, str(bad)
    else:
        reason = f'the {kind} action has no "_id": itlr needs an id per document'
    if kind == "delete":
        yield Delete(doc_id) if doc_id else BadLine(str(path), number, reason)
        return
    source_number, source = next(lines, (number + 1, None))
    if isinstance(source, BadLine):
        yield source
        return
    if _bulk_action(source) is not None:
        # The next action, not this one's document: this action alone is lost.
        lines.push((source_number, source))
        yield BadLine(
            str(path),
            number,
            f"the {kind} action is not followed by a document (the next line is another action)",
        )
        return
    if doc_id is None:
        yield BadLine(str(path), number, reason)
        return
    if kind == "update":
        if not isinstance(source, dict) or not isinstance(source.get("doc"), dict):
            yield BadLine(
                str(path), source_number, 'an update line carries {"doc": {...}}: not found'
            )
            return
        source = source["doc"]
    if not isinstance(source, dict):
        yield BadLine(str(path), source_number, f"the {kind} action is not followed by a document")
        return
    # The action line's _id wins over any id inside the document.
    record = {k: v for k, v in source.items() if k not in keys.id_keys}
    own_id = next(((k, source[k]) for k in keys.id_keys if k in source), None)
    id_key = keys.id_field or "_id"
    partial = kind == "update" or reading.merge
    if partial and not any(isinstance(record.get(k), str) for k in keys.text_keys):
        # A partial update of fields only: it patches the document before it.
        try:
            check_value(record, f"document {doc_id!r}")
        except NotADocument as bad:
            yield BadLine(str(path), source_number, str(bad))
            return
        yield Patch(doc_id, record, str(path), source_number)
        return
    try:
        document = record_document({**record, id_key: doc_id}, keys)
    except NotADocument as bad:
        yield BadLine(str(path), source_number, str(bad))
        return
    # The id field the document itself carried (the action's _id is the id).
    document = replace(document, id_source=own_id)
    yield Update(document) if partial else document


def _array_entries(path: Path, reading: Reading, opened: Opened | None) -> Iterator[_Entry]:
    """A JSON array of documents, read element by element (itlr.json_array): each is checked
    and parsed on its own, so a bad or too deep element costs itself only."""
    with open(path, "rb") as handle:
        if opened is not None:
            opened(handle)
        for number, element, problem in ArrayElements(handle, LIMITS.max_document_bytes):
            if element is None:
                yield BadLine(str(path), number, problem or "not a document")
                continue
            if not _encodable(element):
                yield BadLine(str(path), number, "not UTF-8 text: save the file as UTF-8")
                continue
            try:
                yield reading.change(_loads(element), str(path), number)
            except json.JSONDecodeError as bad:
                yield BadLine(str(path), number, f"not valid JSON ({bad.msg})")
            except NotADocument as bad:
                yield BadLine(str(path), number, str(bad))


def _is_array_file(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(4096).decode("utf-8", errors="replace").removeprefix(BOM)
    return head.lstrip().startswith("[")


def _csv_document_entries(
    path: Path, reading: Reading, types: Mapping[str, str], opened: Opened | None
) -> Iterator[_Entry]:
    def make(record: dict[str, Any], number: int) -> Change:
        return reading.change(record, str(path), number)

    for number, found in csv_entries(path, reading.keys, types, opened, make):
        yield BadLine(str(path), number, found) if isinstance(found, str) else found


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _entries(
    source: str | Path, reading: Reading, types: Mapping[str, str], opened: Opened | None
) -> Iterator[_Entry]:
    """The entries of a file or BEIR folder, in order, read lazily; what makes the whole
    source unreadable (no such file, an unknown suffix) is refused here, before any read."""
    path = Path(source)
    if types and path.suffix.lower() != ".csv":
        raise ConfigurationError("--types applies to CSV files; JSON values carry their types")
    if path.is_dir():
        corpus = path / "corpus.jsonl"
        if not corpus.exists():
            raise ConfigurationError(f"{path} is a folder without corpus.jsonl: not a BEIR folder")
        return _jsonl_entries(corpus, reading, opened)
    if not path.exists():
        raise ConfigurationError(f"no such file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv_document_entries(path, reading, types, opened)
    if suffix == ".json" and _is_array_file(path):
        return _array_entries(path, reading, opened)
    if suffix in (".jsonl", ".ndjson", ".json"):
        return _jsonl_entries(path, reading, opened)
    raise ConfigurationError(
        f"{path}: expected a .jsonl / .ndjson (JSON lines or _bulk), .json (array or lines) "
        "or .csv file, or a BEIR folder"
    )


class DocumentStream:
    """The entries of a file (documents, updates, patches, deletions and the lines that are not
    documents) read lazily, in the file's order: memory holds one entry at a time whatever the
    file's size. With `merge` every document is an update of the stored one (its fields
    merge in) and a record without a text a patch of its fields. `duplicates` counts the entries whose id came before in the file; `position`
    and `size` are the bytes read and the file's bytes (for progress). Each iteration reads the
    file again from its start."""

    def __init__(
        self,
        source: str | Path,
        *,
        id_field: str | None = None,
        text_field: str | None = None,
        types: Mapping[str, str] | None = None,
        merge: bool = False,
    ) -> None:
        self.source = Path(source)
        self._reading = Reading(Fields(id_field, text_field), merge)
        self._types = dict(types or {})
        self.duplicates = 0
        self._handle: IO[bytes] | None = None
        # Refuse now what makes the whole file unreadable (no such file, a suffix, --types).
        _entries(self.source, self._reading, self._types, None)  # not started: nothing opened

    @property
    def size(self) -> int:
        path = self.source / "corpus.jsonl" if self.source.is_dir() else self.source
        return path.stat().st_size

    @property
    def position(self) -> int:
        handle = self._handle
        if handle is None:
            return 0
        try:
            return handle.tell()
        except (OSError, ValueError):  # closed: read to the end
            return self.size

    def _opened(self, handle: IO[bytes]) -> None:
        self._handle = handle

    def __iter__(self) -> Iterator[_Entry]:
        self.duplicates = 0
        seen = SeenIds()
        for entry in _entries(self.source, self._reading, self._types, self._opened):
            if not isinstance(entry, BadLine | Delete) and seen.add(entry.id):
                self.duplicates += 1
            yield entry


def read_documents(
    source: str | Path,
    *,
    id_field: str | None = None,
    text_field: str | None = None,
    types: Mapping[str, str] | None = None,
) -> DocumentFile:
    """Documents from a JSON-lines / `_bulk` NDJSON file (.jsonl, .ndjson, .json), a JSON array
    (.json), a .csv file, or a BEIR folder (corpus.jsonl), with the lines that are not
    documents, the ids to delete and the count of repeated ids (module docstring), held whole:
    the file's entries combined by id. `DocumentStream` reads a file of any size instead, and
    ingestion (`itlr ingest`) applies its `_bulk` updates to the stored documents."""
    reading = Reading(Fields(id_field, text_field))
    return _collect(_entries(source, reading, dict(types or {}), None))


def _collect(entries: Iterator[_Entry]) -> DocumentFile:
    by_id: dict[str, Change] = {}
    deleted: dict[str, None] = {}
    bad_lines: list[BadLine] = []
    duplicates = 0
    for entry in entries:
        if isinstance(entry, BadLine):
            bad_lines.append(entry)
            continue
        earlier: Change | None = by_id.get(entry.id)
        if earlier is None and entry.id in deleted:
            earlier = Delete(entry.id)
        combined = combine(earlier, entry)
        if isinstance(combined, Delete):
            by_id.pop(entry.id, None)
            deleted[entry.id] = None
            continue
        deleted.pop(entry.id, None)
        if combined is None:  # a patch of a deleted id
            assert isinstance(entry, Patch)
            bad_lines.append(_orphan(entry))
            continue
        duplicates += isinstance(earlier, Document | Update | Patch)
        by_id[entry.id] = combined
    documents = []
    for change in by_id.values():
        if isinstance(change, Patch):  # nothing in the file to patch
            bad_lines.append(_orphan(change))
        elif isinstance(change, Update):  # nothing in the file to merge into
            documents.append(change.document)
        elif isinstance(change, Document):
            documents.append(change)
    bad_lines.sort(key=lambda b: b.line)
    return DocumentFile(documents, bad_lines, duplicates, list(deleted))


def _orphan(patch: Patch) -> BadLine:
    return BadLine(
        patch.path,
        patch.line,
        f"update of {patch.id!r} without a text and no earlier copy in this file: itlr "
        "re-embeds whole documents, give the text",
    )
