"""Bulk index actions: a document's text, vector, lexical fields and content hash, laid out
for an index itlr made or, keeping each document's own shape, for one made elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from itlr.engines.layout import IndexLayout
from itlr.transform import itlr_fields


def bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
    hashes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    fields = fields or [{} for _ in ids]
    hashes = hashes or ["" for _ in ids]
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                "doc_id": doc_id,
                layout.text_field: text,
                layout.metadata_field: extra,
                **itlr_fields(layout.vector_field, text, vector, digest),
            },
        }
        for doc_id, text, vector, extra, digest in zip(
            ids, texts, vectors, fields, hashes, strict=True
        )
    ]


def shaped_bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
    hashes: Sequence[str],
) -> list[dict[str, Any]]:
    """Bulk actions for an index itlr did not make: each document keeps its own shape, its
    fields at the top of `_source` where the team's other writes put them, the id in `_id`
    alone, and beside them only the text and what itlr adds (vector, hash, lexical fields),
    each mapped before the first write (itlr.engines.foreign)."""
    fields = fields or [{} for _ in ids]
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                **extra,
                layout.text_field: text,
                **itlr_fields(layout.vector_field, text, vector, digest),
            },
        }
        for doc_id, text, vector, extra, digest in zip(
            ids, texts, vectors, fields, hashes, strict=True
        )
    ]
