from __future__ import annotations

import os
from pathlib import Path

import pytest

# Real servers: fixtures `opensearch_url`, `elasticsearch_url`, `elasticsearch_painless_url`.
pytest_plugins = ["opensearch_fixture", "elasticsearch_fixture"]

# Tests never touch the user's indexes or caches.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def itlr_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.getbasetemp() / "itlr-home"
    monkeypatch.setenv("ITLR_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def embedder():
    """The real bundled model, loaded once for the whole run."""
    from itlr.embed import get_embedder

    return get_embedder()
