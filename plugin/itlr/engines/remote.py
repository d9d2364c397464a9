"""What OpenSearch and Elasticsearch share: the params the Painless scripts read, the index
layout derived from mappings/, hits, bulk actions, and stored-script ids.

Nothing here talks to a server; the engine modules do.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from itlr.query import Query
from itlr.resources import mapping_file, painless_file
from itlr.search import Hit, SearchOptions

SCRIPT_FORMAT = 1


@dataclass(frozen=True)
class IndexLayout:
    """Where a remote index keeps what itlr needs."""

    vector_field: str = "embedding"
    text_field: str = "text"
    metadata_field: str = "metadata"


@dataclass(frozen=True)
class StoredScript:
    """A fixed Painless file registered under an id that changes whenever its source does."""

    name: str
    source: str

    @classmethod
    def load(cls, name: str, filename: str) -> StoredScript:
        return cls(name, painless_file(filename).read_text())

    @property
    def id(self) -> str:
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:10]
        return f"itlr-{self.name}-v{SCRIPT_FORMAT}-{digest}"

    def reference(self, params: dict[str, Any], inline: bool) -> dict[str, Any]:
        """The `script` object of a request: the stored id, or the fixed source inline."""
        if inline:
            return {"source": self.source, "lang": "painless", "params": params}
        return {"id": self.id, "params": params}

    def body(self) -> dict[str, Any]:
        return {"script": {"lang": "painless", "source": self.source}}


def derive_mapping(
    engine: str, layout: IndexLayout, dims: int, model: str, knn_engine: str | None = None
) -> dict[str, Any]:
    """The index body from mappings/<engine>.json with field names, dims and model filled in."""
    template = json.loads(mapping_file(engine).read_text())
    body = copy.deepcopy(template)
    properties = body["mappings"]["properties"]
    vector = properties.pop("embedding")
    text = properties.pop("text")
    metadata = properties.pop("metadata")
    if "dimension" in vector:
        vector["dimension"] = dims
    if "dims" in vector:
        vector["dims"] = dims
    if knn_engine and "method" in vector:
        vector["method"]["engine"] = knn_engine
    properties[layout.vector_field] = vector
    properties[layout.text_field] = text
    properties[layout.metadata_field] = metadata
    meta = body["mappings"]["_meta"]["itlr"]
    meta.update(
        model=model, dims=dims, vector_field=layout.vector_field, text_field=layout.text_field
    )
    return body


def score_params(
    query: Query, term_vectors: np.ndarray, options: SearchOptions, layout: IndexLayout
) -> dict[str, Any]:
    """Everything the scoring script reads; the program is the one numpy runs."""
    return {
        "field": layout.vector_field,
        "vectors": np.asarray(term_vectors, dtype=np.float32).tolist(),
        **query.program.to_params(),
        **options.ops.to_params(),
        **options.truth.to_params(query.terms),
    }


def exclusion_params(
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    layout: IndexLayout,
    term: str,
) -> dict[str, Any]:
    index = query.terms.index(term)
    truth = options.truth.to_params(query.terms)
    return {
        "field": layout.vector_field,
        "vector": np.asarray(term_vectors[index], dtype=np.float32).tolist(),
        "truth": truth["truth"],
        "tau": truth["tau"][index],
        "lam": truth["lam"][index],
    }


def bulk_actions(
    index: str,
    layout: IndexLayout,
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: np.ndarray,
    fields: Sequence[dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    fields = fields or [{} for _ in ids]
    return [
        {
            "_op_type": "index",
            "_index": index,
            "_id": doc_id,
            "_source": {
                "doc_id": doc_id,
                layout.text_field: text,
                layout.vector_field: vector.tolist(),
                layout.metadata_field: extra,
            },
        }
        for doc_id, text, vector, extra in zip(ids, texts, vectors, fields, strict=True)
    ]


def hits_from_response(
    response: dict[str, Any],
    query: Query | None,
    term_vectors: np.ndarray | None,
    options: SearchOptions | None,
    layout: IndexLayout,
) -> list[Hit]:
    """Hits with per-term truths when the response carries the hits' vectors (--explain)."""
    hits = []
    for raw in response["hits"]["hits"]:
        source = raw.get("_source") or {}
        truths: dict[str, float] = {}
        vector = source.get(layout.vector_field)
        if vector is not None and query is not None and term_vectors is not None and options:
            unit = np.asarray(vector, dtype=np.float32)
            unit = unit / (np.linalg.norm(unit) or 1.0)
            cosines = (np.asarray(term_vectors, dtype=np.float32) @ unit)[None, :]
            values = options.truth.apply(cosines, query.terms)[0]
            truths = {t: float(v) for t, v in zip(query.terms, values, strict=True)}
        hits.append(
            Hit(
                id=str(raw["_id"]),
                score=_score(raw),
                truths=truths,
                text=str(source.get(layout.text_field, "")),
                fields=dict(source.get(layout.metadata_field) or {}),
            )
        )
    return hits


def _score(raw: dict[str, Any]) -> float:
    """A hit's score: `_score`, or the first sort value when the engine left `_score` out (the
    first sort key of a logical query is the score)."""
    if raw.get("_score") is not None:
        return float(raw["_score"])
    sort = raw.get("sort") or [0.0]
    return float(sort[0]) if isinstance(sort[0], int | float) else 0.0
