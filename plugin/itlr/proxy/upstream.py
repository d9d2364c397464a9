"""What the proxy learns from the upstream cluster for a logical search: which engine it is,
the index's own vector layout and model (`_meta.itlr`), that the stored scripts exist, and, for
hybrid truths, the index's token statistics.

Every call carries the UI's own authorization headers, so the proxy reads nothing the UI user
could not; only the one-time script registration uses the proxy's configured credentials (when
it has any), since registering scripts needs cluster privileges a UI user rarely has.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import math
import time
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
from itlr.engines.connection import (
    Connection,
    engine_from_root,
    error_reason,
    is_tls_failure,
    untrusted_tls,
)
from itlr.engines.dialect import Dialect
from itlr.engines.factory import dialect_for
from itlr.engines.integrity import SCRIPT_CHECK_SECONDS, check_stored
from itlr.engines.layout import IndexLayout
from itlr.engines.lexical_requests import lexical_stats, lexical_stats_body
from itlr.errors import ConfigurationError, EngineError, IndexStateError
from itlr.lexical import CorpusStats
from itlr.prompts import Prompts
from itlr.proxy.clause import mentions_clause
from itlr.query import Query

UPSTREAM_TIMEOUT_ENV = "ITLR_UPSTREAM_TIMEOUT"


class UpstreamTimeout(EngineError):
    """The upstream took longer than the proxy's read time-out: it is running, but slow."""

    def __init__(self, url: str, seconds: float | None) -> None:
        self.seconds = seconds
        super().__init__(
            f"the upstream {url} did not answer within {seconds:g} s (the proxy's upstream "
            f"time-out: raise it with --upstream-timeout or {UPSTREAM_TIMEOUT_ENV})"
        )


class UpstreamDenied(EngineError):
    """The upstream refused the UI user's credentials (401) or their privileges (403) for a
    request the proxy made on their behalf: the UI gets the engine's own answer."""

    def __init__(self, url: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.content = response.content
        self.media_type = response.headers.get("content-type", "application/json")
        super().__init__(f"the upstream {url} answered {response.status_code}")


def _refuse_denied(url: str, response: httpx.Response) -> None:
    if response.status_code in (401, 403):
        raise UpstreamDenied(url, response)


def timeout_seconds(client: httpx.AsyncClient) -> float | None:
    return client.timeout.read


# Headers that carry the caller's identity to the cluster: credentials, and the user a caller
# acts as (Elasticsearch's run-as, the OpenSearch security plugin's impersonation), whose
# document-level security the proxy's own requests (token statistics, mappings) must see too.
AUTH_HEADERS = (
    "authorization",
    "es-secondary-authorization",
    "cookie",
    "es-security-runas-user",
    "opendistro_security_impersonate_as",
)


def auth_headers(headers: Any) -> dict[str, str]:
    return {name: headers[name] for name in AUTH_HEADERS if name in headers}


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
    vector = properties.get(config.vector_field)
    if not isinstance(vector, dict) or vector.get("type") not in ("knn_vector", "dense_vector"):
        raise IndexStateError(
            f"index {name!r} has no vector field {config.vector_field!r}: fix the index config, "
            "or back-fill it (`itlr backfill`)"
        )
    layout = IndexLayout(
        config.vector_field,
        config.text_field,
        tiebreak="doc_id" if "doc_id" in properties else None,
    )
    # An endpoint's model is a name it serves, not a local model to find.
    remote = config.encoder in REMOTE_ENCODERS
    model = str(config.model or DEFAULT_MODEL) if remote else resolve_model(config.model)[0]
    return IndexVectors(
        model,
        _mapped_dims(vector),
        layout,
        config.query_prompt or "",
        config.encoder,
        config.encoder_url,
    )


def _mapped_dims(vector: Any) -> int:
    """The dimension count a vector field's mapping records (0: none recorded yet)."""
    if not isinstance(vector, dict):
        return 0
    return int(vector.get("dimension") or vector.get("dims") or 0)


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
        dims = _mapped_dims(properties.get(layout.vector_field)) or int(meta.get("dims", 0))
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


class Upstream:
    """Engine, index layouts and stored scripts of the configured cluster, learned once."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        connection: Connection,
        indexes: Sequence[IndexConfig] = (),
        script_check_seconds: float = SCRIPT_CHECK_SECONDS,
    ) -> None:
        self.client = client
        self.connection = connection
        self.indexes = tuple(indexes)
        self.script_check_seconds = script_check_seconds
        self._engine: tuple[str, str] | None = None
        self._vectors: dict[str, IndexVectors] = {}
        # Per target, the dialect built from its vectors and the engine: one object, so what
        # it works out once per query (its request shapes) serves the next search too.
        self._dialects: dict[str, tuple[IndexVectors, tuple[str, str], Dialect]] = {}
        # When each stored script was last found to be itlr's (time.monotonic()).
        self._scripts_checked: dict[str, float] = {}
        self._lock = asyncio.Lock()

    def scripts_changed(self) -> None:
        """A write to `_scripts` went through: compare them again before the next search."""
        self._scripts_checked.clear()

    async def _get(self, path: str, headers: dict[str, str]) -> httpx.Response:
        return await self._send("GET", path, headers)

    async def _send(
        self, method: str, path: str, headers: dict[str, str], **more: Any
    ) -> httpx.Response:
        """One request of the proxy's own; a slow or unreachable upstream as one line."""
        try:
            return await self.client.request(method, path, headers=headers, **more)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise UpstreamTimeout(self.connection.url, timeout_seconds(self.client)) from None
        except httpx.TransportError as down:
            if is_tls_failure(down):
                raise untrusted_tls(self.connection.url, down) from None
            raise EngineError(
                f"cannot reach the upstream {self.connection.url} ({type(down).__name__}): "
                "is it running? check `url`"
            ) from None

    async def lexical_stats(
        self, target: str, query: Query, headers: dict[str, str]
    ) -> CorpusStats:
        """The token statistics of every index `target` names, for the query's tokens: one
        aggregation (`lexical_stats_body`), asked with the UI's credentials. How long a count
        is used for is the proxy's (itlr.proxy.statistics)."""
        # Statistics from some shards only would score unlike `itlr search`: refused.
        response = await self._send(
            "POST",
            f"/{target}/_search",
            headers,
            params={"allow_partial_search_results": "false"},
            json=lexical_stats_body(query),
        )
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        _refuse_denied(self.connection.url, response)
        if response.status_code != 200 or not isinstance(payload, dict):
            raise EngineError(
                f"cannot count the token statistics of {target!r} that hybrid truths need: the "
                f"upstream answered {response.status_code} ({error_reason(payload, payload)})"
            )
        try:
            return lexical_stats(payload)
        except (KeyError, TypeError, ValueError):
            raise EngineError(
                f"cannot count the token statistics of {target!r} that hybrid truths need: the "
                "upstream's answer has no statistics aggregations"
            ) from None

    async def stored_template_mentions(
        self, raw: bytes, field: str, headers: dict[str, str]
    ) -> bool:
        """Whether a template search (JSON or NDJSON) uses a stored template (`"id"`) whose
        rendering names the field: rendered by the upstream (`_render/template`, the UI's
        credentials). A template it cannot render is the upstream's to refuse."""
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
            response = await self._send("POST", "/_render/template", headers, json=asked)
            if response.status_code == 200 and mentions_clause(response.content, field):
                return True
        return False

    async def engine(self, headers: dict[str, str]) -> tuple[str, str]:
        """(engine, version) from the cluster's root endpoint."""
        if self._engine is None:
            response = await self._get("/", headers)
            _refuse_denied(self.connection.url, response)
            if response.status_code != 200:
                raise EngineError(
                    f"the upstream {self.connection.url} answered {response.status_code} to GET /"
                )
            try:
                info = response.json()
            except ValueError:
                info = response.text
            self._engine = engine_from_root(self.connection.url, info)
        return self._engine

    async def vectors(self, target: str, headers: dict[str, str]) -> IndexVectors:
        if target not in self._vectors:
            response = await self._get(f"/{target}/_mapping", headers)
            _refuse_denied(self.connection.url, response)
            if response.status_code != 200:
                raise IndexStateError(
                    f"cannot read the mapping of {target!r}: the upstream answered "
                    f"{response.status_code}"
                )
            self._vectors[target] = index_vectors(target, response.json(), self.indexes)
        return self._vectors[target]

    def known_targets(self) -> list[str]:
        """The indexes (or patterns) whose layout has been read: those searched so far."""
        return list(self._vectors)

    async def target(self, target: str, headers: dict[str, str]) -> SearchTarget:
        """How to build logical searches on the target (the proxy sends them itself)."""
        # The target's mapping first: a user who may not read the index gets the engine's
        # refusal for it, whatever else they may read.
        vectors = await self.vectors(target, headers)
        engine, version = await self.engine(headers)
        known = self._dialects.get(target)
        if known is not None and known[0] is vectors and known[1] == (engine, version):
            dialect = known[2]
        else:
            dialect = dialect_for(engine, vectors.layout, server_version=version or None)
            if vectors.layout.tiebreak is None:
                layout = replace(vectors.layout, tiebreak=type(dialect).fallback_tiebreak)
                dialect = dialect_for(engine, layout, server_version=version or None)
            self._dialects[target] = (vectors, (engine, version), dialect)
        await self.ensure_scripts(dialect, headers)
        return SearchTarget(dialect, vectors)

    async def ensure_scripts(self, dialect: Dialect, headers: dict[str, str]) -> None:
        """Compare the stored scripts with the packaged ones (a foreign one raises
        ScriptMismatch: searches are refused until `itlr install` puts ours back), storing a
        missing one. Done again once the last comparison is `script_check_seconds` old, so a
        script overwritten on the cluster directly is noticed within that time."""
        stale = time.monotonic() - self.script_check_seconds
        wanted = [
            s
            for s in (dialect.score_script, dialect.exclude_script)
            if self._scripts_checked.get(s.id, -math.inf) < stale
        ]
        if not wanted:
            return
        admin = self.connection.auth_headers() or headers
        async with self._lock:
            for script in wanted:
                try:
                    found = await self.client.get(f"/_scripts/{script.id}", headers=admin)
                    if found.status_code == 404:
                        put = await self.client.put(
                            f"/_scripts/{script.id}", json=script.body(), headers=admin
                        )
                        if put.status_code >= 300:
                            raise EngineError(
                                f"the upstream refused to store itlr's script {script.id} "
                                f"({put.status_code}): run `itlr install` against it as a user "
                                "allowed to, or give the proxy such credentials"
                            )
                    elif found.status_code != 200:
                        raise EngineError(
                            f"cannot check itlr's stored script {script.id}: the upstream "
                            f"answered {found.status_code}"
                        )
                    else:
                        check_stored(script, found.json(), self.connection.url)
                except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
                    raise UpstreamTimeout(
                        self.connection.url, timeout_seconds(self.client)
                    ) from None
                except httpx.TransportError as down:
                    if is_tls_failure(down):
                        raise untrusted_tls(self.connection.url, down) from None
                    raise EngineError(
                        f"cannot reach the upstream {self.connection.url} "
                        f"({type(down).__name__}): is it running? check `url`"
                    ) from None
                self._scripts_checked[script.id] = time.monotonic()

    async def recheck_scripts(self, headers: dict[str, str]) -> None:
        """After a search failed on a script error: compare the stored scripts again (raises
        ScriptMismatch), and store a deleted one again."""
        engine, version = await self.engine(headers)
        self.scripts_changed()
        await self.ensure_scripts(
            dialect_for(engine, IndexLayout(), server_version=version or None), headers
        )


def check_scripts_at_start(connection: Connection, timeout: float) -> str | None:
    """Refuse to start in front of a cluster whose stored itlr scripts are not ours; a warning
    (returned) when the cluster cannot be asked yet: the first search checks again."""
    headers = connection.auth_headers()
    verify: Any = connection.ca_file or connection.verify_certs
    try:
        with httpx.Client(base_url=connection.url, verify=verify, timeout=timeout) as client:
            root = client.get("/", headers=headers)
            if root.status_code != 200:
                return f"the upstream answered {root.status_code} to GET /: scripts not checked"
            engine, version = engine_from_root(connection.url, root.json())
            dialect = dialect_for(engine, IndexLayout(), server_version=version or None)
            for script in (dialect.score_script, dialect.exclude_script):
                found = client.get(f"/_scripts/{script.id}", headers=headers)
                if found.status_code == 200:
                    check_stored(script, found.json(), connection.url)
    except (httpx.HTTPError, ValueError) as down:
        return (
            f"cannot check itlr's stored scripts on {connection.url} yet "
            f"({type(down).__name__}): the first logical search will"
        )
    return None
