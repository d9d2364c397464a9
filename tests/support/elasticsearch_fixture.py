"""pytest plugin: a real Elasticsearch for the tests that ask for it.

Register it with ``pytest_plugins = ["elasticsearch_fixture"]`` (tests/support is on ``pythonpath``).
Same design as ``opensearch_fixture.py``, whose machinery it reuses:

- ``elasticsearch_url`` (session) -> base URL: ``ITLR_ELASTICSEARCH_URL`` if set, else a Docker
  container (``docker.elastic.co/elasticsearch/elasticsearch:<scripts/elasticsearch.version>``,
  security off) when ``docker info`` succeeds and testcontainers is importable, else a local node
  from ``scripts/opensearch_local.py`` (engine ``elasticsearch``, Maven Central's integ-test-zip).
- ``elasticsearch_painless_url`` (session) -> the same URL, but only if the server has Painless.
  The local integ-test-zip node has NO lang-painless module (``dense_vector`` and the ``knn``
  query work; ``script_score`` does not), so tests that need Painless get skipped there.

Unavailable -> skip with the reason, or fail when ``ITLR_REQUIRE_ELASTICSEARCH=1``.
Also registers the marker ``elasticsearch``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def _base() -> ModuleType:
    for name in ("opensearch_fixture", "tests.opensearch_fixture"):
        if name in sys.modules:
            return sys.modules[name]
    try:
        return importlib.import_module("opensearch_fixture")
    except ImportError:
        path = Path(__file__).resolve().with_name("opensearch_fixture.py")
        spec = importlib.util.spec_from_file_location("opensearch_fixture", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["opensearch_fixture"] = module
        spec.loader.exec_module(module)
        return module


_server = _base()

ELASTICSEARCH = _server.ServerSpec(
    engine="elasticsearch",
    label="Elasticsearch",
    url_env="ITLR_ELASTICSEARCH_URL",
    require_env="ITLR_REQUIRE_ELASTICSEARCH",
    docker_image="docker.elastic.co/elasticsearch/elasticsearch:{version}",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "elasticsearch: needs a real Elasticsearch (fixtures elasticsearch_url, "
        "elasticsearch_painless_url; env ITLR_ELASTICSEARCH_URL, ITLR_REQUIRE_ELASTICSEARCH=1 "
        "to fail instead of skip)",
    )


@pytest.fixture(scope="session")
def elasticsearch_url() -> Iterator[str]:
    """Base URL of a real Elasticsearch (``dense_vector`` + ``knn`` query; maybe no Painless)."""
    yield from _server.provide_server(ELASTICSEARCH)


@pytest.fixture(scope="session")
def elasticsearch_painless_url(elasticsearch_url: str) -> str:
    """Base URL of a real Elasticsearch that also runs Painless (``script_score``)."""
    if not _server.has_painless(elasticsearch_url):
        _server.unavailable(
            ELASTICSEARCH,
            f"{elasticsearch_url} has no Painless (the Maven Central integ-test-zip lacks the "
            "lang-painless module); point ITLR_ELASTICSEARCH_URL at a full Elasticsearch, e.g. "
            "`docker compose --profile elastic up -d` -> http://127.0.0.1:9201",
        )
    return elasticsearch_url
