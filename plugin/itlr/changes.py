"""What one entry of an input asks of an index, in the order the input gives them: a document
to upsert (itlr.records.Document), an update whose fields merge into the stored document (a
`_bulk` `update` with a text, or every document under `--merge`), a patch of fields only (a
`_bulk` `update` without a text), or a deletion.

Two entries for one id combine as `_bulk` applies them one after the other (`combine`), so
that a file read whole (itlr.documents.read_documents) and a file streamed in batches
(itlr.ingest) end with the same index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from itlr.records import Document


@dataclass(frozen=True)
class Update:
    """A document whose fields merge into the stored copy (stored fields it lacks are kept);
    its text replaces the stored text."""

    document: Document

    @property
    def id(self) -> str:
        return self.document.id


@dataclass(frozen=True)
class Patch:
    """Fields that merge into the stored document, which keeps its text (and so its vector).
    `path` and `line` name the input line, for the report when no document of that id exists."""

    id: str
    fields: dict[str, Any]
    path: str = ""
    line: int = 0


@dataclass(frozen=True)
class Delete:
    id: str


Change = Document | Update | Patch | Delete


def merged(stored_fields: dict[str, Any], document: Document) -> Document:
    """The document with the stored fields it lacks (an update's merge, `_bulk` `doc`
    semantics: top-level keys; the update's value wins)."""
    return replace(document, fields={**stored_fields, **document.fields})


def combine(earlier: Change | None, later: Change) -> Change | None:
    """What an id's two entries, applied in order, ask of the index; None when the later one
    cannot apply (a patch after a deletion: there is no document left to patch)."""
    if isinstance(later, Document | Delete) or earlier is None:
        return later
    if isinstance(earlier, Delete):
        # Nothing stored is left to merge into: an update is the whole document.
        return later.document if isinstance(later, Update) else None
    if isinstance(later, Update):
        base = earlier.fields if isinstance(earlier, Patch) else _document(earlier).fields
        document = replace(
            merged(base, later.document),
            id_source=later.document.id_source or _id_source(earlier),
        )
        return document if isinstance(earlier, Document) else Update(document)
    # A patch: the earlier entry's text stays.
    if isinstance(earlier, Patch):
        return replace(later, fields={**earlier.fields, **later.fields})
    document = _document(earlier)
    patched = replace(document, fields={**document.fields, **later.fields})
    return patched if isinstance(earlier, Document) else Update(patched)


def _document(change: Document | Update) -> Document:
    return change if isinstance(change, Document) else change.document


def _id_source(change: Change) -> tuple[str, Any] | None:
    if isinstance(change, Document | Update):
        return _document(change).id_source
    return None
