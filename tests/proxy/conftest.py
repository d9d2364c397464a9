"""The query-bar proxy in front of the session's real OpenSearch, shared by the proxy tests: one
per test module, served by uvicorn on a free loopback port as a UI would reach it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving


@pytest.fixture(scope="module")
def proxy_url(opensearch_url: str, embedder) -> Iterator[str]:
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def client(proxy_url: str) -> Iterator[httpx.Client]:
    """An HTTP client of the module's proxy."""
    with httpx.Client(base_url=proxy_url, timeout=120) as client:
        yield client
