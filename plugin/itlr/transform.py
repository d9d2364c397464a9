"""One document transform, used by back-fill (itlr.backfill), its copies (itlr.into) and the
follower (itlr.follow): a document's text -> its content hash -> its passage vector -> the
fields itlr writes beside the document's own (vector, hash, token counts and length).

Written once so that every path embeds alike: the passage prompt in front of each text
(`Embedder.encode_passages`), the hash of the text and model (itlr.fingerprint), the lexical
fields hybrid truths read (itlr.lexical). Ingestion (itlr.ingest) writes through the backend's
bulk actions (itlr.engines.bulk), which build those fields with this module's `itlr_fields`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from itlr.embed import Embedder
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD, content_hash
from itlr.lexical import LEXICAL_FIELDS, lexical_fields


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


def itlr_fields(vector_field: str, text: str, vector: np.ndarray, digest: str) -> dict[str, Any]:
    """The fields itlr writes beside a document's own for `text`: its vector, the content hash
    (`digest`; none written when empty) and the token counts hybrid truths read. Every write
    path builds them here: ingestion's bulk actions, back-fill, copies and the follower."""
    return {
        vector_field: vector.tolist(),
        **({HASH_FIELD: digest} if digest else {}),
        **lexical_fields(text),
    }


@dataclass
class DocumentTransform:
    """Texts of `text_field` into the fields itlr writes, with `embedder`'s passage prompt;
    `encode_seconds` adds up the encoder's time."""

    embedder: Embedder
    text_field: str
    vector_field: str
    encode_seconds: float = 0.0

    def text(self, source: dict[str, Any]) -> str | None:
        return text_of(source, self.text_field)

    def digest(self, text: str) -> str:
        """The content hash a vector of `text` is stored with."""
        return content_hash(text, self.embedder.name)

    @property
    def written_fields(self) -> tuple[str, ...]:
        """The fields itlr writes beside a document's own (a copy strips them first)."""
        return (self.vector_field, HASH_FIELD, PREVIOUS_HASH_FIELD, *LEXICAL_FIELDS)

    def stripped(self, source: dict[str, Any]) -> dict[str, Any]:
        """A document's own fields: its _source without what itlr writes."""
        drop = self.written_fields
        return {k: v for k, v in source.items() if k not in drop}

    def embed(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """For each text: its passage vector, hash and token counts, as the fields to write."""
        if not texts:
            return []
        started = time.perf_counter()
        vectors = self.embedder.encode_passages(list(texts))
        self.encode_seconds += time.perf_counter() - started
        return [
            itlr_fields(self.vector_field, text, vector, self.digest(text))
            for text, vector in zip(texts, vectors, strict=True)
        ]


def in_place_update(index: str, hit: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The `_bulk` partial update that writes `doc` beside a document's own fields (its
    routing kept; a hash the guard or the sweep moved aside cleared, where the hit has one:
    a field is never added to a document that did not hold it)."""
    source = hit.get("_source") or {}
    cleared = {PREVIOUS_HASH_FIELD: None} if source.get(PREVIOUS_HASH_FIELD) is not None else {}
    action: dict[str, Any] = {
        "_op_type": "update",
        "_index": index,
        "_id": hit["_id"],
        "doc": {**doc, **cleared},
    }
    if hit.get("_routing") is not None:
        action["routing"] = hit["_routing"]
    return action
