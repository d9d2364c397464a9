"""Where a remote index keeps what itlr needs: the field layout, the index body built from
mappings/, the field paths a mapping defines and a filter reads, and which fields of a document
made elsewhere are its own."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from itlr.fingerprint import HASH_FIELD
from itlr.lexical import LEXICAL_FIELDS
from itlr.prompts import Prompts
from itlr.resources import mapping_file


@dataclass(frozen=True)
class IndexLayout:
    """Where a remote index keeps what itlr needs."""

    vector_field: str = "embedding"
    text_field: str = "text"
    metadata_field: str = "metadata"
    # The sort key after _score that makes the order total (search_after pages rely on it):
    # itlr's own `doc_id`, or for an index made elsewhere what the engine can sort on
    # (`Dialect.fallback_tiebreak`); None sorts on _score alone.
    tiebreak: str | None = "doc_id"


def derive_mapping(
    engine: str,
    layout: IndexLayout,
    dims: int,
    model: str,
    knn_engine: str | None = None,
    prompts: Prompts | None = None,
) -> dict[str, Any]:
    """The index body from mappings/<engine>.json with field names, dims and model filled in."""
    template: dict[str, Any] = json.loads(mapping_file(engine).read_text())
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
    # Upserts compare this hash, never vectors (itlr.fingerprint); stored, not searched.
    properties[HASH_FIELD] = {"type": "keyword", "index": False}
    meta = body["mappings"]["_meta"]["itlr"]
    meta.update(
        model=model,
        dims=dims,
        vector_field=layout.vector_field,
        text_field=layout.text_field,
        **(prompts or Prompts()).to_meta(),
    )
    return body


# Every field itlr writes or moves beside a document starts with it (itlr_hash, itlr_hash_was,
# the lexical fields): none is ever one of the document's own.
ITLR_PREFIX = "itlr_"


def own_fields(source: dict[str, Any], layout: IndexLayout) -> dict[str, Any]:
    """A document's own fields in an index made elsewhere: every top-level field of _source
    but the text, the vector and every `itlr_` field."""
    skip = {layout.text_field, layout.vector_field, HASH_FIELD, *LEXICAL_FIELDS}
    return {k: v for k, v in source.items() if k not in skip and not k.startswith(ITLR_PREFIX)}


_BOOL_KEYS = ("must", "filter", "should", "must_not")
_LEAF_QUERIES = frozenset(
    {"term", "terms", "range", "match", "match_phrase", "prefix", "wildcard", "regexp", "fuzzy"}
)
_LEAF_OPTIONS = frozenset({"boost", "_name"})


def filter_fields(clause: Any) -> set[str]:
    """The field names a filter clause reads (term, range, exists, ... inside bools)."""
    names: set[str] = set()
    if isinstance(clause, list):
        for item in clause:
            names |= filter_fields(item)
    elif isinstance(clause, dict):
        for key, value in clause.items():
            if key == "bool" and isinstance(value, dict):
                for part in _BOOL_KEYS:
                    names |= filter_fields(value.get(part, []))
            elif key == "exists" and isinstance(value, dict) and "field" in value:
                names.add(str(value["field"]))
            elif key in _LEAF_QUERIES and isinstance(value, dict):
                names |= {str(k) for k in value if k not in _LEAF_OPTIONS}
            elif key in ("nested", "constant_score") and isinstance(value, dict):
                names |= filter_fields(value.get("query", value.get("filter", {})))
    return names


def mapped_fields(properties: dict[str, Any], prefix: str = "") -> set[str]:
    """Every field path a mapping defines, sub-fields (`body.keyword`) included."""
    names: set[str] = set()
    for name, spec in properties.items():
        path = prefix + name
        names.add(path)
        if isinstance(spec, dict):
            names |= mapped_fields(spec.get("properties", {}), path + ".")
            names |= mapped_fields(spec.get("fields", {}), path + ".")
    return names
