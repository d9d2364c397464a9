"""What the proxy learns from the upstream cluster for a logical search: which engine it is,
the index's own vector layout and model (`_meta.itlr`), and that the stored scripts exist.

Every call carries the UI's own authorization headers, so the proxy reads nothing the UI user
could not; only the one-time script registration uses the proxy's configured credentials (when
it has any), since registering scripts needs cluster privileges a UI user rarely has.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from itlr.engines.connection import Connection, engine_from_root
from itlr.engines.dialect import Dialect, IndexLayout
from itlr.engines.factory import dialect_for
from itlr.engines.integrity import check_stored
from itlr.errors import EngineError, IndexStateError

UPSTREAM_TIMEOUT_ENV = "ITLR_UPSTREAM_TIMEOUT"


class UpstreamTimeout(EngineError):
    """The upstream took longer than the proxy's read time-out: it is running, but slow."""

    def __init__(self, url: str, seconds: float | None) -> None:
        self.seconds = seconds
        super().__init__(
            f"the upstream {url} did not answer within {seconds:g} s (the proxy's upstream "
            f"time-out: raise it with --upstream-timeout or {UPSTREAM_TIMEOUT_ENV})"
        )


def timeout_seconds(client: httpx.AsyncClient) -> float | None:
    return client.timeout.read


# Headers that carry the caller's identity to the cluster.
AUTH_HEADERS = ("authorization", "es-secondary-authorization", "cookie")


def auth_headers(headers: Any) -> dict[str, str]:
    return {name: headers[name] for name in AUTH_HEADERS if name in headers}


@dataclass(frozen=True)
class IndexVectors:
    """The itlr layout an index (or every index of a pattern) records in `_meta.itlr`."""

    model: str
    dims: int
    layout: IndexLayout


def index_vectors(target: str, mappings: dict[str, Any]) -> IndexVectors:
    """The common `_meta.itlr` of the indexes a target resolves to; refuse mixed ones."""
    found: dict[IndexVectors, list[str]] = {}
    without: list[str] = []
    for name, body in mappings.items():
        meta = body.get("mappings", {}).get("_meta", {}).get("itlr")
        if not isinstance(meta, dict):
            without.append(name)
            continue
        layout = IndexLayout(
            vector_field=str(meta.get("vector_field", "embedding")),
            text_field=str(meta.get("text_field", "text")),
        )
        vectors = IndexVectors(str(meta.get("model")), int(meta.get("dims", 0)), layout)
        found.setdefault(vectors, []).append(name)
    if not found:
        raise IndexStateError(
            f"{target!r} holds no itlr index (no _meta.itlr in its mapping): load documents "
            "with `itlr ingest` or search an index that has them"
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

    def __init__(self, client: httpx.AsyncClient, connection: Connection) -> None:
        self.client = client
        self.connection = connection
        self._engine: tuple[str, str] | None = None
        self._vectors: dict[str, IndexVectors] = {}
        self._scripts_ready: set[str] = set()
        self._lock = asyncio.Lock()

    async def _get(self, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return await self.client.get(path, headers=headers)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise UpstreamTimeout(self.connection.url, timeout_seconds(self.client)) from None
        except httpx.TransportError as down:
            raise EngineError(
                f"cannot reach the upstream {self.connection.url} ({type(down).__name__}): "
                "is it running? check `url`"
            ) from None

    async def engine(self, headers: dict[str, str]) -> tuple[str, str]:
        """(engine, version) from the cluster's root endpoint."""
        if self._engine is None:
            response = await self._get("/", headers)
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
            if response.status_code != 200:
                raise IndexStateError(
                    f"cannot read the mapping of {target!r}: the upstream answered "
                    f"{response.status_code}"
                )
            self._vectors[target] = index_vectors(target, response.json())
        return self._vectors[target]

    async def target(self, target: str, headers: dict[str, str]) -> SearchTarget:
        """How to build logical searches on the target (the proxy sends them itself)."""
        engine, version = await self.engine(headers)
        vectors = await self.vectors(target, headers)
        dialect = dialect_for(engine, vectors.layout, server_version=version or None)
        await self.ensure_scripts(dialect, headers)
        return SearchTarget(dialect, vectors)

    async def ensure_scripts(self, dialect: Dialect, headers: dict[str, str]) -> None:
        """Register the stored scripts once per process (idempotent on the cluster too)."""
        wanted = [
            s
            for s in (dialect.score_script, dialect.exclude_script)
            if s.id not in self._scripts_ready
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
                    raise EngineError(
                        f"cannot reach the upstream {self.connection.url} "
                        f"({type(down).__name__}): is it running? check `url`"
                    ) from None
                self._scripts_ready.add(script.id)

    async def recheck_scripts(self, headers: dict[str, str]) -> None:
        """After a search failed on a script error: compare the stored scripts again (raises
        ScriptMismatch), and store a deleted one again."""
        engine, version = await self.engine(headers)
        self._scripts_ready.clear()
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
