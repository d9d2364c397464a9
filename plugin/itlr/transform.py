"""One document transform: a document's text -> its content hash -> its passage vector -> the
fields itlr writes beside the document's own (vector, hash, token counts and length).

Every write path goes through it, so that every path embeds and hashes alike: ingestion
(itlr.ingest, whose backend's bulk actions build the fields, itlr.engines.bulk), back-fill
(itlr.backfill), its copies (itlr.into) and the follower (itlr.follow). `ItlrFields` is the one
place the content hash (itlr.fingerprint: text and model) is computed, for writing it and for
comparing a stored one; `passage_vectors` the one place an encoder is called with the passage
prompt (`encode_passages`); `DocumentTransform` puts them together for a field of `_source`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


class TextEncoder(Protocol):
    """What writing needs from a model: passages in, unit vectors out, with the passage prompt
    the index records (itlr.embed.Embedder.encode_passages)."""

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...


def passage_vectors(encoder: TextEncoder, texts: Sequence[str]) -> tuple[np.ndarray, float]:
    """The passage vectors of `texts` (the prompt the index records in front of each) and the
    seconds the encoder took: every write path embeds through here."""
    started = time.perf_counter()
    vectors = encoder.encode_passages(list(texts))
    return vectors, time.perf_counter() - started


@dataclass(frozen=True)
class ItlrFields:
    """The fields itlr writes beside a document's own, for the vectors of `model` in
    `vector_field`: the one place the content hash is computed, when it is written and when a
    stored one is compared."""

    model: str
    vector_field: str = "embedding"

    def digest(self, text: str) -> str:
        """The content hash a vector of `text` is stored with (itlr.fingerprint)."""
        return content_hash(text, self.model)

    def of(self, text: str, vector: np.ndarray) -> dict[str, Any]:
        """For `text` and its vector: the vector, the content hash and the token counts
        hybrid truths read (itlr.lexical)."""
        return {
            self.vector_field: vector.tolist(),
            HASH_FIELD: self.digest(text),
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

    @property
    def fields(self) -> ItlrFields:
        return ItlrFields(self.embedder.name, self.vector_field)

    def text(self, source: dict[str, Any]) -> str | None:
        return text_of(source, self.text_field)

    def digest(self, text: str) -> str:
        """The content hash a vector of `text` is stored with."""
        return self.fields.digest(text)

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
        vectors, seconds = passage_vectors(self.embedder, texts)
        self.encode_seconds += seconds
        fields = self.fields
        return [fields.of(text, vector) for text, vector in zip(texts, vectors, strict=True)]


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
