"""Bulk index actions: a document's text, vector, lexical fields and content hash, laid out
for an index itlr made or, keeping each document's own shape, for one made elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from itlr.engines.layout import IndexLayout
from itlr.transform import ItlrFields


def bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
    model: str,
) -> list[dict[str, Any]]:
    """Bulk actions for an index itlr made: id, text, the fields under the metadata object,
    and what itlr writes for the vectors of `model` (itlr.transform.ItlrFields)."""
    fields = fields or [{} for _ in ids]
    written = ItlrFields(model, layout.vector_field)
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                "doc_id": doc_id,
                layout.text_field: text,
                layout.metadata_field: extra,
                **written.of(text, vector),
            },
        }
        for doc_id, text, vector, extra in zip(ids, texts, vectors, fields, strict=True)
    ]


def shaped_bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
    model: str,
) -> list[dict[str, Any]]:
    """Bulk actions for an index itlr did not make: each document keeps its own shape, its
    fields at the top of `_source` where the team's other writes put them, the id in `_id`
    alone, and beside them only the text and what itlr adds (vector, hash, lexical fields),
    each mapped before the first write (itlr.engines.foreign)."""
    fields = fields or [{} for _ in ids]
    written = ItlrFields(model, layout.vector_field)
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {**extra, layout.text_field: text, **written.of(text, vector)},
        }
        for doc_id, text, vector, extra in zip(ids, texts, vectors, fields, strict=True)
    ]
