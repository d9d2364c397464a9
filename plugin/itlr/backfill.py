"""Back-fill: give the documents already in a cluster index (made by anyone, not by itlr) a
vector of one of their text fields, written beside them with the content hash
(itlr.fingerprint) so that a re-run skips what is current and re-embeds what changed, and with
the text's token counts and length (itlr.lexical) that hybrid truth values read.

Before anything changes, a text field no document has and a vector field of another type or
dimension are refused in one line (`check_before_backfill`), and the documents are counted.

In place: the vector field is added to the mapping, then every document is read with a scan
and its vector written with bulk partial updates (429s backed off): scan -> transform -> bulk
over the backend's cluster operations (itlr.engines.operations), which alone know the engine.
Where the engine cannot add the vector field to the index (an OpenSearch index created without
`index.knn: true`), `into` mirrors the source into a new index with the right settings instead
(every document, with its vector where it has a text; on a re-run changed fields are copied
and documents gone from the source deleted), and `alias` then points at the new one. Keeping
the vectors current afterwards: itlr.follow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from itlr.embed import Embedder, get_embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.factory import EngineSpec, remote_backend
from itlr.engines.foreign import add_itlr_fields as prepare_in_place
from itlr.engines.foreign import itlr_fields as _itlr_fields
from itlr.engines.foreign import vector_mapping as _vector_mapping
from itlr.engines.layout import mapped_fields
from itlr.errors import ConfigurationError, IndexStateError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD, content_hash
from itlr.hash_guard import check_hash_guard, install_hash_guard
from itlr.ingest import batched
from itlr.lexical import (
    LEXICAL_FIELDS,
    TOKEN_KEYS_FIELD,
    lexical_fields,
)
from itlr.write_report import WriteReport

BATCH_SIZE = 64
# Mapping types whose values are text a back-fill can embed (named in a refusal's hint).
TEXT_TYPES = ("text", "match_only_text", "keyword", "wildcard")


def text_of(source: dict[str, Any], path: str) -> str | None:
    """A (dotted) field of _source as text; None where the document has none."""
    value: Any = source
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if isinstance(value, list):
        value = " ".join(str(v) for v in value if v is not None)
    return None if value is None or value == "" else str(value)


def prepare_into(backend: ClusterBackend, target: str, dims: int, model: str) -> None:
    """Create `target` with the source index's own fields plus the vector and hash fields."""
    operations = backend.operations
    if operations.exists(target):
        return  # a resumed run: the documents already copied are compared by hash
    properties = dict(operations.mapping(backend.index_name).get("properties", {}))
    properties[backend.layout.vector_field] = _vector_mapping(backend, dims, model)
    properties.update(_itlr_fields())
    settings = backend.dialect.mapping(dims, model)["settings"]
    operations.create_index(target, settings, {"properties": properties})


def itlr_written_fields(vector_field: str) -> tuple[str, ...]:
    """The fields back-fill writes beside a document's own (a copy strips them first)."""
    return (vector_field, HASH_FIELD, PREVIOUS_HASH_FIELD, *LEXICAL_FIELDS)


def _text_fields(properties: dict[str, Any], prefix: str = "") -> list[str]:
    names = []
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        if spec.get("type") in TEXT_TYPES:
            names.append(prefix + name)
        names += _text_fields(spec.get("properties", {}), f"{prefix}{name}.")
    return names


def _check_vector_field(
    backend: ClusterBackend, index_name: str, properties: dict[str, Any], dims: int, model: str
) -> None:
    """A vector field already mapped must be of the engine's vector type and the model's
    dimension: anything else is refused before a mapping changes."""
    field_name = backend.layout.vector_field
    vector = properties.get(field_name)
    if vector is None:
        return
    kind = vector.get("type", "object")
    if kind != backend.vector_type:
        raise IndexStateError(
            f"index {index_name!r} already maps {field_name!r} as {kind}, not {backend.vector_type}: "
            "back-fill into another field with --vector-field NEW_FIELD"
        )
    mapped = backend.mapped_dims(vector)
    if mapped is not None and int(mapped) != dims:
        raise IndexStateError(
            f"index {index_name!r} field {field_name!r} holds {mapped}-dim vectors but model "
            f"{model!r} makes {dims}-dim ones: choose the matching --model or another --vector-field"
        )


def check_before_backfill(
    backend: ClusterBackend, text_field: str, dims: int, model: str, into: str | None = None
) -> int:
    """Refuse, in one line and before any mapping changes, a back-fill that cannot do what it
    is asked: a text field no document has, a vector field of another type or dimension (in
    the source or in an existing `into`). Returns how many documents the source holds."""
    operations = backend.operations
    properties = operations.mapping(backend.index_name).get("properties", {})
    total = operations.count(backend.index_name)
    known = _text_fields(properties)
    hint = f" (its text fields: {', '.join(known[:10])})" if known else ""
    if text_field not in mapped_fields(properties):
        raise IndexStateError(
            f"index {backend.index_name!r} maps no field {text_field!r}: name the field that holds "
            f"the text with --text-field{hint}"
        )
    if total and not operations.count(backend.index_name, {"exists": {"field": text_field}}):
        raise IndexStateError(
            f"none of the {total} documents of {backend.index_name!r} has a value in "
            f"{text_field!r}: name the field that holds the text with --text-field{hint}"
        )
    _check_vector_field(backend, backend.index_name, properties, dims, model)
    if into is not None and operations.exists(into):
        target = operations.mapping(into).get("properties", {})
        _check_vector_field(backend, into, target, dims, model)
    return total


def _stripped(source: dict[str, Any], vector_field: str) -> dict[str, Any]:
    drop = itlr_written_fields(vector_field)
    return {k: v for k, v in source.items() if k not in drop}


def backfill(
    backend: ClusterBackend,
    embedder: Embedder,
    text_field: str,
    *,
    into: str | None = None,
    alias: str | None = None,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> WriteReport:
    """Embed `text_field` of every document of the backend's index and store the vectors.

    In place by default; with `into`, the source mirrored into that index (every document
    copied whole, those without text without a vector, those gone from the source deleted),
    and with `alias`, the alias then names `into` alone. `on_total(n)` is told how many
    documents the index holds before anything changes, `on_batch(n)` of each n documents read.
    """
    started = time.perf_counter()
    total = check_before_backfill(backend, text_field, embedder.dims, embedder.name, into)
    if on_total is not None:
        on_total(total)
    target = into or backend.index_name
    if into:
        prepare_into(backend, into, embedder.dims, embedder.name)
    else:
        prepare_in_place(backend, embedder.dims, embedder.name)
    report = WriteReport("copy" if into else "backfill", target)
    operations = backend.operations
    fields = True if into else [text_field, HASH_FIELD, TOKEN_KEYS_FIELD]
    vector_field = backend.layout.vector_field

    def copy(
        hit: dict[str, Any], source: dict[str, Any], copied: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The index action that makes the copy equal `source`, or None when it already does."""
        if copied == source:
            return None
        return {"_op_type": "index", "_index": into, "_id": hit["_id"], **source}

    def actions() -> Iterator[dict[str, Any]]:
        scanned = operations.scan(backend.index_name, fields, size=batch_size * 4)
        for batch in batched(scanned, batch_size):
            report.seen += len(batch)
            ids = [h["_id"] for h in batch]
            copies = operations.mget(into, ids) if into else {}
            todo: list[tuple[dict[str, Any], str, str]] = []
            for hit in batch:
                source = hit.get("_source") or {}
                text = text_of(source, text_field)
                copied = copies.get(hit["_id"])
                if text is None:
                    report.no_text += 1
                    if into:
                        action = copy(hit, _stripped(source, vector_field), copied)
                        if action is not None:
                            yield action
                    continue
                digest = content_hash(text, embedder.name)
                stored = (copied or {}).get(HASH_FIELD) if into else source.get(HASH_FIELD)
                if stored == digest:
                    report.unchanged += 1
                    if into:
                        # The vector is current: the copy takes the source's other fields.
                        assert copied is not None
                        kept = {
                            k: copied[k] for k in itlr_written_fields(vector_field) if k in copied
                        }
                        action = copy(hit, {**_stripped(source, vector_field), **kept}, copied)
                        if action is not None:
                            report.copied += 1
                            yield action
                    elif TOKEN_KEYS_FIELD not in source:
                        # Back-filled before the lexical fields (or their keys) existed: the
                        # vector is current, only the token counts are written.
                        yield {
                            "_op_type": "update",
                            "_index": target,
                            "_id": hit["_id"],
                            "doc": lexical_fields(text),
                        }
                    continue
                todo.append((hit, text, digest))
            if todo:
                encode_start = time.perf_counter()
                vectors = embedder.encode_passages([text for _, text, _ in todo])
                report.encode_seconds += time.perf_counter() - encode_start
                for (hit, text, digest), vector in zip(todo, vectors, strict=True):
                    new = {
                        vector_field: vector.tolist(),
                        HASH_FIELD: digest,
                        **lexical_fields(text),
                    }
                    if into:
                        source = {**_stripped(hit["_source"], vector_field), **new}
                        yield {"_op_type": "index", "_index": into, "_id": hit["_id"], **source}
                    else:
                        yield {
                            "_op_type": "update",
                            "_index": target,
                            "_id": hit["_id"],
                            "doc": new,
                        }
                    report.embedded += 1
            if on_batch is not None:
                on_batch(len(batch))

    report.failed.update(operations.bulk(actions(), target, chunk_size=batch_size))
    report.embedded -= len(report.failed)
    if into:
        report.deleted = _delete_gone(backend, into, batch_size * 16, report)
        operations.refresh(into)
        report.count = operations.count(into)
        if alias:
            operations.move_alias(alias, into)
    else:
        backend.refresh()  # and a count or coverage it remembers is counted again
    report.seconds = time.perf_counter() - started
    return report


def _delete_gone(backend: ClusterBackend, into: str, batch: int, report: WriteReport) -> int:
    """Delete from the copy every document the source no longer holds (deleted since the
    last run, or during this one): the copy's ids read once, asked of the source in batches,
    so memory stays bounded however large the index."""
    operations = backend.operations
    operations.refresh(into)
    sent = 0

    def gone() -> Iterator[dict[str, Any]]:
        nonlocal sent
        for hits in batched(operations.scan(into, False, size=batch), batch):
            ids = [hit["_id"] for hit in hits]
            present = operations.mget(backend.index_name, ids, False)
            for doc_id in ids:
                if doc_id not in present:
                    sent += 1
                    yield {"_op_type": "delete", "_index": into, "_id": doc_id}

    failed = operations.bulk(gone(), into, chunk_size=500)
    report.failed.update(failed)
    return sent - len(failed)


def backfill_spec(
    spec: EngineSpec,
    *,
    model: str | None = None,
    into: str | None = None,
    alias: str | None = None,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    install_pipeline: bool = False,
    encoder: str | None = None,
    encoder_url: str | None = None,
    passage_prompt: str | None = None,
) -> WriteReport:
    """Back-fill the index an EngineSpec names: its layout gives the text and vector fields.
    `install_pipeline`: first make itlr's hash guard the index's final pipeline
    (itlr.hash_guard). `passage_prompt` goes in front of each text (search with the matching
    `query_prompt`)."""
    embedder = passage_embedder(model, encoder, encoder_url, passage_prompt)
    backend = cluster_backend(spec, embedder)
    if install_pipeline:
        if into:
            raise ConfigurationError(
                "--install-pipeline guards the index back-filled in place: not with --into"
            )
        prepare_guarded(backend, spec.layout.text_field, embedder, install_pipeline=True)
    return backfill(
        backend,
        embedder,
        spec.layout.text_field,
        into=into,
        alias=alias,
        batch_size=batch_size,
        on_batch=on_batch,
        on_total=on_total,
    )


def prepare_guarded(
    backend: ClusterBackend, text_field: str, embedder: Embedder, install_pipeline: bool
) -> None:
    """The back-fill's checks and the in-place mapping, and with `install_pipeline` itlr's hash
    guard (itlr.hash_guard): another final pipeline refused before the mapping changes, the
    guard installed once `itlr_hash_was` is mapped."""
    check_before_backfill(backend, text_field, embedder.dims, embedder.name)
    if install_pipeline:
        check_hash_guard(backend)
    prepare_in_place(backend, embedder.dims, embedder.name)
    if install_pipeline:
        install_hash_guard(backend)


def passage_embedder(
    model: str | None, encoder: str | None, encoder_url: str | None, passage_prompt: str | None
) -> Embedder:
    """What a back-fill, and a follower after it, embeds texts with: the passage prompt in
    front, so both write the vectors a search with the matching query prompt expects."""
    return get_embedder(model, encoder, encoder_url).with_prompts("", passage_prompt or "")


def cluster_backend(spec: EngineSpec, embedder: Embedder) -> ClusterBackend:
    backend = remote_backend(spec, embedder.name, embedder.dims)
    if not isinstance(backend, ClusterBackend):
        raise IndexStateError("back-fill works on a cluster index: give `url`")
    return backend
