"""The index a back-fill copies into (`itlr backfill --into`), for a source index the engine
cannot add a vector field to (an OpenSearch index created without `index.knn: true`).

Nothing of a user's is overwritten: `into` must be one plain index name (no pattern, no alias,
not the source or one of its aliases), and an index that already exists is written only when
it is a copy itlr made of this very source, which it records in the copy's `_meta` when it
creates it (`_meta.itlr_copy`: the source's name, concrete index and uuid). Everything is
checked before anything is created or written.

The copy is created like its source (settings with analysis, shard count and pipelines;
mappings with dynamic templates, routing and `_meta`) plus `index.knn` and itlr's fields, so
that the team's application can be pointed at it (or an alias moved to it) unchanged.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from itlr.embed import Embedder
from itlr.engines.cluster import ClusterBackend
from itlr.engines.foreign import itlr_fields, vector_mapping
from itlr.engines.operations import ClusterOperations, IndexState
from itlr.errors import ConfigurationError, IndexStateError
from itlr.hash_guard import PIPELINE_ID

# The copy's `_meta` key that says whose copy it is.
COPY_META = "itlr_copy"
# Source settings that describe that one index (its identity, history, state) and are not
# carried to the copy: the engine sets its own, or refuses them on creation.
UNCOPIED_SETTINGS = frozenset(
    {
        "uuid",
        "creation_date",
        "creation_date_string",
        "provided_name",
        "version",
        "history",
        "history.uuid",
        "resize",
        "shrink",
        "routing.allocation.initial_recovery",
        "verified_before_close",
        "blocks",
        "store.snapshot",
        "frozen",
        "search.throttled",
        # Lifecycle policies act on the index they are set on (roll it over, delete it): the
        # copy is itlr's to keep current, so none is copied.
        "lifecycle",
        "plugins",
        "opendistro",
    }
)
# What an index name may not be or hold, on either engine (a pattern, several, a date-math
# expression or a name the engine refuses).
PATTERN = re.compile(r'[*?,\s"<>|\\/#:]')


def refuse_pattern(name: str, flag: str) -> None:
    """Refuse, in one line, a name that is not one plain index name."""
    if not name or PATTERN.search(name) or name in ("_all", ".", "..") or name[0] in "_-+":
        raise ConfigurationError(
            f"{flag} {name!r} is not one index name: give a single name (lower case, no "
            "wildcard, comma, space or leading '_', '-' or '+')"
        )
    if name != name.lower():
        raise ConfigurationError(f"{flag} {name!r}: index names are lower case")


@dataclass(frozen=True)
class CopyPlan:
    """What a back-fill into a copy writes: the one source index, and the copy (existing,
    itlr's copy of it; or None: to be created)."""

    source: IndexState
    copy: IndexState | None


def marker(source_name: str, source: IndexState, text_field: str, model: str) -> dict[str, Any]:
    """What the copy's `_meta.itlr_copy` records of the source it copies."""
    return {
        "source": source_name,
        "source_index": source.name,
        "source_uuid": source.uuid,
        "text_field": text_field,
        "model": model,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def copy_marker(state: IndexState) -> dict[str, Any] | None:
    recorded = (state.mappings.get("_meta") or {}).get(COPY_META)
    return recorded if isinstance(recorded, dict) else None


def is_copy_of(state: IndexState, source_name: str, source: IndexState) -> bool:
    """Whether `state` is an index itlr made as a copy of this source (by the name it was
    given, or the concrete index it named: an alias moved to a new index keeps its copy)."""
    recorded = copy_marker(state)
    if recorded is None:
        return False
    return recorded.get("source") == source_name or recorded.get("source_index") == source.name


def plan_copy(
    operations: ClusterOperations, source_name: str, into: str, alias: str | None
) -> CopyPlan:
    """Check `into` (and `alias`) against the source before anything is written: one plain
    name; not the source, its concrete index or one of its aliases; not an alias; absent, or
    a copy itlr made of this source. Returns the source's state and the copy's."""
    refuse_pattern(into, "--into")
    if alias is not None:
        refuse_pattern(alias, "--alias")
    sources = operations.describe(source_name)
    if len(sources) != 1:
        names = ", ".join(s.name for s in sources[:5])
        raise IndexStateError(
            f"{source_name!r} names {len(sources)} indexes ({names}): back-fill --into copies "
            "one index; name it"
        )
    (source,) = sources
    own_names = {source_name, source.name, *source.aliases}
    if into in own_names:
        raise IndexStateError(
            f"--into {into!r} is the source index {source.name!r} itself (or one of its "
            "aliases): name a new index for the copy"
        )
    if alias is not None:
        refuse_alias(operations, alias, into)
    if not operations.exists(into):
        return CopyPlan(source, None)
    found = operations.describe(into)
    if len(found) != 1 or found[0].name != into:
        holders = ", ".join(s.name for s in found[:5])
        raise IndexStateError(
            f"--into {into!r} is an alias (of {holders}): name the copy's index itself (an "
            "alias can follow with --alias)"
        )
    (copy,) = found
    if not is_copy_of(copy, source_name, source):
        recorded = copy_marker(copy)
        what = (
            f"a copy itlr made of {recorded.get('source_index') or recorded.get('source')!r}"
            if recorded
            else "not a copy itlr made (no _meta.itlr_copy)"
        )
        raise IndexStateError(
            f"--into {into!r} already exists and is {what}, not of {source_name!r}: a copy "
            "would overwrite and delete its documents; name a new index (or delete that one "
            "yourself if it is an old copy)"
        )
    return CopyPlan(source, copy)


def flat_settings(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested index settings as dotted keys (`analysis.analyzer.x.type`), lists kept whole."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def refuse_alias(operations: ClusterOperations, alias: str, into: str) -> None:
    """`alias` must be able to name the copy: not the copy's own name, not an index."""
    if alias == into:
        raise ConfigurationError(f"--alias {alias!r} is the --into name: give the alias another")
    if operations.exists(alias) and any(s.name == alias for s in operations.describe(alias)):
        raise IndexStateError(
            f"--alias {alias!r} is an index, not an alias: an alias cannot take an index's name; "
            "name an alias (or a new name)"
        )


def copy_settings(source: IndexState) -> dict[str, Any]:
    """The source's index settings a copy is created with (analysis, shards, replicas,
    pipelines, ...), as dotted keys; what names the source itself is left out."""
    settings = {
        key: value
        for key, value in flat_settings(source.settings).items()
        if not any(key == skip or key.startswith(skip + ".") for skip in UNCOPIED_SETTINGS)
    }
    if settings.get("final_pipeline") == PIPELINE_ID:
        # itlr's hash guard (itlr.hash_guard) belongs to the source it guards: on the copy it
        # would move aside the hash of every document itlr copies.
        del settings["final_pipeline"]
    return settings


def create_copy(
    backend: ClusterBackend,
    source_name: str,
    plan: CopyPlan,
    into: str,
    embedder: Embedder,
    text_field: str,
) -> None:
    """Create the copy: the source's settings and mappings, the engine's vector settings
    (`index.knn`), the vector and itlr's fields, and the marker that makes it itlr's copy."""
    source = plan.source
    dims, model = embedder.dims, embedder.name
    mappings = {k: v for k, v in source.mappings.items() if k != "_meta"}
    properties = dict(mappings.get("properties") or {})
    properties[backend.layout.vector_field] = vector_mapping(backend, dims, model)
    properties.update({k: v for k, v in itlr_fields().items() if k not in properties})
    mappings["properties"] = properties
    meta = {k: v for k, v in (source.mappings.get("_meta") or {}).items() if k != COPY_META}
    mappings["_meta"] = {**meta, COPY_META: marker(source_name, source, text_field, model)}
    engine_settings = flat_settings(backend.dialect.mapping(dims, model)["settings"]["index"])
    # The engine's vector settings (index.knn; on Elasticsearch 9.2+ vectors kept in
    # _source), not its shard count: the copy keeps the source's.
    vector_settings = {
        k: v
        for k, v in engine_settings.items()
        if k not in ("number_of_shards", "number_of_replicas")
    }
    settings = {**copy_settings(source), **vector_settings}
    backend.operations.create_index(into, {"index": settings}, mappings)


def record_source(operations: ClusterOperations, into: str, marker_value: dict[str, Any]) -> None:
    """Update the copy's marker (a source recreated under its name has a new uuid)."""
    meta = dict(operations.mapping(into).get("_meta") or {})
    meta[COPY_META] = marker_value
    operations.put_meta(into, meta)
