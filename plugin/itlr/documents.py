"""Reading documents to ingest: JSON lines, Elasticsearch `_bulk` NDJSON, a JSON array, CSV,
or a BEIR folder.

Rules, the same for every format and engine:
  - ids are strings: a JSON number id becomes its decimal text, so `1` and `"1"` are one
    document; other id types (floats, booleans, lists, objects) are refused;
  - the id and the text are read from `id_field` / `text_field` when given, else from the first
    of ID_KEYS / TEXT_KEYS present; the text is stored as given (a `title` stays its own field;
    only the BEIR loader `read_jsonl` joins title and text, as BEIR's baselines do);
  - an id given more than once in a file: the last copy wins, and the copies are counted; a
    `_bulk` `delete` of an id drops its earlier copies and asks the index to delete it;
  - a line that cannot be a document (undecodable bytes, not JSON, not an object, no id, empty
    or whitespace-only text, JSON nested deeper than `LIMITS.max_depth`, a NaN / Infinity
    number, text that is not valid Unicode) is reported with file, line number and reason, and
    the other documents are kept (`read_documents`); bundled data is read strictly
    (`read_jsonl`), where a bad line is an error;
  - nesting is measured on the raw text before any JSON parsing, so a line nested 100,000 deep
    costs one linear scan, never a recursion;
  - CSV cells are typed per column: a column whose every non-empty cell is an integer becomes
    int, else float, else a boolean (true/false); `types` forces a column's type; an empty cell
    is no value;
  - a byte-order mark at the start of a file is ignored.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from itlr import json_values
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

# Re-exported: callers read documents through itlr.documents.
from itlr.records import Document as Document
from itlr.records import (
    Fields,
    NotADocument,
    check_value,
    document_id,
    record_document,
    too_deep,
    too_large,
)

BOM = "\ufeff"
BULK_ACTIONS = ("index", "create", "update", "delete")
CSV_TYPES = ("int", "float", "bool", "str")


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


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | BadLine]]:
    """(line number, text) per line, or a BadLine for a line that is not UTF-8."""
    with open(path, "rb") as handle:
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


def _refuse_constant(name: str) -> Any:
    raise NotADocument(
        f"a value is {name}, which JSON cannot carry: write a finite number or leave the field out"
    )


def _finite_float(text: str) -> float:  # a CSV cell
    value = float(text)
    if not math.isfinite(value):
        _refuse_constant(text)
    return value


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


# What one parsed entry of an input file asks for: a document, an id to delete, a bad line.
_Entry = Document | BadLine | tuple[Any, ...]


def _parsed_lines(path: Path) -> Iterator[tuple[int, Any | BadLine]]:
    for number, line in _decoded_lines(path):
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


def _jsonl_entries(path: Path, keys: Fields) -> Iterator[_Entry]:
    """JSON lines, or `_bulk` NDJSON when the first record is an action line."""
    lines = _parsed_lines(path)
    bulk: bool | None = None
    for number, record in lines:
        if isinstance(record, BadLine):
            yield record
            continue
        action = _bulk_action(record)
        if bulk is None:
            bulk = action is not None
        if not bulk:
            try:
                yield record_document(record, keys)
            except NotADocument as bad:
                yield BadLine(str(path), number, str(bad))
            continue
        if action is None:
            yield BadLine(
                str(path),
                number,
                'a _bulk file alternates action lines ({"index": {"_id": ...}}) and '
                "documents: this line is not an action",
            )
            continue
        yield from _bulk_entry(path, number, action, lines, keys)


def _bulk_entry(
    path: Path,
    number: int,
    action: tuple[str, dict[str, Any]],
    lines: Iterator[tuple[int, Any]],
    keys: Fields,
) -> Iterator[_Entry]:
    kind, meta = action
    try:
        doc_id = document_id(meta.get("_id"))
    except NotADocument as bad:
        doc_id, reason = None, str(bad)
    else:
        reason = f'the {kind} action has no "_id": itlr needs an id per document'
    if kind == "delete":
        yield ("delete", doc_id) if doc_id else BadLine(str(path), number, reason)
        return
    source_number, source = next(lines, (number + 1, None))
    if isinstance(source, BadLine):
        yield source
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
    if kind == "update" and not any(isinstance(record.get(k), str) for k in keys.text_keys):
        # A partial update of fields only: it can patch a copy earlier in this file.
        try:
            check_value(record, f"document {doc_id!r}")
        except NotADocument as bad:
            yield BadLine(str(path), source_number, str(bad))
            return
        orphan = BadLine(
            str(path),
            source_number,
            f"update of {doc_id!r} without a text ({'/'.join(keys.text_keys)}) and no earlier "
            "copy in this file: itlr re-embeds whole documents, give the text",
        )
        yield ("patch", doc_id, record, orphan)
        return
    try:
        document = record_document({**record, id_key: doc_id}, keys)
    except NotADocument as bad:
        yield BadLine(str(path), source_number, str(bad))
        return
    # The id field the document itself carried (the action's _id is the id).
    document = replace(document, id_source=own_id)
    yield ("update", document) if kind == "update" else document


def _array_entries(path: Path, keys: Fields) -> Iterator[_Entry]:
    """A JSON array of documents: each element is checked and parsed on its own, so a bad or
    too deep element costs itself only."""
    text = path.read_bytes().decode("utf-8", errors="surrogateescape").removeprefix(BOM)
    if not _encodable(text):
        yield BadLine(str(path), 1, "not UTF-8 text: save the file as UTF-8")
        return
    profile = _depth_profile(text)
    blank = _STRING.sub(lambda m: " " * len(m.group()), text)
    opening = blank.find("[")
    closing = blank.rfind("]")
    if opening < 0 or closing < opening or profile[closing] != 0:
        yield BadLine(str(path), 1, "not a JSON array of documents (unbalanced brackets)")
        return
    # Element boundaries: commas at depth 1 of the outer array.
    commas = [i for i in range(opening + 1, closing) if blank[i] == "," and profile[i] == 1]
    starts = [opening + 1, *(c + 1 for c in commas)]
    ends = [*commas, closing]
    for start, end in zip(starts, ends, strict=True):
        element = text[start:end]
        if not element.strip():
            continue
        number = text.count("\n", 0, start + len(element) - len(element.lstrip())) + 1
        try:
            yield record_document(_loads(element), keys)
        except json.JSONDecodeError as bad:
            yield BadLine(str(path), number, f"not valid JSON ({bad.msg})")
        except NotADocument as bad:
            yield BadLine(str(path), number, str(bad))


def _is_array_file(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(4096).decode("utf-8", errors="replace").removeprefix(BOM)
    return head.lstrip().startswith("[")


def _csv_entries(path: Path, keys: Fields, types: Mapping[str, str]) -> Iterator[_Entry]:
    # surrogateescape keeps undecodable bytes as lone surrogates, found again per record, so a
    # bad byte costs its own row only; utf-8-sig drops a byte-order mark.
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    records: list[tuple[int, dict[str, Any]]] = []
    for record in reader:
        number = reader.line_num
        values = [*record.keys(), *(v for v in record.values() if isinstance(v, str))]
        if any(not _encodable(str(v)) for v in values):
            yield BadLine(str(path), number, "not UTF-8 text: save the file as UTF-8")
            continue
        # An empty cell is no value, so a typed column is not broken by gaps.
        records.append((number, {k: v for k, v in record.items() if v not in ("", None)}))
    unknown = set(types) - set(reader.fieldnames or ())
    if unknown:
        raise ConfigurationError(
            f"--types names {sorted(unknown)}, not columns of {path} "
            f"(its columns: {list(reader.fieldnames or ())})"
        )
    column_types = _column_types(records, types, keys)
    for number, record in records:
        try:
            typed = {k: _typed(v, column_types.get(k, "str"), k) for k, v in record.items()}
            yield record_document(typed, keys)
        except NotADocument as bad:
            yield BadLine(str(path), number, str(bad))


_BOOLEANS = {"true": True, "false": False}


def _parses(value: str, kind: str) -> bool:
    try:
        _typed(value, kind, "")
    except NotADocument:
        return False
    return True


def _column_types(
    records: list[tuple[int, dict[str, Any]]], forced: Mapping[str, str], keys: Fields
) -> dict[str, str]:
    """Each column's type: forced, else the narrowest of int, float, bool that every non-empty
    cell parses as; id and text columns stay text."""
    columns: dict[str, list[str]] = {}
    for _, record in records:
        for name, value in record.items():
            columns.setdefault(name, []).append(value)
    kept = {*keys.id_keys, *keys.text_keys}
    chosen = {}
    for name, values in columns.items():
        if name in forced:
            chosen[name] = forced[name]
        elif name not in kept:
            chosen[name] = next(
                (k for k in ("int", "float", "bool") if all(_parses(v, k) for v in values)),
                "str",
            )
    return chosen


def _typed(value: str, kind: str, name: str) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return _finite_float(value)
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


def read_documents(
    source: str | Path,
    *,
    id_field: str | None = None,
    text_field: str | None = None,
    types: Mapping[str, str] | None = None,
) -> DocumentFile:
    """Documents from a JSON-lines / `_bulk` NDJSON file (.jsonl, .ndjson, .json), a JSON array
    (.json), a .csv file, or a BEIR folder (corpus.jsonl), with the lines that are not
    documents, the ids to delete and the count of repeated ids (module docstring)."""
    path = Path(source)
    keys = Fields(id_field, text_field)
    types = dict(types or {})
    if types and path.suffix.lower() != ".csv":
        raise ConfigurationError("--types applies to CSV files; JSON values carry their types")
    if path.is_dir():
        corpus = path / "corpus.jsonl"
        if not corpus.exists():
            raise ConfigurationError(f"{path} is a folder without corpus.jsonl: not a BEIR folder")
        entries = _jsonl_entries(corpus, keys)
    elif not path.exists():
        raise ConfigurationError(f"no such file: {path}")
    elif path.suffix.lower() == ".csv":
        entries = _csv_entries(path, keys, types)
    elif path.suffix.lower() == ".json" and _is_array_file(path):
        entries = _array_entries(path, keys)
    elif path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        entries = _jsonl_entries(path, keys)
    else:
        raise ConfigurationError(
            f"{path}: expected a .jsonl / .ndjson (JSON lines or _bulk), .json (array or lines) "
            "or .csv file, or a BEIR folder"
        )
    return _collect(entries)


def _collect(entries: Iterator[_Entry]) -> DocumentFile:
    by_id: dict[str, Document] = {}
    deleted: dict[str, None] = {}
    bad_lines: list[BadLine] = []
    duplicates = 0
    earlier: Document | None  # the copy an update or a patch merges into, when there is one
    for entry in entries:
        if isinstance(entry, BadLine):
            bad_lines.append(entry)
        elif isinstance(entry, Document):
            duplicates += entry.id in by_id
            deleted.pop(entry.id, None)
            by_id[entry.id] = entry  # the last copy wins; the first copy's place is kept
        elif entry[0] == "patch":
            _, doc_id, patch, orphan = entry
            if doc_id in by_id:
                earlier = by_id[doc_id]
                duplicates += 1
                by_id[doc_id] = replace(earlier, fields={**earlier.fields, **patch})
            else:
                bad_lines.append(orphan)
        elif entry[0] == "delete":
            by_id.pop(entry[1], None)
            deleted[entry[1]] = None
        else:  # a _bulk update: its fields merge into this file's earlier copy, if any
            document: Document = entry[1]
            earlier = by_id.get(document.id)
            if earlier is not None:
                duplicates += 1
                document = replace(
                    document,
                    fields={**earlier.fields, **document.fields},
                    id_source=document.id_source or earlier.id_source,
                )
            deleted.pop(document.id, None)
            by_id[document.id] = document
    return DocumentFile(list(by_id.values()), bad_lines, duplicates, list(deleted))
