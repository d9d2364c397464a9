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
    *,
    shaped: bool = False,
) -> list[dict[str, Any]]:
    """Index actions for documents and their vectors (of `model`), beside each what itlr
    writes (itlr.transform.ItlrFields). For an index itlr made: the id, the text and the fields
    under the metadata object. `shaped`, for an index itlr did not make: each document keeps
    its own shape, its fields at the top of `_source` where the team's other writes put them,
    the id in `_id` alone, and beside them only the text and itlr's fields, each mapped before
    the first write (itlr.engines.foreign)."""
    written = ItlrFields(model, layout.vector_field)
    actions = []
    given = fields or [{} for _ in ids]
    for doc_id, text, vector, extra in zip(ids, texts, vectors, given, strict=True):
        own = (
            {**extra, layout.text_field: text}
            if shaped
            else {"doc_id": doc_id, layout.text_field: text, layout.metadata_field: extra}
        )
        source = {**own, **written.of(text, vector)}
        actions.append({"_op_type": "index", "_index": index, "_id": doc_id, "_source": source})
    return actions
