"""Back-fill: give the documents already in a cluster index (made by anyone, not by itlr) a
vector of one of their text fields, written beside them with the content hash
(itlr.fingerprint) so that a re-run skips what is current and re-embeds what changed, and with
the text's token counts and length (itlr.lexical) that hybrid truth values read.

In place: the vector field is added to the mapping, then every document is read with the
client's `helpers.scan` and its vector written with `helpers.streaming_bulk` partial updates
(429s backed off). Where OpenSearch cannot add a knn_vector field to the index (created without
`index.knn: true`), `into` copies every document with its vector into a new index with the right
settings instead, and `alias` then points at the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from itlr.embed import Embedder, get_embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.factory import EngineSpec, remote_backend
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import LENGTH_FIELD, TOKEN_KEYS_FIELD, TOKENS_FIELD, lexical_fields

BATCH_SIZE = 64


@dataclass
class BackfillReport:
    """What one back-fill run did; `encode_seconds` is the encoder's part of `seconds`."""

    index: str
    seen: int = 0
    embedded: int = 0
    skipped: int = 0
    no_text: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    encode_seconds: float = 0.0

    def summary(self) -> str:
        rate = self.embedded / self.seconds if self.seconds else 0.0
        line = (
            f"back-filled {self.index}: {self.embedded} embedded, {self.skipped} already current, "
            f"{self.no_text} without text, {len(self.failed)} failed of {self.seen} documents "
            f"in {self.seconds:.1f}s ({rate:,.1f} docs/s)"
        )
        if self.failed:
            first_id, reason = next(iter(self.failed.items()))
            line += f"; first failure {first_id}: {reason}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "seen": self.seen,
            "embedded": self.embedded,
            "skipped": self.skipped,
            "no_text": self.no_text,
            "failed": self.failed,
            "seconds": self.seconds,
            "encode_seconds": self.encode_seconds,
        }


def _text_of(source: dict[str, Any], path: str) -> str | None:
    """A (dotted) field of _source as text; None where the document has none."""
    value: Any = source
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if isinstance(value, list):
        value = " ".join(str(v) for v in value if v is not None)
    return None if value is None or value == "" else str(value)


def _vector_mapping(backend: ClusterBackend, dims: int, model: str) -> dict[str, Any]:
    body = backend.dialect.mapping(dims, model)
    return body["mappings"]["properties"][backend.layout.vector_field]


def _mapping(backend: ClusterBackend, index: str) -> dict[str, Any]:
    with backend._errors():
        answer = dict(backend.client.indices.get_mapping(index=index))
    (body,) = answer.values()
    return body["mappings"]


def _knn_enabled(backend: ClusterBackend) -> bool:
    with backend._errors():
        answer = dict(backend.client.indices.get_settings(index=backend.index))
    (body,) = answer.values()
    return str(body["settings"]["index"].get("knn", "false")).lower() == "true"


def prepare_in_place(backend: ClusterBackend, dims: int, model: str) -> None:
    """Add the vector and hash fields to the index's mapping, or say in one line why not."""
    properties = _mapping(backend, backend.index).get("properties", {})
    field_name = backend.layout.vector_field
    if field_name in properties:
        backend.check_index()  # the right type and dimension, or a one-line refusal
    elif backend.engine == "opensearch" and not _knn_enabled(backend):
        raise IndexStateError(
            f"index {backend.index!r} was created without `index.knn: true`, so OpenSearch "
            f"cannot add the knn_vector field {field_name!r} in place: back-fill into a new "
            "index with `--into NEW_INDEX` (and `--alias NAME` to switch readers over)"
        )
    new = {} if field_name in properties else {field_name: _vector_mapping(backend, dims, model)}
    new.update({k: v for k, v in _itlr_fields().items() if k not in properties})
    if new:
        with backend._errors():
            if backend.engine == "elasticsearch":
                backend.client.indices.put_mapping(index=backend.index, properties=new)
            else:
                backend.client.indices.put_mapping(index=backend.index, body={"properties": new})


def _itlr_fields() -> dict[str, Any]:
    """The fields written beside the vector: the content hash, and the token counts and length
    of the text that hybrid truth values read (itlr.lexical)."""
    return {
        HASH_FIELD: {"type": "keyword", "index": False},
        TOKENS_FIELD: {"type": "keyword"},
        TOKEN_KEYS_FIELD: {"type": "long", "index": False},
        LENGTH_FIELD: {"type": "integer"},
    }


def prepare_into(backend: ClusterBackend, target: str, dims: int, model: str) -> None:
    """Create `target` with the source index's own fields plus the vector and hash fields."""
    properties = dict(_mapping(backend, backend.index).get("properties", {}))
    properties[backend.layout.vector_field] = _vector_mapping(backend, dims, model)
    properties.update(_itlr_fields())
    settings = backend.dialect.mapping(dims, model)["settings"]
    with backend._errors():
        if backend.client.indices.exists(index=target):
            return  # a resumed run: the documents already copied are compared by hash
        body = {"settings": settings, "mappings": {"properties": properties}}
        if backend.engine == "elasticsearch":
            backend.client.indices.create(
                index=target, settings=settings, mappings=body["mappings"]
            )
        else:
            backend.client.indices.create(index=target, body=body)


def _current_hashes(backend: ClusterBackend, index: str, ids: list[str]) -> dict[str, str]:
    """The stored hash of each id already in `index` (resuming a copy into a new index)."""
    with backend._errors():
        if backend.engine == "elasticsearch":
            found = backend.client.mget(index=index, ids=ids, source=[HASH_FIELD])
        else:
            found = backend.client.mget(index=index, body={"ids": ids}, _source=[HASH_FIELD])
    return {
        d["_id"]: str(d["_source"].get(HASH_FIELD))
        for d in found["docs"]
        if d.get("found") and HASH_FIELD in (d.get("_source") or {})
    }


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
) -> BackfillReport:
    """Embed `text_field` of every document of the backend's index and store the vectors.

    In place by default; with `into`, into that new index (documents copied whole), and with
    `alias`, the alias then names `into` alone. `on_total(n)` is told how many documents the
    index holds, `on_batch(n)` of each n documents read.
    """
    started = time.perf_counter()
    target = into or backend.index
    if into:
        prepare_into(backend, into, embedder.dims, embedder.name)
    else:
        prepare_in_place(backend, embedder.dims, embedder.name)
    report = BackfillReport(target)
    if on_total is not None:
        with backend._errors():
            on_total(int(backend.client.count(index=backend.index)["count"]))
    helpers = backend._bulk_helpers()
    fields = None if into else [text_field, HASH_FIELD, TOKEN_KEYS_FIELD]

    def documents() -> Iterator[dict[str, Any]]:
        with backend._errors():
            yield from helpers.scan(
                backend.client,
                index=backend.index,
                query={"query": {"match_all": {}}, "_source": fields if fields else True},
                size=batch_size * 4,
                scroll="5m",
            )

    def batches() -> Iterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        for hit in documents():
            batch.append(hit)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def actions() -> Iterator[dict[str, Any]]:
        for batch in batches():
            report.seen += len(batch)
            stored = (
                _current_hashes(backend, into, [h["_id"] for h in batch])
                if into
                else {h["_id"]: (h.get("_source") or {}).get(HASH_FIELD) for h in batch}
            )
            todo: list[tuple[dict[str, Any], str, str]] = []
            for hit in batch:
                source = hit.get("_source") or {}
                text = _text_of(source, text_field)
                if text is None:
                    report.no_text += 1
                    continue
                digest = content_hash(text, embedder.name)
                if stored.get(hit["_id"]) == digest:
                    report.skipped += 1
                    if not into and TOKEN_KEYS_FIELD not in source:
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
                        backend.layout.vector_field: vector.tolist(),
                        HASH_FIELD: digest,
                        **lexical_fields(text),
                    }
                    if into:
                        source = {**hit["_source"], **new}
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

    report.failed.update(backend.bulk(actions(), chunk_size=batch_size))
    with backend._errors():
        backend.client.indices.refresh(index=target)
        if into and alias:
            move_alias(backend, alias, into)
    report.embedded -= len(report.failed)
    report.seconds = time.perf_counter() - started
    return report


def move_alias(backend: ClusterBackend, alias: str, index: str) -> None:
    """Point `alias` at `index` alone, in one atomic request."""
    client = backend.client
    actions: list[dict[str, Any]] = []
    if client.indices.exists_alias(name=alias):
        holders = dict(client.indices.get_alias(name=alias))
        actions += [{"remove": {"index": name, "alias": alias}} for name in holders]
    actions.append({"add": {"index": index, "alias": alias}})
    if backend.engine == "elasticsearch":
        client.indices.update_aliases(actions=actions)
    else:
        client.indices.update_aliases(body={"actions": actions})


def backfill_spec(
    spec: EngineSpec,
    *,
    model: str | None = None,
    into: str | None = None,
    alias: str | None = None,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    encoder: str | None = None,
    encoder_url: str | None = None,
    passage_prompt: str | None = None,
) -> BackfillReport:
    """Back-fill the index an EngineSpec names: its layout gives the text and vector fields.
    `passage_prompt` goes in front of each text (search with the matching `query_prompt`)."""
    embedder = get_embedder(model, encoder, encoder_url).with_prompts("", passage_prompt or "")
    backend = remote_backend(spec, embedder.name, embedder.dims)
    if not isinstance(backend, ClusterBackend):
        raise IndexStateError("back-fill works on a cluster index: give `url`")
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
