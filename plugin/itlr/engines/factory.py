"""Choosing and opening an engine from settings: the embedded index by name, or a cluster
index over the connection layer (itlr.engines.connection)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from itlr.embed import Embedder
from itlr.engines.cluster_client import ClientTransport, run
from itlr.engines.cluster_reads import engine_of
from itlr.engines.connection import DETECT_TIMEOUT, Connection, detection_errors
from itlr.engines.dialect import Dialect
from itlr.engines.layout import IndexLayout
from itlr.errors import ConfigurationError, EngineError
from itlr.prompts import Prompts

if TYPE_CHECKING:
    from itlr.engines import Backend
    from itlr.engines.cluster import ClusterBackend

ENGINES = ("embedded", "opensearch", "elasticsearch", "auto")
CLUSTER_ENGINES = ("opensearch", "elasticsearch")
# Old names still accepted, with a deprecation note.
ENGINE_ALIASES = {"memory": "embedded"}


def engine_name(name: str, note: Callable[[str], None] | None = None) -> str:
    """The engine's name for `name`, which may be an old alias: the alias is noted (by `note`,
    else as a FutureWarning, shown to users by default), never refused."""
    if name not in ENGINE_ALIASES:
        return name
    current = ENGINE_ALIASES[name]
    message = f'engine "{name}" is now called "{current}"; "{name}" will be removed'
    if note is None:
        warnings.warn(message, FutureWarning, stacklevel=3)
    else:
        note(message)
    return current


@dataclass(frozen=True)
class EngineSpec:
    engine: str = "embedded"
    index_name: str = "default"
    connection: Connection | None = None
    layout: IndexLayout = field(default_factory=IndexLayout)
    inline_script: bool = False
    knn_engine: str | None = None

    def __post_init__(self) -> None:
        # frozen: the one normalisation, so that code past here sees only current names.
        object.__setattr__(self, "engine", engine_name(self.engine))
        if self.engine not in ENGINES:
            raise ConfigurationError(f"unknown engine {self.engine!r}: choose one of {ENGINES}")
        if self.engine != "embedded" and self.connection is None:
            raise ConfigurationError(
                f'`engine="{self.engine}"` needs `url` (e.g. http://localhost:9200)'
            )


def open_backend(spec: EngineSpec, embedder: Embedder, create: bool = False) -> Backend:
    """An engine for the spec's index; `create` makes a missing index (ingestion), recording
    the embedder's prompts. The backend's `prompts` are those the index records."""
    prompts = Prompts(embedder.query_prompt, embedder.passage_prompt)
    if spec.engine == "embedded":
        from itlr.engines.embedded import EmbeddedBackend
        from itlr.engines.folders import index_path

        path = index_path(spec.index_name)
        if create:
            return EmbeddedBackend.open_or_create(
                path, embedder.name, embedder.dims, prompts=prompts
            )
        backend = EmbeddedBackend.open(path)
        backend.check_compatible(embedder.name, embedder.dims)
        return backend

    cluster = remote_backend(spec, embedder.name, embedder.dims)
    if create:
        cluster.prompts = prompts
        cluster.ensure_index(spec.knn_engine)
    else:
        cluster.check_index()
    return cluster


def detect_engine(connection: Connection) -> tuple[str, str]:
    """(engine, version) from the cluster's root endpoint (`engine_of`), read through
    opensearch-py, which makes no product check and so can read either engine's answer."""
    client = connection.opensearch(timeout=DETECT_TIMEOUT, max_retries=0)
    try:
        with detection_errors(connection.url):
            return run(engine_of(connection.url), ClientTransport(client))
    finally:
        client.close()


def remote_backend(spec: EngineSpec, model: str, dims: int) -> ClusterBackend:
    """A cluster backend for the spec, without touching its index yet."""
    if spec.connection is None:
        raise ConfigurationError("this needs a cluster: give `url`")
    engine = spec.engine
    version: str | None = None
    if engine == "auto":
        engine, version = detect_engine(spec.connection)
        if engine == "elasticsearch":
            from itlr.engines.elasticsearch import version_refusal

            problem = version_refusal(version)
            if problem:
                raise EngineError(problem)
    if engine == "opensearch":
        from itlr.engines.opensearch import OpenSearchBackend

        conn = spec.connection
        return OpenSearchBackend(
            conn.opensearch(),
            spec.index_name,
            model,
            dims,
            layout=spec.layout,
            inline_script=spec.inline_script,
            url=conn.url,
        )
    if engine == "elasticsearch":
        from itlr.engines import elasticsearch as es

        conn = spec.connection
        client = conn.elasticsearch()
        # Without auto detection the version is learned on the first request (knn features).
        return es.ElasticsearchBackend(
            client,
            spec.index_name,
            model,
            dims,
            layout=spec.layout,
            inline_script=spec.inline_script,
            url=conn.url,
            version=None if version in (None, "?") else version,
        )
    raise ConfigurationError(
        f'`engine="{engine}"` needs no cluster: drop `url`, or use opensearch or elasticsearch'
    )


def dialect_for(
    engine: str,
    layout: IndexLayout | None = None,
    inline_script: bool = False,
    server_version: str | None = None,
) -> Dialect:
    """The engine's dialect; for Elasticsearch, of `server_version` (None: the newest)."""
    if engine == "elasticsearch":
        from itlr.engines.elasticsearch import Capabilities, ElasticsearchDialect

        return ElasticsearchDialect(layout, inline_script, Capabilities(server_version))
    if engine == "opensearch":
        from itlr.engines.opensearch import OpenSearchDialect

        return OpenSearchDialect(layout, inline_script)
    raise ConfigurationError(f"unknown engine {engine!r}: choose one of {list(CLUSTER_ENGINES)}")
