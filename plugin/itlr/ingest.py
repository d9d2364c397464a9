"""Documents -> embeddings -> an engine, in batches, as upserts: resumable and re-runnable.

Each document is compared with what the index holds under its id by content hash
(itlr.fingerprint: model + text) and fields, never by vector: new ids are embedded and added, a
changed text is embedded again and replaces the stored document, a change of fields only
replaces it with the stored vector (no encoder call), and an unchanged document is skipped.
Updates and patches (itlr.changes) merge into the stored document first; deletions are applied
in their place in the input.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from itertools import islice
from typing import Any, TypeVar

import numpy as np

from itlr.changes import Change, Delete, Patch, Update, combine, merged
from itlr.engines import Backend, StoredState
from itlr.records import Document
from itlr.transform import ItlrFields, TextEncoder, passage_vectors
from itlr.write_report import WriteReport

T = TypeVar("T")


def writer_session(backend: Backend) -> contextlib.AbstractContextManager[object]:
    """Be the backend's only writer for a whole run, if it has writers to exclude.

    The embedded engine allows one writer at a time: holding its lock for the run refuses a
    second ingestion up front instead of interleaving its batches with this one. Clusters
    handle concurrent writers themselves.
    """
    return backend.writing()


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items (the last one shorter), read lazily."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def ingest(
    documents: Iterable[Change],
    backend: Backend,
    embedder: TextEncoder,
    batch_size: int = 64,
    resume: bool = True,
    on_batch: Callable[[int], None] | None = None,
    id_field: str | None = None,
) -> WriteReport:
    """Embed and store documents as upserts (module docstring), applying updates, patches and
    deletions (itlr.changes) in the order given. Without resume every document is embedded and
    written again.

    `documents` is read lazily, `batch_size` entries at a time, so a stream of any length (a
    file read by itlr.documents.DocumentStream) costs the memory of a few batches. The entries
    of one batch that share an id combine as `_bulk` applies them (itlr.changes.combine); an
    update or a patch merges into the document the index holds (written by an earlier batch,
    or before the run); a patch of an id the index does not hold is a failed document.

    The engine writes one batch while the encoder works on the next, so that a cluster's bulk
    round trips hide behind encoding instead of adding to it. At most one batch is in flight;
    an engine error surfaces at the latest when the next batch is handed over.

    Into a cluster index itlr did not make, documents keep their shape (their fields at the top,
    the id in `_id`, and as a field only where the index maps the key it was read from or
    `id_field` names it); itlr's fields are mapped before the first document is embedded, and a
    replace that would drop a stored document's fields is refused before anything is written
    when `documents` is a sequence of documents (before its batch is written when it is a
    stream).
    """
    report = WriteReport()
    with (
        writer_session(backend),
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="itlr-ingest") as writer,
    ):
        pending: Future[None] | None = None
        in_flight: set[str] = set()

        def write(
            todo: list[Document], vectors: np.ndarray | None, new: set[str], deletions: list[str]
        ) -> None:
            if todo and vectors is not None:
                started = time.perf_counter()
                failures = backend.add(
                    [d.id for d in todo], [d.text for d in todo], vectors, [d.fields for d in todo]
                )
                report.index_seconds += time.perf_counter() - started
                failures = failures or {}
                report.failed.update(failures)
                written = [d.id for d in todo if d.id not in failures]
                report.added += sum(1 for i in written if i in new)
                report.updated += sum(1 for i in written if i not in new)
            if deletions:
                report.deleted += backend.delete(deletions)

        backend.prepare_writes()  # a foreign index: its mapping is ready, or refused, first
        shaped = bool(backend.foreign)
        if shaped and isinstance(documents, Sequence):
            # Every document checked before the first is written (one read of each stored
            # document's fields, without its vector).
            whole = [d for d in documents if isinstance(d, Document)]
            for batch in batched(whole, batch_size):
                _refuse_lost_fields([_with_id_field(d, backend, id_field) for d in batch], backend)
        for entries in batched(documents, batch_size):
            changes = _combined(entries, report)
            if pending is not None and in_flight & set(changes):
                pending.result()  # compare with the copy being written, once it is stored
                pending = None
            batch, given = _resolved(list(changes.values()), backend, report)
            deletions = [c.id for c in changes.values() if isinstance(c, Delete)]
            if shaped:
                batch = [_with_id_field(d, backend, id_field) for d in batch]
            stored, embed, reuse = _plan(batch, given, backend, resume or shaped)
            if not resume:
                embed, reuse = batch, []
            report.unchanged += len(batch) - len(embed) - len(reuse)
            todo = embed + reuse
            vectors = None
            if todo:
                parts = []
                if embed:
                    fresh, seconds = passage_vectors(embedder, [d.text for d in embed])
                    report.encode_seconds += seconds
                    parts.append(fresh)
                if reuse:
                    parts.append(backend.stored_vectors([d.id for d in reuse]))
                vectors = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if todo or deletions:
                if pending is not None:
                    pending.result()
                new = {d.id for d in todo if d.id not in stored}
                pending = writer.submit(write, todo, vectors, new, deletions)
                in_flight = {d.id for d in todo} | set(deletions)
            if on_batch:
                on_batch(len(entries))
        if pending is not None:
            pending.result()
    return report


def _combined(entries: list[Change], report: WriteReport) -> dict[str, Change]:
    """One change per id of a batch: its entries combined in order (itlr.changes.combine)."""
    changes: dict[str, Change] = {}
    for entry in entries:
        combined = combine(changes.get(entry.id), entry)
        if combined is None:  # a patch after a deletion
            report.failed[entry.id] = _no_document(entry.id)
            continue
        changes[entry.id] = combined
    return changes


def _resolved(
    changes: list[Change], backend: Backend, report: WriteReport
) -> tuple[list[Document], dict[str, set[str]]]:
    """The whole documents of a batch: an update's or a patch's fields merged into the
    document the index holds (an update of an id it lacks is the document as given); and, for
    each merged one, the fields its update gave (the others are the stored document's)."""
    partial = [c.id for c in changes if isinstance(c, Update | Patch)]
    stored = backend.stored_documents(partial) if partial else {}
    documents = []
    given: dict[str, set[str]] = {}
    for change in changes:
        if isinstance(change, Document):
            documents.append(change)
        elif isinstance(change, Update):
            held = stored.get(change.id)
            documents.append(merged(held[1], change.document) if held else change.document)
            given[change.id] = set(change.document.fields)
        elif isinstance(change, Patch):
            held = stored.get(change.id)
            if held is None:
                report.failed[change.id] = _no_document(change.id)
                continue
            text, fields = held
            documents.append(Document(change.id, text, {**fields, **change.fields}))
            given[change.id] = set(change.fields)
    return documents, given


def _no_document(doc_id: str) -> str:
    return (
        f"an update without a text, and the index holds no document {doc_id!r} to apply it "
        "to: give the whole document (its text too)"
    )


def _refuse_lost_fields(batch: list[Document], backend: Backend) -> None:
    _plan(batch, {}, backend, compare=True)


def _plan(
    batch: list[Document], given: Mapping[str, set[str]], backend: Backend, compare: bool
) -> tuple[StoredState, list[Document], list[Document]]:
    """(what the index holds of the batch's ids, the documents to embed, those whose fields
    only changed); a replace that would drop a stored document's fields refused first. Without
    `compare` nothing is read and every document is new."""
    stored = backend.fingerprints([d.id for d in batch]) if compare else {}
    # A stored document's new fields as the index will hold them (its ingest pipelines run).
    present = [d for d in batch if d.id in stored]
    written = dict(zip([d.id for d in present], backend.written_fields(present), strict=True))
    embed, reuse = _changes(batch, stored, backend.model, written, given)
    backend.check_replacements({d.id: written.get(d.id, d.fields) for d in embed + reuse}, stored)
    return stored, embed, reuse


def _with_id_field(document: Document, backend: Backend, named: str | None) -> Document:
    """A document for an index itlr did not make: the key its id was read from stays one of
    its fields where the index maps that key or the caller named it, as it was given."""
    if document.id_source is None:
        return document
    key, value = document.id_source
    if key != named and key not in backend.top_fields:
        return document
    return replace(document, fields={**document.fields, key: value})


def _changes(
    batch: list[Document],
    stored: StoredState,
    model: str,
    written: Mapping[str, dict[str, Any]] | None = None,
    given: Mapping[str, set[str]] | None = None,
) -> tuple[list[Document], list[Document]]:
    """(documents to embed: new, changed text, or stored without a hash; documents whose fields
    only changed, which keep their stored vector). `written` holds a stored document's fields
    as the index will hold them (its ingest pipelines applied), `given` the fields an update
    gave (default: all of the document's)."""
    embed, reuse = [], []
    written, given, hashed = written or {}, given or {}, ItlrFields(model)
    for document in batch:
        if document.id not in stored:
            embed.append(document)
            continue
        digest, fields = stored[document.id]
        if digest is None:
            continue
        if digest != hashed.digest(document.text):
            embed.append(document)
            continue
        new = written.get(document.id, document.fields)
        if not same_fields(fields, given.get(document.id, set(document.fields)), new):
            reuse.append(document)
    return embed, reuse


def same_fields(stored: dict[str, Any], given: set[str], written: dict[str, Any]) -> bool:
    """Whether a write whose document gave the fields `given`, and which the index will hold
    as `written` (its ingest pipelines run), leaves the stored fields as they are: every given
    field holds the same value as written (a field the pipelines transform compares
    transformed) and no stored field is missing. A field only the pipelines set (a time stamp)
    or an update carried over from the stored document is not the input's to change."""
    return stored.keys() <= written.keys() and all(stored.get(k) == written.get(k) for k in given)


def delete(ids: Iterable[str], backend: Backend) -> WriteReport:
    """Delete documents by id; the report counts those that existed."""
    wanted = list(dict.fromkeys(str(i) for i in ids))
    report = WriteReport()
    with writer_session(backend):
        for start in range(0, len(wanted), 500):
            report.deleted += backend.delete(wanted[start : start + 500])
    return report
