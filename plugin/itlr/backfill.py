"""Back-fill: give the documents already in a cluster index (made by anyone, not by itlr) a
vector of one of their text fields, written beside them with the content hash
(itlr.fingerprint) so that a re-run skips what is current and re-embeds what changed, and with
the text's token counts and length (itlr.lexical) that hybrid truth values read. Each document
goes through the one transform (itlr.transform) the follower uses too.

Before anything changes, a text field no document has and a vector field of another type or
dimension are refused in one line (`check_before_backfill`), and the documents are counted.

In place: the vector field is added to the mapping, then every document is read with a scan
and its vector written with bulk partial updates that name the `_seq_no` read (a document
rewritten meanwhile is left for the next run or the follower, never given its old text's
vector): scan -> transform -> bulk over the backend's cluster operations
(itlr.engines.operations), which alone know the engine. Where the engine cannot add the vector
field to the index (an OpenSearch index created without `index.knn: true`), `into` mirrors the
source into a copy created like it (itlr.into: never an index that is not itlr's copy of this
source) instead (every document, with its vector where it has a text; on a re-run changed
fields are copied and documents gone from the source deleted), and `alias` then points at the
new one. Keeping the vectors current afterwards: itlr.follow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from itlr.embed import Embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.cluster_reads import mapped_vector
from itlr.engines.factory import EngineSpec, remote_backend
from itlr.engines.foreign import add_itlr_fields as prepare_in_place
from itlr.engines.foreign import itlr_fields
from itlr.engines.layout import mapped_fields
from itlr.engines.operations import Refusal
from itlr.errors import ConfigurationError, IndexStateError
from itlr.fingerprint import HASH_FIELD
from itlr.hash_guard import check_hash_guard, install_hash_guard
from itlr.ingest import batched
from itlr.into import CopyPlan, copy_marker, create_copy, marker, plan_copy, record_source
from itlr.lexical import TOKEN_KEYS_FIELD, lexical_fields
from itlr.option_groups import BATCH_SIZE, BackfillOptions, EncoderOptions
from itlr.transform import DocumentTransform, in_place_update, text_of
from itlr.write_report import WriteCounts, WriteReport

__all__ = ["backfill", "backfill_spec", "check_before_backfill", "prepare_in_place", "text_of"]

# Mapping types whose values are text a back-fill can embed (named in a refusal's hint).
TEXT_TYPES = ("text", "match_only_text", "keyword", "wildcard")


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
    backend: ClusterBackend,
    index_name: str,
    properties: dict[str, Any],
    dims: int,
    model: str,
    required: bool = False,
) -> None:
    """A vector field already mapped must be of the engine's vector type and the model's
    dimension: anything else is refused before a mapping changes (or, `required`, before a
    vector is written: a field that is not mapped as a vector would be mapped by guess)."""
    field_name = backend.layout.vector_field
    vector = mapped_vector(properties, field_name)
    if vector is None:
        if required:
            raise IndexStateError(
                f"index {index_name!r} does not map {field_name!r} as {backend.vector_type}: "
                "refused before writing a vector into it (the engine would map it by guess)"
            )
        return
    if vector.kind != backend.vector_type:
        raise IndexStateError(
            f"index {index_name!r} already maps {field_name!r} as {vector.kind}, not "
            f"{backend.vector_type}: "
            "back-fill into another field with --vector-field NEW_FIELD"
        )
    if vector.dims is not None and vector.dims != dims:
        raise IndexStateError(
            f"index {index_name!r} field {field_name!r} holds {vector.dims}-dim vectors but model "
            f"{model!r} makes {dims}-dim ones: choose the matching --model or another --vector-field"
        )


def require_vector_field(backend: ClusterBackend, index: str, dims: int, model: str) -> None:
    """Right before vectors are written into `index`: its vector field is mapped as the
    engine's vector type of the model's dimension, or the write is refused in one line."""
    properties = backend.operations.mapping(index).get("properties", {})
    _check_vector_field(backend, index, properties, dims, model, required=True)


def check_before_backfill(
    backend: ClusterBackend,
    text_field: str,
    dims: int,
    model: str,
    plan: CopyPlan | None = None,
) -> int:
    """Refuse, in one line and before any mapping changes, a back-fill that cannot do what it
    is asked: a text field no document has, a vector field of another type or dimension (in
    the source or in the existing copy `plan` names). Returns how many documents the source
    holds."""
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
    if plan is not None and plan.copy is not None:
        target = plan.copy.mappings.get("properties", {})
        _check_vector_field(backend, plan.copy.name, target, dims, model)
    return total


def prepare_copy(
    backend: ClusterBackend, plan: CopyPlan, into: str, transform: DocumentTransform
) -> None:
    """Create the copy (itlr.into), or bring an existing copy of this source up to date: its
    missing itlr fields mapped, and the source's concrete index and uuid recorded again."""
    embedder = transform.embedder
    if plan.copy is None:
        create_copy(backend, backend.index_name, plan, into, embedder, transform.text_field)
        return
    mapped = plan.copy.mappings.get("properties", {})
    missing = {k: v for k, v in itlr_fields().items() if k not in mapped}
    if missing:
        backend.operations.put_mapping(into, missing)
    known = copy_marker(plan.copy) or {}
    if (known.get("source_index"), known.get("source_uuid")) != (
        plan.source.name,
        plan.source.uuid,
    ):
        # The source was recreated, or its alias moved: the copy now mirrors that index.
        recorded = marker(backend.index_name, plan.source, transform.text_field, embedder.name)
        record_source(backend.operations, into, recorded)


def copy_action(into: str, hit: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """The index action that makes the copy of `hit` hold `source`: the body passed whole (a
    field named like bulk metadata stays a field), the source's routing kept, and the copy's
    default pipeline skipped (the source's ran when the document was written there)."""
    action: dict[str, Any] = {
        "_op_type": "index",
        "_index": into,
        "_id": hit["_id"],
        "_source": source,
        "pipeline": "_none",
    }
    if hit.get("_routing") is not None:
        action["routing"] = hit["_routing"]
    return action


def copy_actions(
    batch: list[dict[str, Any]],
    copies: dict[str, dict[str, Any]],
    transform: DocumentTransform,
    into: str,
    report: WriteCounts,
    embedded: set[str],
) -> list[dict[str, Any]]:
    """What makes the copy equal the source for these source hits (`copies`: the copy's
    documents by id): a document without text copied without a vector; one whose text the
    copy's hash matches copied with its stored vector where its other fields changed; the
    rest embedded (their ids added to `embedded`)."""
    actions: list[dict[str, Any]] = []
    todo: list[tuple[dict[str, Any], dict[str, Any], str]] = []
    for hit in batch:
        source = hit.get("_source") or {}
        own = transform.stripped(source)
        text = transform.text(source)
        copied = copies.get(hit["_id"])
        if text is None:
            report.no_text += 1
            if copied != own:
                actions.append(copy_action(into, hit, own))
            continue
        if copied is not None and copied.get(HASH_FIELD) == transform.digest(text):
            report.unchanged += 1
            # The vector is current: the copy takes the source's other fields.
            kept = {k: copied[k] for k in transform.written_fields if k in copied}
            whole = {**own, **kept}
            if whole != copied:
                report.copied += 1
                actions.append(copy_action(into, hit, whole))
            continue
        todo.append((hit, own, text))
    for (hit, own, _), new in zip(todo, transform.embed([t for _, _, t in todo]), strict=True):
        actions.append(copy_action(into, hit, {**own, **new}))
        embedded.add(hit["_id"])
        report.embedded += 1
    return actions


def in_place_actions(
    batch: list[dict[str, Any]],
    transform: DocumentTransform,
    index: str,
    report: WriteCounts,
    embedded: set[str],
) -> list[dict[str, Any]]:
    """The partial updates that give these hits the vector of their current text: only the
    documents whose stored hash is not of their text are embedded (ids added to `embedded`);
    a current one back-filled before the token counts existed gets those alone. Each update
    names the `_seq_no` read."""
    actions: list[dict[str, Any]] = []
    todo: list[tuple[dict[str, Any], str]] = []
    for hit in batch:
        source = hit.get("_source") or {}
        text = transform.text(source)
        if text is None:
            report.no_text += 1
            continue
        if source.get(HASH_FIELD) == transform.digest(text):
            report.unchanged += 1
            if TOKEN_KEYS_FIELD not in source:
                # Back-filled before the lexical fields (or their keys) existed: the vector is
                # current, only the token counts are written.
                actions.append(conditional(in_place_update(index, hit, lexical_fields(text)), hit))
            continue
        todo.append((hit, text))
    for (hit, _), new in zip(todo, transform.embed([t for _, t in todo]), strict=True):
        actions.append(conditional(in_place_update(index, hit, new), hit))
        embedded.add(hit["_id"])
        report.embedded += 1
    return actions


def routing(hits: list[dict[str, Any]]) -> dict[str, str]:
    """The routing of the hits written with one, by id (for an mget that finds them)."""
    return {h["_id"]: str(h["_routing"]) for h in hits if h.get("_routing") is not None}


def conditional(action: dict[str, Any], hit: dict[str, Any]) -> dict[str, Any]:
    """`action`, written only if the document is still the version `hit` read."""
    if "_seq_no" in hit and "_primary_term" in hit:
        action["if_seq_no"] = hit["_seq_no"]
        action["if_primary_term"] = hit["_primary_term"]
    return action


def count_refusals(refused: dict[str, Refusal], embedded: set[str], report: WriteReport) -> None:
    """Refused writes into the report: a document changed or deleted since it was read is
    left for the next run (or the follower), the others failed; none of them was embedded."""
    for doc_id, refusal in refused.items():
        if doc_id in embedded:
            report.embedded -= 1
        if refusal.conflict or refusal.missing:
            report.changed_meanwhile += 1
        else:
            report.failed[doc_id] = refusal.reason


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
    exact_only: bool = False,
) -> WriteReport:
    """Embed `text_field` of every document of the backend's index and store the vectors.

    In place by default; with `into`, the source mirrored into that index (every document
    copied whole, those without text without a vector, those gone from the source deleted;
    refused before anything is written unless `into` is new or itlr's copy of this source),
    and with `alias`, the alias then names `into` alone. `on_total(n)` is told how many
    documents the index holds before anything changes, `on_batch(n)` of each n documents read.
    `exact_only`: in place, the vector field mapped without an ANN method (any OpenSearch
    index, `index.knn` or not; only exact searches read it).
    """
    started = time.perf_counter()
    operations = backend.operations
    transform = DocumentTransform(embedder, text_field, backend.layout.vector_field)
    plan = plan_copy(operations, backend.index_name, into, alias) if into else None
    total = check_before_backfill(backend, text_field, embedder.dims, embedder.name, plan)
    if on_total is not None:
        on_total(total)
    target = into or backend.index_name
    if into and plan is not None:
        prepare_copy(backend, plan, into, transform)
    else:
        prepare_in_place(backend, embedder.dims, embedder.name, exact_only=exact_only)
    require_vector_field(backend, target, embedder.dims, embedder.name)
    report = WriteReport("copy" if into else "backfill", target)
    fields = True if into else [text_field, HASH_FIELD, TOKEN_KEYS_FIELD]
    embedded: set[str] = set()

    def actions() -> Iterator[dict[str, Any]]:
        scanned = operations.scan(backend.index_name, fields, size=batch_size * 4, seq_no=not into)
        for batch in batched(scanned, batch_size):
            report.seen += len(batch)
            if into:
                copies = operations.mget(into, [h["_id"] for h in batch], routing=routing(batch))
                yield from copy_actions(batch, copies, transform, into, report, embedded)
            else:
                yield from in_place_actions(batch, transform, target, report, embedded)
            if on_batch is not None:
                on_batch(len(batch))

    refused = operations.bulk_refusals(actions(), target, chunk_size=batch_size)
    count_refusals(refused, embedded, report)
    report.encode_seconds = transform.encode_seconds
    if into:
        report.deleted = delete_gone(backend, into, batch_size * 16, report)
        operations.refresh(into)
        report.count = operations.count(into)
        if alias:
            operations.move_alias(alias, into)
    else:
        backend.refresh()  # and a count or coverage it remembers is counted again
    report.seconds = time.perf_counter() - started
    return report


def delete_gone(backend: ClusterBackend, into: str, batch: int, report: WriteReport) -> int:
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
            present = operations.mget(backend.index_name, ids, False, routing=routing(hits))
            for hit in hits:
                if hit["_id"] not in present:
                    sent += 1
                    action = {"_op_type": "delete", "_index": into, "_id": hit["_id"]}
                    if hit.get("_routing") is not None:
                        action["routing"] = hit["_routing"]
                    yield action

    failed = operations.bulk(gone(), into, chunk_size=500)
    report.failed.update(failed)
    return sent - len(failed)


def backfill_spec(
    spec: EngineSpec,
    encoding: EncoderOptions,
    options: BackfillOptions,
    *,
    on_batch: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> WriteReport:
    """Back-fill the index an EngineSpec names: its layout gives the text and vector fields.
    `options.install_pipeline`: first make itlr's hash guard the index's final pipeline
    (itlr.hash_guard). `encoding.passage_prompt` goes in front of each text (search with the
    matching `query_prompt`). `options.exact_only`: in place without an ANN method."""
    embedder = encoding.passage_embedder()
    backend = cluster_backend(spec, embedder)
    check_exact_only(backend, options.exact_only, options.into)
    if options.install_pipeline:
        if options.into:
            raise ConfigurationError(
                "--install-pipeline guards the index back-filled in place: not with --into"
            )
        prepare_guarded(
            backend,
            spec.layout.text_field,
            embedder,
            install_pipeline=True,
            exact_only=options.exact_only,
        )
    return backfill(
        backend,
        embedder,
        spec.layout.text_field,
        into=options.into,
        alias=options.alias,
        batch_size=options.batch_size,
        on_batch=on_batch,
        on_total=on_total,
        exact_only=options.exact_only,
    )


def check_exact_only(backend: ClusterBackend, exact_only: bool, into: str | None) -> None:
    """`exact_only` is for an OpenSearch index back-filled (or followed) in place."""
    if not exact_only:
        return
    if into:
        raise ConfigurationError(
            "--exact-only maps the vector in place, without ANN: not with --into (a copy gets "
            "index.knn and ANN)"
        )
    if backend.engine != "opensearch":
        raise ConfigurationError(
            "--exact-only is for OpenSearch indexes created without index.knn: Elasticsearch "
            "adds an ANN-indexed dense_vector field in place"
        )


def prepare_guarded(
    backend: ClusterBackend,
    text_field: str,
    embedder: Embedder,
    install_pipeline: bool,
    exact_only: bool = False,
) -> None:
    """The back-fill's checks and the in-place mapping, and with `install_pipeline` itlr's hash
    guard (itlr.hash_guard): another final pipeline refused before the mapping changes, the
    guard installed once `itlr_hash_was` is mapped."""
    check_before_backfill(backend, text_field, embedder.dims, embedder.name)
    if install_pipeline:
        check_hash_guard(backend)
    prepare_in_place(backend, embedder.dims, embedder.name, exact_only=exact_only)
    if install_pipeline:
        install_hash_guard(backend)


def cluster_backend(spec: EngineSpec, embedder: Embedder) -> ClusterBackend:
    backend = remote_backend(spec, embedder.name, embedder.dims)
    if not isinstance(backend, ClusterBackend):
        raise IndexStateError("back-fill works on a cluster index: give `url`")
    return backend
