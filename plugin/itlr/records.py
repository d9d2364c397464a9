"""One record as a document: the id and text keys, and the checks every document passes
whatever it came from (a line of a file, a mapping given to `Index.add`, a Document built in
code): an id, a non-empty text, at most LIMITS.max_depth of nesting and
LIMITS.max_document_bytes of JSON, numbers that are finite doubles and text that is Unicode
(itlr.json_values). Reading files is itlr.documents."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from itlr import json_values
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

ID_KEYS = ("id", "_id", "doc_id", "docid")
TEXT_KEYS = ("text", "body", "content", "passage")


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    # The input key the id was read from and its value as given, e.g. ("id", 7): an index
    # itlr did not make keeps it as a field where its mapping has that field (itlr.ingest).
    id_source: tuple[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Fields:
    """Which input keys are read as the id and the text (None: the first of ID_KEYS /
    TEXT_KEYS present)."""

    id_field: str | None = None
    text_field: str | None = None

    @property
    def id_keys(self) -> tuple[str, ...]:
        return (self.id_field,) if self.id_field else ID_KEYS

    @property
    def text_keys(self) -> tuple[str, ...]:
        return (self.text_field,) if self.text_field else TEXT_KEYS


class NotADocument(ValueError):
    """Why one record cannot be a document (becomes a BadLine)."""


def document_id(value: Any) -> str | None:
    if isinstance(value, bool | float | list | dict):
        raise NotADocument(
            f"id {json.dumps(value)} is a {type(value).__name__}: ids are strings "
            "(or whole numbers, read as their decimal text)"
        )
    if value is None or value == "":
        return None
    return str(value)


def check_value(value: Any, where: str = "document") -> None:
    """Refuse what no engine can store or return as strict JSON: nesting deeper than
    LIMITS.max_depth, numbers that are no finite double, text that is not Unicode
    (itlr.json_values), more than LIMITS.max_document_bytes of JSON. Iterative, so depth itself
    cannot overflow."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > LIMITS.max_depth:
                raise NotADocument(too_deep(where))
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    found = json_values.problem(value)
    if found is not None:
        path, reason = found
        raise NotADocument(f"{where}{f' field {path}' if path else ''}: {reason}")
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > LIMITS.max_document_bytes:
        raise NotADocument(too_large(where, size))


def too_large(where: str, size: int) -> str:
    shown = f"{size:,} bytes" if size >= 0 else f"more than {LIMITS.max_document_bytes:,} bytes"
    return (
        f"{where} is {shown} of JSON; the limit is {LIMITS.max_document_bytes:,} "
        "(max_document_bytes, raise it with ITLR_MAX_DOCUMENT_BYTES): split it or drop fields"
    )


def too_deep(where: str) -> str:
    return (
        f"{where} is nested deeper than {LIMITS.max_depth} levels (ITLR_MAX_DEPTH): "
        "flatten its fields"
    )


def record_document(record: Any, keys: Fields = Fields()) -> Document:
    if not isinstance(record, dict):
        raise NotADocument(
            f"a document is a JSON object, this line is {_json_kind(record)}: "
            'write {"id": ..., "text": ...}'
        )
    id_key, doc_id = next(
        ((k, i) for k, i in ((k, document_id(record.get(k))) for k in keys.id_keys) if i),
        (None, None),
    )
    text_key = next((k for k in keys.text_keys if isinstance(record.get(k), str)), None)
    if doc_id is None or text_key is None:
        missing = "id" if doc_id is None else "text"
        raise NotADocument(
            f"no {missing}: each document needs an id ({'/'.join(keys.id_keys)}) and a "
            f"text ({'/'.join(keys.text_keys)}); got keys {sorted(record)}"
        )
    text = record[text_key]
    if not text.strip():
        raise NotADocument(
            f"document {doc_id!r} has an empty text ({text_key!r}): nothing to embed"
        )
    check_value(record, f"document {doc_id!r}")
    used = {*keys.id_keys, text_key} if keys.id_field else {*ID_KEYS, text_key}
    fields = {k: v for k, v in record.items() if k not in used}
    id_source = (id_key, record[id_key]) if id_key and id_key != "_id" else None
    return Document(doc_id, text, fields, id_source)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def check_document(document: Document, where: str) -> Document:
    """A Document built in code gets the same checks as a parsed line (one-line error)."""
    try:
        if not document.text.strip():
            raise NotADocument(f"document {document.id!r} has an empty text: nothing to embed")
        check_value(
            {"id": document.id, "text": document.text, "fields": document.fields},
            f"document {document.id!r}",
        )
    except NotADocument as bad:
        raise ConfigurationError(f"{where}: {bad}") from None
    return document
