"""pytest plugin: a real OpenSearch for the tests that ask for it.

Register it with ``pytest_plugins = ["opensearch_fixture"]`` (tests/support is on ``pythonpath``).

Session fixture ``opensearch_url`` -> base URL without trailing slash, obtained in this order:

1. ``ITLR_OPENSEARCH_URL`` if set (any answer over HTTP counts as reachable);
2. a Docker container (``testcontainers``' OpenSearchContainer, image
   ``opensearchproject/opensearch:<scripts/opensearch.version>``) when ``docker info`` succeeds
   and testcontainers is importable;
3. a local node from ``scripts/opensearch_local.py`` (Maven Central download, cached in
   ``~/.cache/itlr``; started on 127.0.0.1 and stopped at the end of the session).

If none works the tests that use the fixture are skipped with the reasons, or fail when
``ITLR_REQUIRE_OPENSEARCH=1``. Also registers the marker ``opensearch``.

The machinery is generic (``ServerSpec``, ``provide_server``); ``elasticsearch_fixture.py``
reuses it for Elasticsearch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
TRUTHY = {"1", "true", "yes", "on"}
CONTAINER_HEAP = "-Xms512m -Xmx512m"


@dataclass(frozen=True)
class ServerSpec:
    engine: str  # "opensearch" | "elasticsearch": the engine name of scripts/opensearch_local.py
    label: str
    url_env: str
    require_env: str
    docker_image: str  # "{version}" is replaced by scripts/<engine>.version

    @property
    def required(self) -> bool:
        return os.environ.get(self.require_env, "").strip().lower() in TRUTHY

    def version(self) -> str:
        return (SCRIPTS / f"{self.engine}.version").read_text(encoding="utf-8").strip()


OPENSEARCH = ServerSpec(
    engine="opensearch",
    label="OpenSearch",
    url_env="ITLR_OPENSEARCH_URL",
    require_env="ITLR_REQUIRE_OPENSEARCH",
    docker_image="opensearchproject/opensearch:{version}",
)


def load_local_module() -> ModuleType:
    """``scripts/opensearch_local.py``, loaded by path (scripts/ is not a package)."""
    loaded = sys.modules.get("opensearch_local")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(
        "opensearch_local", SCRIPTS / "opensearch_local.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["opensearch_local"] = module  # dataclasses need the module registered
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["opensearch_local"]
        raise
    return module


def unavailable(spec: ServerSpec, reason: str) -> None:
    """Skip (or, with ``<REQUIRE env>=1``, fail) the requesting tests."""
    message = f"no {spec.label} available: {reason}"
    if spec.required:
        pytest.fail(f"{message} ({spec.require_env} is set)", pytrace=False)
    pytest.skip(f"{message} (set {spec.url_env}, or {spec.require_env}=1 to fail instead)")


def get_json(url: str, timeout: float = 10.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _request(url: str, path: str, method: str = "GET") -> object:
    request = urllib.request.Request(url + path, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _itlr_indices(url: str) -> set[str]:
    """The cluster's indices named itlr-*, the prefix every test index has."""
    rows = _request(url, "/_cat/indices/itlr-*?format=json&h=index&expand_wildcards=open")
    return {row["index"] for row in rows}  # type: ignore[union-attr]


def unreachable_reason(url: str) -> str | None:
    """None if a server answers at ``url`` (any HTTP status: it may want credentials)."""
    try:
        get_json(f"{url}/_cluster/health")
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def has_painless(url: str) -> bool:
    """Whether the server at ``url`` has the Painless script language."""
    with contextlib.suppress(OSError, ValueError):
        info = get_json(f"{url}/_script_language")
        languages = info.get("language_contexts") or [] if isinstance(info, dict) else []
        return any(entry.get("language") == "painless" for entry in languages)
    return False


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _container(spec: ServerSpec) -> object:
    """A testcontainers container for ``spec`` (not started). ImportError without testcontainers."""
    image = spec.docker_image.format(version=spec.version())
    if spec.engine == "opensearch":
        try:
            from testcontainers.community.opensearch import OpenSearchContainer
        except ImportError:  # testcontainers before the "community" move
            from testcontainers.opensearch import OpenSearchContainer
        container = OpenSearchContainer(image, security_enabled=False)
        container.with_env("DISABLE_INSTALL_DEMO_CONFIG", "true")
        container.with_env("OPENSEARCH_JAVA_OPTS", CONTAINER_HEAP)
        return container
    try:
        from testcontainers.community.elasticsearch import ElasticSearchContainer
    except ImportError:
        from testcontainers.elasticsearch import ElasticSearchContainer
    container = ElasticSearchContainer(image)  # sets xpack.security.enabled=false for 8.x/9.x
    container.with_env("ES_JAVA_OPTS", CONTAINER_HEAP)
    return container


def _start_docker(spec: ServerSpec) -> tuple[str, Callable[[], None]]:
    container = _container(spec)
    container.start()  # type: ignore[attr-defined]
    try:
        host = container.get_container_host_ip()  # type: ignore[attr-defined]
        port = container.get_exposed_port(9200)  # type: ignore[attr-defined]
    except BaseException:
        container.stop()  # type: ignore[attr-defined]
        raise
    return f"http://{host}:{port}", container.stop  # type: ignore[attr-defined]


def _start_local(spec: ServerSpec) -> tuple[str, Callable[[], None]]:
    local = load_local_module()
    node = local.start_node(engine=spec.engine)
    return node.url, node.stop


def provide_server(spec: ServerSpec) -> Iterator[str]:
    """Body of a session fixture: yield a base URL for ``spec``, clean up afterwards."""
    url = os.environ.get(spec.url_env, "").strip().rstrip("/")
    if url:
        reason = unreachable_reason(url)
        if reason:
            unavailable(spec, f"{spec.url_env}={url} does not answer ({reason})")
        before = _itlr_indices(url)
        try:
            yield url
        finally:
            # Someone else's cluster: leave it as found, minus nothing that was there before.
            for name in _itlr_indices(url) - before:
                _request(url, f"/{name}", "DELETE")
        return

    reasons: list[str] = []
    started: tuple[str, Callable[[], None]] | None = None
    if docker_available():
        try:
            started = _start_docker(spec)
        except ImportError as err:
            reasons.append(f"Docker is reachable but testcontainers is not importable ({err})")
        except Exception as err:
            reasons.append(f"Docker container failed: {type(err).__name__}: {err}")
    else:
        reasons.append("no Docker engine reachable")
    if started is None:
        try:
            started = _start_local(spec)
        except Exception as err:
            reasons.append(f"local node failed: {type(err).__name__}: {err}")
    if started is None:
        unavailable(spec, "; ".join(reasons))
        return  # unreachable: unavailable() raises
    url, stop = started
    try:
        yield url
    finally:
        stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "multinode: starts a three-node OpenSearch cluster on loopback (scripts/opensearch_local.py "
        "start_cluster); skipped only where the machine lacks the memory",
    )
    config.addinivalue_line(
        "markers",
        "opensearch: needs a real OpenSearch (fixture opensearch_url; env ITLR_OPENSEARCH_URL, "
        "ITLR_REQUIRE_OPENSEARCH=1 to fail instead of skip)",
    )


@pytest.fixture(scope="session")
def opensearch_url() -> Iterator[str]:
    """Base URL of a real OpenSearch with the k-NN plugin (see the module docstring)."""
    yield from provide_server(OPENSEARCH)
