#!/usr/bin/env python3
"""Fetch and run a real Elasticsearch node on 127.0.0.1, without Docker.

A thin front end to ``opensearch_local.py`` (same cache, same node handling) with
``engine="elasticsearch"`` and the version from ``scripts/elasticsearch.version``::

    python scripts/elasticsearch_local.py fetch
    python scripts/elasticsearch_local.py run [--port N]

The distribution is ``org.elasticsearch.distribution.integ-test-zip:elasticsearch:<version>:zip``
from Maven Central. It holds the server (``dense_vector``, the ``knn`` query) with the
x-pack-core/security modules, but NOT the lang-painless module: ``script_score`` with Painless
(``cosineSimilarity`` ...) fails there with ``script_lang not supported [painless]``. For
Painless use the Docker image (docker-compose profile ``elastic``) or a real cluster.
Security is disabled (``xpack.security.enabled=false``); the node listens on 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ENGINE = "elasticsearch"


def _core() -> ModuleType:
    loaded = sys.modules.get("opensearch_local")
    if loaded is not None:
        return loaded
    path = Path(__file__).resolve().with_name("opensearch_local.py")
    spec = importlib.util.spec_from_file_location("opensearch_local", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["opensearch_local"] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


_local = _core()
LocalNode = _local.LocalNode
NodeStartError = _local.NodeStartError


def read_version() -> str:
    return _local.read_version(ENGINE)


def ensure_installed(version: str | None = None) -> Path:
    """Download and unpack the Elasticsearch integ-test-zip; return its home."""
    return _local.ensure_installed(version, engine=ENGINE)


def start_node(
    home: Path | None = None, port: int | None = None, heap: str = "512m", **kwargs: object
) -> LocalNode:
    """Start a fresh single-node Elasticsearch on 127.0.0.1 (see ``opensearch_local.start_node``)."""
    return _local.start_node(home, port, heap, engine=ENGINE, **kwargs)


def main(argv: list[str] | None = None) -> int:
    return _local.main(argv, engine=ENGINE)


if __name__ == "__main__":
    sys.exit(main())
