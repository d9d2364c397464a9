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
from itlr.engines.foreign import add_itlr_fields as prepare_in_place
from itlr.engines.foreign import index_mapping as _mapping
from itlr.engines.foreign import itlr_fields as _itlr_fields
from itlr.engines.foreign import vector_mapping as _vector_mapping
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import TOKEN_KEYS_FIELD, lexical_fields

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
                vectors = embedder.encode([text for _, text, _ in todo])
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
) -> BackfillReport:
    """Back-fill the index an EngineSpec names: its layout gives the text and vector fields."""
    embedder = get_embedder(model)
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
