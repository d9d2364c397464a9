"""Choosing and opening an engine from command-line style settings."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from itlr.embed import Embedder
from itlr.engines.cluster import short_text
from itlr.engines.dialect import IndexLayout
from itlr.errors import ConfigurationError, EngineError

ENGINES = ("memory", "opensearch", "elasticsearch", "auto")
# A cluster's root answer is a few hundred bytes; a stray server's may be anything.
ROOT_ANSWER_LIMIT = 1_000_000


@dataclass(frozen=True)
class Connection:
    """How to reach a cluster. Secrets come from flags or ITLR_* environment variables and are
    never printed."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    verify_certs: bool = True

    @classmethod
    def from_env(cls, url: str, **given: Any) -> Connection:
        url, url_user, url_password = split_credentials(url)
        values = {
            "user": given.get("user") or url_user or os.environ.get("ITLR_USER"),
            "password": given.get("password") or url_password or os.environ.get("ITLR_PASSWORD"),
            "api_key": given.get("api_key") or os.environ.get("ITLR_API_KEY"),
            "ca_file": given.get("ca_file") or os.environ.get("ITLR_CA_FILE"),
        }
        return cls(url.rstrip("/"), verify_certs=given.get("verify_certs", True), **values)


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """`https://user:pass@host:9200` -> (`https://host:9200`, user, pass): the credentials
    move to the client's auth, so that no message or log line can show them with the URL."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    password = unquote(parts.password) if parts.password is not None else None
    return urlunsplit(parts._replace(netloc=netloc)), unquote(parts.username), password


@dataclass(frozen=True)
class EngineSpec:
    engine: str = "memory"
    index: str = "default"
    connection: Connection | None = None
    layout: IndexLayout = field(default_factory=IndexLayout)
    inline_script: bool = False
    knn_engine: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigurationError(f"unknown engine {self.engine!r}: choose one of {ENGINES}")
        if self.engine != "memory" and self.connection is None:
            raise ConfigurationError(
                f'`engine="{self.engine}"` needs `url` (e.g. http://localhost:9200)'
            )


def detect_engine(connection: Connection) -> tuple[str, str]:
    """(engine, version) from the cluster's root endpoint."""
    request = urllib.request.Request(connection.url + "/")
    if connection.api_key:
        request.add_header("Authorization", f"ApiKey {connection.api_key}")
    elif connection.user:
        import base64

        token = base64.b64encode(f"{connection.user}:{connection.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = None
    if connection.url.startswith("https"):
        import ssl

        context = ssl.create_default_context(cafile=connection.ca_file)
        if not connection.verify_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            body = response.read(ROOT_ANSWER_LIMIT)
    except urllib.error.HTTPError as refused:
        raise EngineError(
            f"{connection.url} answered {refused.code} to GET /: check the URL and credentials"
        ) from None
    except (urllib.error.URLError, OSError) as down:
        raise EngineError(
            f"cannot reach {connection.url} ({down}): is it running? check `url`"
        ) from None
    try:
        info = json.loads(body)
    except ValueError:  # not JSON, or not even UTF-8
        info = None
    if not isinstance(info, dict):
        raise EngineError(
            f"{connection.url} is neither OpenSearch nor Elasticsearch: GET / answered "
            f"{short_text(body.decode('utf-8', errors='replace'))}; check `url`"
        )
    version = info.get("version") if isinstance(info.get("version"), dict) else {}
    number = str(version.get("number", "?"))
    if version.get("distribution") == "opensearch":
        return "opensearch", number
    if "tagline" in info or version.get("build_flavor"):
        return "elasticsearch", number
    raise EngineError(
        f"{connection.url} is neither OpenSearch nor Elasticsearch: GET / answered "
        f"{short_text(json.dumps(info))}; check `url`"
    )


def open_backend(spec: EngineSpec, embedder: Embedder, create: bool = False):
    """An engine for the spec's index; `create` makes a missing index (ingestion)."""
    if spec.engine == "memory":
        from itlr.engines.embedded import EmbeddedIndex
        from itlr.paths import index_path

        path = index_path(spec.index)
        if create:
            return EmbeddedIndex.open_or_create(path, embedder.name, embedder.dims)
        backend = EmbeddedIndex.open(path)
        backend.check_compatible(embedder.name, embedder.dims)
        return backend

    backend = remote_backend(spec, embedder.name, embedder.dims)
    if create:
        backend.ensure_index(spec.knn_engine)
    else:
        backend.check_index()
    return backend


def remote_backend(spec: EngineSpec, model: str, dims: int):
    """A cluster backend for the spec, without touching its index yet."""
    if spec.connection is None:
        raise ConfigurationError("this needs a cluster: give `url`")
    engine = spec.engine
    version: str | None = None
    if engine == "auto":
        engine, version = detect_engine(spec.connection)
        if engine == "elasticsearch":
            from itlr.engines.elasticsearch import unsupported_version

            problem = unsupported_version(version)
            if problem:
                raise EngineError(problem)
    if engine == "opensearch":
        from itlr.engines.opensearch import OpenSearchBackend, connect

        conn = spec.connection
        client = connect(conn.url, conn.user, conn.password, conn.ca_file, conn.verify_certs)
        return OpenSearchBackend(
            client,
            spec.index,
            model,
            dims,
            layout=spec.layout,
            inline_script=spec.inline_script,
            url=conn.url,
        )
    if engine == "elasticsearch":
        from itlr.engines import elasticsearch as es

        conn = spec.connection
        client = es.connect(
            conn.url, conn.user, conn.password, conn.api_key, conn.ca_file, conn.verify_certs
        )
        # Without auto detection the version is learned on the first request (knn features).
        return es.ElasticsearchBackend(
            client,
            spec.index,
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
