"""What the proxy learns from the upstream cluster for a logical search: which engine it is,
the index's own vector layout and model (`_meta.itlr`) and, for hybrid truths, the index's token
statistics.

Every read is the caller's own (itlr.proxy.caller: their identity headers and nothing else), and
what is kept from it is kept per caller, so the proxy reads nothing the UI user could not and
tells no caller what another read. The stored scripts and the pipeline are the proxy's own
business (itlr.proxy.integrity).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

from itlr.extras import missing_extra

try:
    import httpx
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr import json_values
from itlr.engines.cluster_client import ClusterRefused, run_async
from itlr.engines.cluster_reads import (
    check_scripts,
    count_statistics,
    engine_of,
    index_mappings,
    mapped_vector,
    tiebreak_for,
    vector_dims,
)
from itlr.engines.connection import Connection
from itlr.engines.dialect import Dialect
from itlr.engines.factory import dialect_for
from itlr.engines.layout import IndexLayout
from itlr.errors import ConfigurationError, EngineError, IndexStateError
from itlr.lexical import CorpusStats
from itlr.prompts import Prompts
from itlr.proxy.caller import (
    AUTH_HEADERS,
    UPSTREAM_TIMEOUT_ENV,
    Caller,
    CallerReads,
    HttpxTransport,
    TimedLRU,
    UpstreamTimeout,
    auth_headers,
)
from itlr.proxy.placement import raw_names_field
from itlr.query import Query


class UpstreamDenied(EngineError):
    """The upstream refused a read the proxy made for a caller: their credentials (401), their
    privileges (403), or the index they named does not exist (404). The UI gets the engine's
    own answer, as without the proxy."""

    def __init__(self, url: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.content = response.content
        self.media_type = response.headers.get("content-type", "application/json")
        super().__init__(f"the upstream {url} answered {response.status_code}")


def _refuse_denied(url: str, response: httpx.Response, missing: bool = False) -> None:
    """The engine's own refusal of a caller's read; with `missing`, its 404 too."""
    if response.status_code in (401, 403) or (missing and response.status_code == 404):
        raise UpstreamDenied(url, response)


@dataclass(frozen=True)
class IndexVectors:
    """The itlr layout an index (or every index of a pattern) records in `_meta.itlr`."""

    model: str
    dims: int
    layout: IndexLayout
    # What goes before each query term (`_meta.itlr`'s or the config's; itlr.prompts).
    query_prompt: str = ""
    # The encoder an index config names for it (None: the proxy's own).
    encoder: str | None = None
    encoder_url: str | None = None


@dataclass(frozen=True)
class IndexConfig:
    """Where an index itlr did not make keeps its text and vectors (no `_meta.itlr`), for the
    indexes whose names match `pattern` (fnmatch: `logs-*`); model None is the bundled one.
    `encoder` / `encoder_url` name how its vectors were made when not as the proxy's are
    (`"openai"` and the endpoint), `query_prompt` what goes before each query term."""

    pattern: str
    vector_field: str
    text_field: str
    model: str | None = None
    query_prompt: str | None = None
    encoder: str | None = None
    encoder_url: str | None = None

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)


def load_index_configs(path: Path) -> tuple[IndexConfig, ...]:
    """A proxy index config file: `{"PATTERN": {"vector_field": ..., "text_field": ...,
    "model": ...}, ...}`; the first pattern that matches an index wins."""
    try:
        raw = json_values.loads(Path(path).read_bytes(), "the index config")  # depth-checked
    except (OSError, ValueError) as bad:
        raise ConfigurationError(f"cannot read the index config {path}: {bad}") from None
    if not isinstance(raw, dict):
        raise ConfigurationError(
            f'the index config {path} must map patterns to fields: {{"logs-*": '
            '{"vector_field": "vec", "text_field": "body"}}'
        )
    configs = []
    for pattern, entry in raw.items():
        if not isinstance(entry, dict) or not {"vector_field", "text_field"} <= set(entry):
            raise ConfigurationError(
                f"the index config {path}: {pattern!r} needs `vector_field` and `text_field`"
            )
        unknown = set(entry) - {f.name for f in fields(IndexConfig)} - {"pattern"}
        if unknown:
            raise ConfigurationError(
                f"the index config {path}: {pattern!r} has unknown keys {sorted(unknown)}"
            )
        if entry.get("encoder") is not None:
            from itlr.embed import resolve_encoder, resolve_encoder_url

            chosen = resolve_encoder(str(entry["encoder"]))
            resolve_encoder_url(chosen, entry.get("encoder_url"))  # a missing URL, said now
        if entry.get("vector_field") is None or entry.get("text_field") is None:
            raise ConfigurationError(
                f"the index config {path}: {pattern!r} needs `vector_field` and `text_field` "
                "names, not null"
            )
        # A null value is the default, as an absent key is (`"model": null`: the default model).
        configs.append(
            IndexConfig(
                str(pattern),
                # Keys checked against IndexConfig's fields above; the two fields are not null.
                **cast(
                    "dict[str, Any]", {k: None if v is None else str(v) for k, v in entry.items()}
                ),
            )
        )
    return tuple(configs)


def _configured(
    name: str, mapping: dict[str, Any], configs: Sequence[IndexConfig]
) -> IndexVectors | None:
    """The vectors of an index itlr did not make, from the first config whose pattern matches;
    the dimension is the mapped one. `tiebreak` None: the engine's own stable sort key."""
    from itlr.embed import DEFAULT_MODEL, REMOTE_ENCODERS, resolve_model

    config = next((c for c in configs if c.matches(name)), None)
    if config is None:
        return None
    properties = mapping.get("properties", {})
    vector = mapped_vector(properties, config.vector_field)
    if vector is None or not vector.is_vector:
        raise IndexStateError(
            f"index {name!r} has no vector field {config.vector_field!r}: fix the index config, "
            "or back-fill it (`itlr backfill`)"
        )
    layout = IndexLayout(
        config.vector_field,
        config.text_field,
        # None until the engine is known: `Upstream.target` gives it the engine's fallback.
        tiebreak=tiebreak_for(properties, fallback=None),
    )
    # An endpoint's model is a name it serves, not a local model to find.
    remote = config.encoder in REMOTE_ENCODERS
    model = str(config.model or DEFAULT_MODEL) if remote else resolve_model(config.model)[0]
    return IndexVectors(
        model,
        vector.dims or 0,
        layout,
        config.query_prompt or "",
        config.encoder,
        config.encoder_url,
    )


def index_vectors(
    target: str, mappings: dict[str, Any], configs: Sequence[IndexConfig] = ()
) -> IndexVectors:
    """The common `_meta.itlr` (or configured layout) of the indexes a target resolves to;
    refuse mixed ones."""
    found: dict[IndexVectors, list[str]] = {}
    without: list[str] = []
    for name, body in mappings.items():
        meta = body.get("mappings", {}).get("_meta", {}).get("itlr")
        if not isinstance(meta, dict):
            configured = _configured(name, body.get("mappings", {}), configs)
            if configured is not None:
                found.setdefault(configured, []).append(name)
            else:
                without.append(name)
            continue
        layout = IndexLayout(
            vector_field=str(meta.get("vector_field", "embedding")),
            text_field=str(meta.get("text_field", "text")),
        )
        # What the engine will compare the query vectors with is the mapping, not the note.
        properties = body.get("mappings", {}).get("properties", {})
        dims = vector_dims(properties.get(layout.vector_field)) or int(meta.get("dims", 0))
        prompt = Prompts.from_meta(meta).query
        vectors = IndexVectors(str(meta.get("model")), dims, layout, prompt)
        found.setdefault(vectors, []).append(name)
    if not found:
        raise IndexStateError(
            f"{target!r} holds no itlr index (no _meta.itlr in its mapping): load documents "
            "with `itlr ingest`, or give the proxy its fields (--vector-field / --text-field, "
            "or an --index-config file)"
        )
    if without:
        # The kNN clauses would fail on those indexes' shards: a silently partial answer.
        shown = ", ".join(sorted(without)[:5]) + (", ..." if len(without) > 5 else "")
        raise IndexStateError(
            f"{target!r} also matches indexes without itlr vectors ({shown}): a logical search "
            "needs every index it searches to hold them; name the itlr indexes, or a pattern "
            "that matches only them"
        )
    if len(found) > 1:
        groups = "; ".join(
            f"{', '.join(n)}: {v.model}/{v.layout.vector_field}" for v, n in found.items()
        )
        raise IndexStateError(
            f"{target!r} mixes indexes with different vectors ({groups}): search one kind at a time"
        )
    return next(iter(found))


@dataclass(frozen=True)
class SearchTarget:
    """An index (or pattern) to search: its engine's dialect and the vectors it holds."""

    dialect: Dialect
    vectors: IndexVectors
    # The indexes the target resolved to for the caller (the term cache's scope).
    indexes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    """What a caller's read of a target's mapping told: its vectors, and the indexes the target
    resolved to for that caller (a pattern resolves to the indexes the caller may read)."""

    vectors: IndexVectors
    indexes: tuple[str, ...]


# Reads kept per caller (engine root, mappings): entries, and seconds one is trusted. A mapping
# changes rarely; the age bounds how long a revoked caller's layout stays in memory, not what
# they can do (every forwarded search carries their credentials).
CALLER_READS = 4096
CALLER_READ_SECONDS = 300.0
# The most recently searched targets a metrics scrape counts (one request each, as the caller).
MAX_SEARCHED = 256


class Upstream:
    """What the proxy learns from the cluster for its callers' logical searches: the engine,
    and each target's layout, read as the caller (itlr.proxy.caller) and kept per caller."""

    def __init__(
        self,
        reads: CallerReads,
        connection: Connection,
        indexes: Sequence[IndexConfig] = (),
    ) -> None:
        self.reads = reads
        self.connection = connection
        self.indexes = tuple(indexes)
        self._engines: TimedLRU[bytes, tuple[str, str]] = TimedLRU(
            CALLER_READS, CALLER_READ_SECONDS
        )
        self._layouts: TimedLRU[tuple[bytes, str], Layout] = TimedLRU(
            CALLER_READS, CALLER_READ_SECONDS
        )
        # The dialect built for a layout and engine: one object, so what it works out once
        # per query (its request shapes) serves the next search too, whoever sends it.
        self._dialects: TimedLRU[tuple[IndexVectors, tuple[str, str]], Dialect] = TimedLRU(
            256, CALLER_READ_SECONDS
        )

    async def term_statistics(self, caller: Caller, target: str, query: Query) -> CorpusStats:
        """The token statistics of every index `target` names, for the query's tokens: one
        aggregation (`term_statistics_request`), asked as the caller. How long a count is used for
        is the proxy's (itlr.proxy.statistics)."""
        try:
            return await self.reads.about(caller, target, count_statistics(target, query))
        except ClusterRefused as refused:
            if not refused.answer.ok:
                _refuse_denied(self.connection.url, refused.answer.source, missing=True)
            raise

    async def stored_template_names_field(self, caller: Caller, raw: bytes, field: str) -> bool:
        """Whether a template search (JSON or NDJSON) uses a stored template (`"id"`) whose
        rendering names the field: rendered by the upstream (`_render/template`, as the
        caller). A template it cannot render is the upstream's to refuse."""
        bodies = []
        for line in raw.split(b"\n"):
            try:
                bodies.append(json.loads(line))
            except ValueError:
                continue
        for body in bodies:
            if not isinstance(body, dict) or not isinstance(body.get("id"), str):
                continue
            asked = {"id": body["id"], "params": body.get("params") or {}}
            response = await self.reads.render_template(caller, asked)
            if response.status_code == 200 and raw_names_field(response.content, field):
                return True
        return False

    async def engine(self, caller: Caller) -> tuple[str, str]:
        """(engine, version) from the cluster's root endpoint, as the caller sees it."""
        known = self._engines.get(caller.digest)
        if known is None:
            url = self.connection.url
            try:
                known = await self.reads.run(caller, engine_of(url))
            except ClusterRefused as refused:
                if refused.answer.ok:
                    raise  # a root that is no engine's
                _refuse_denied(url, refused.answer.source)
                raise EngineError(f"the upstream {refused}") from None
            self._engines.put(caller.digest, known)
        return known

    async def layout(self, caller: Caller, target: str) -> Layout:
        """The target's itlr layout, read from its mapping as the caller: their 401 / 403, or
        the 404 of an index that does not exist, is the engine's own answer (UpstreamDenied)."""
        key = (caller.digest, target)
        known = self._layouts.get(key)
        if known is None:
            try:
                mappings = await self.reads.about(caller, target, index_mappings(target))
            except ClusterRefused as refused:
                answer = refused.answer
                if answer.ok:
                    raise  # an answer that is no JSON object
                _refuse_denied(self.connection.url, answer.source, missing=True)
                raise IndexStateError(
                    f"cannot read the mapping of {target!r}: the upstream answered {answer.status}"
                ) from None
            if not mappings:
                raise IndexStateError(f"{target!r} matches no index")
            vectors = index_vectors(target, mappings, self.indexes)
            known = Layout(vectors, tuple(sorted(mappings)))
            self._layouts.put(key, known)
        return known

    async def vectors(self, caller: Caller, target: str) -> IndexVectors:
        return (await self.layout(caller, target)).vectors

    def searched_by(self, caller: Caller) -> list[str]:
        """The targets this caller has searched (whose layout is still kept)."""
        return [
            target
            for (digest, target) in list(self._layouts.young_keys())
            if digest == caller.digest
        ]

    def searched(self) -> list[str]:
        """Every target searched by anyone (whose layout is still kept)."""
        targets = dict.fromkeys(target for _, target in self._layouts.young_keys())
        return list(targets)[-MAX_SEARCHED:]

    async def target(self, caller: Caller, target: str) -> SearchTarget:
        """How to build the caller's logical searches on the target (the proxy sends them
        itself); the dialect whose scripts the integrity watch checks."""
        # The target's mapping first: a user who may not read the index gets the engine's
        # refusal for it, whatever else they may read.
        layout = await self.layout(caller, target)
        vectors = layout.vectors
        engine, version = await self.engine(caller)
        dialect = self._dialects.get((vectors, (engine, version)))
        if dialect is None:
            dialect = dialect_for(engine, vectors.layout, server_version=version or None)
            if vectors.layout.tiebreak is None:
                tiebroken = replace(vectors.layout, tiebreak=type(dialect).fallback_tiebreak)
                dialect = dialect_for(engine, tiebroken, server_version=version or None)
            self._dialects.put((vectors, (engine, version)), dialect)
        return SearchTarget(dialect, vectors, layout.indexes)


def check_scripts_at_start(connection: Connection, timeout: float) -> str | None:
    """Refuse to start in front of a cluster whose stored itlr scripts are not ours; a warning
    (returned) when the cluster cannot be asked yet: the first search checks again. Asked with
    the proxy's own credentials, through the layer its integrity watch uses."""
    return asyncio.run(_check_scripts_at_start(connection, timeout))


async def _check_scripts_at_start(connection: Connection, timeout: float) -> str | None:
    url = connection.url
    verify: Any = connection.ca_file or connection.verify_certs
    async with httpx.AsyncClient(base_url=url, verify=verify, timeout=timeout) as client:
        own = HttpxTransport(client, url, timeout, connection.auth_headers())
        try:
            # Another server than an engine stops the proxy here (ClusterRefused, answer 2xx).
            engine, version = await run_async(engine_of(url), own)
        except ClusterRefused as refused:
            if refused.answer.ok:
                raise
            return f"the upstream answered {refused.answer.status} to GET /: scripts not checked"
        except EngineError as down:  # unreachable, too slow, untrusted TLS
            return f"cannot check itlr's stored scripts yet ({down}): the first logical search will"
        dialect = dialect_for(engine, IndexLayout(), server_version=version or None)
        try:
            # Nothing is stored before the proxy serves: a missing script is the watch's.
            check = await run_async(check_scripts(dialect, url, store=False), own)
        except EngineError as unchecked:  # a refused read, or unreachable by now
            return f"cannot check itlr's stored scripts yet ({unchecked}): the first logical search will"
    if check.foreign is not None:
        raise check.foreign
    return None


__all__ = [
    "AUTH_HEADERS",
    "UPSTREAM_TIMEOUT_ENV",
    "IndexConfig",
    "IndexVectors",
    "Layout",
    "SearchTarget",
    "Upstream",
    "UpstreamDenied",
    "UpstreamTimeout",
    "auth_headers",
    "check_scripts_at_start",
    "index_vectors",
    "load_index_configs",
]
