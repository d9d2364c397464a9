"""The fields itlr adds to an index it did not make (no `_meta.itlr`), mapped explicitly before
anything is written, so that dynamic mapping never guesses their types: the vector, the content
hash, and the token counts and length hybrid truth values read. Back-fill (itlr.backfill) and
ingestion (ClusterBackend.add) both prepare a foreign index here.
"""

from __future__ import annotations

from typing import Any, Protocol

from itlr.engines.dialect import Dialect
from itlr.engines.layout import IndexLayout
from itlr.engines.operations import ClusterOperations
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.lexical import LENGTH_FIELD, TOKEN_KEYS_FIELD, TOKENS_FIELD


class ClusterTarget(Protocol):
    """What preparing a foreign index needs of a cluster backend (itlr.engines.cluster's
    ClusterBackend), named here so that this module does not import the backend it serves."""

    index_name: str
    layout: IndexLayout

    @property
    def dialect(self) -> Dialect: ...

    @property
    def operations(self) -> ClusterOperations: ...

    def check_index(self) -> None: ...


def itlr_fields() -> dict[str, Any]:
    """The fields written beside the vector: the content hash, and the token counts and length
    of the text that hybrid truth values read (itlr.lexical)."""
    return {
        HASH_FIELD: {"type": "keyword", "index": False},
        PREVIOUS_HASH_FIELD: {"type": "keyword", "index": False},
        TOKENS_FIELD: {"type": "keyword"},
        TOKEN_KEYS_FIELD: {"type": "long", "index": False},
        LENGTH_FIELD: {"type": "integer"},
    }


def vector_mapping(
    backend: ClusterTarget, dims: int, model: str, exact_only: bool = False
) -> dict[str, Any]:
    """The vector field's mapping as itlr makes it for this engine; `exact_only`: without an
    ANN `method` (OpenSearch adds such a `knn_vector` to an index without `index.knn`; only
    exact, script-scored searches read it)."""
    body = backend.dialect.mapping(dims, model)
    vector = dict(body["mappings"]["properties"][backend.layout.vector_field])
    if exact_only:
        vector.pop("method", None)
    return vector


def add_itlr_fields(
    backend: ClusterTarget,
    dims: int,
    model: str,
    also: dict[str, Any] | None = None,
    exact_only: bool = False,
) -> dict[str, Any]:
    """Add the vector field and itlr's own fields (and `also`) to the index's mapping where
    they are missing, or say in one line why not, before changing anything. Returns what was
    added. `exact_only`: the vector field without an ANN method (`vector_mapping`)."""
    operations = backend.operations
    properties = operations.mapping(backend.index_name).get("properties", {})
    field_name = backend.layout.vector_field
    if field_name in properties:
        backend.check_index()  # the right type and dimension, or a one-line refusal
    elif not exact_only and (
        refusal := operations.vector_field_refusal(backend.index_name, field_name)
    ):
        raise IndexStateError(refusal)
    wanted = itlr_fields()
    clashes = [
        f"{name!r} is mapped as {properties[name].get('type', 'an object')}, not {spec['type']}"
        for name, spec in wanted.items()
        if name in properties and properties[name].get("type") != spec["type"]
    ]
    if clashes:
        raise IndexStateError(
            f"index {backend.index_name!r} already maps fields itlr writes, with other types "
            f"({'; '.join(clashes)}): itlr cannot write there; use another index"
        )
    new = (
        {}
        if field_name in properties
        else {field_name: vector_mapping(backend, dims, model, exact_only)}
    )
    new.update({k: v for k, v in {**wanted, **(also or {})}.items() if k not in properties})
    if new:
        operations.put_mapping(backend.index_name, new)
    return new
