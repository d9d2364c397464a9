"""Every search on a cluster index knows how many documents it cannot score (a text but no
vector): the warning with the count and the command, and `exact` never true while they exist,
in the Python result, the CLI JSON, the service and the proxy (whose health and metrics count
them per index)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import itlr
from foreign_index import bulk, create_index, delete_index, documents
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import IndexConfig
from itlr.service.app import create_app

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'
MISSING = "3 of 24 documents of '{name}' have a 'body' but no vector in 'vec'"


@pytest.fixture(scope="module")
def partly_embedded(opensearch_url, corpus, embedder) -> Iterator[str]:
    """20 documents back-filled, then 3 with text and 1 without written through REST."""
    docs = documents(corpus, 24)
    name = create_index(opensearch_url, "opensearch", docs[:20], prefix="itlr-coverage")
    itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
    untexted = {k: v for k, v in docs[23].items() if k != "body"}
    bulk(opensearch_url, name, [*docs[20:23], untexted])
    yield name
    delete_index(opensearch_url, name)


def open_index(url: str, name: str) -> itlr.Index:
    return itlr.Index.open(name, url=url, vector_field="vec", text_field="body")


def the_warning(warnings, name: str) -> str:
    (said,) = [w for w in warnings if "but no vector" in w]
    assert said.startswith(MISSING.format(name=name)), said
    assert f"itlr backfill --url URL --index {name} --text-field body --vector-field vec" in said
    return said


@pytest.mark.parametrize("mode", ["exact", "knn"])
def test_the_python_result_warns_and_is_not_exact(mode, opensearch_url, partly_embedded) -> None:
    index = open_index(opensearch_url, partly_embedded)
    result = index.search(QUERY, k=5, mode=mode)
    the_warning(result.warnings, partly_embedded)
    assert result.exact is not True
    coverage = index.coverage()
    assert coverage is not None
    assert (coverage.total, coverage.without_vector, coverage.without_text) == (24, 3, 1)


def test_the_cli_json_warns_and_is_not_exact(opensearch_url, partly_embedded) -> None:
    args = ["search", QUERY, "--url", opensearch_url, "--index", partly_embedded, "--json"]
    result = CliRunner().invoke(
        app, [*args, "--vector-field", "vec", "--text-field", "body", "--mode", "exact"]
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    the_warning(answer["warnings"], partly_embedded)
    assert answer["exact"] is not True


def test_the_service_warns_and_reports_coverage(opensearch_url, partly_embedded) -> None:
    index = open_index(opensearch_url, partly_embedded)
    with TestClient(create_app(index)) as client:
        answer = client.post("/search", json={"query": QUERY, "k": 5, "mode": "exact"}).json()
        the_warning(answer["warnings"], partly_embedded)
        assert answer["exact"] is not True
        health = client.get("/healthz").json()
        assert health["coverage"] == {
            "index": partly_embedded,
            "documents": 24,
            "with_vector": 20,
            "without_vector": 3,
            "without_text": 1,
            "unverified": 0,
            "failing": 0,
            "verified_through": None,
        }
        metrics = client.get("/metrics").text
        assert f'itlr_index_documents_without_vector{{index="{partly_embedded}"}} 3' in metrics
        assert f'itlr_index_documents{{index="{partly_embedded}"}} 24' in metrics


def test_the_proxy_reports_coverage_per_index(opensearch_url, partly_embedded, embedder) -> None:
    config = IndexConfig("itlr-coverage-*", "vec", "body")
    proxy = create_proxy_app(Connection(opensearch_url), embedder=embedder, indexes=(config,))
    body = {"size": 5, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    with serving(proxy) as url:
        health = httpx.get(f"{url}/_itlr/healthz", timeout=60).json()
        assert health["status"] == "ok" and health["coverage"] == {}  # nothing searched yet
        named = httpx.get(f"{url}/_itlr/healthz", params={"index": partly_embedded}, timeout=60)
        assert named.json()["coverage"][partly_embedded]["without_vector"] == 3
        searched = httpx.post(f"{url}/{partly_embedded}/_search", json=body, timeout=60)
        assert searched.status_code == 200, searched.text
        # The search itself says so, as the engines send their warnings: a Warning header.
        # (The engine may send warnings of its own in the same header, before itlr's.)
        warning = searched.headers["warning"]
        ours = warning[warning.index('299 itlr "') :]
        assert ours.endswith('"'), warning
        the_warning([ours.removeprefix('299 itlr "')], partly_embedded)
        plain = {"size": 5, "query": {"match": {"body": "vitamin"}}}
        untouched = httpx.post(f"{url}/{partly_embedded}/_search", json=plain, timeout=60)
        assert untouched.status_code == 200
        assert "itlr" not in untouched.headers.get("warning", "")
        health = httpx.get(f"{url}/_itlr/healthz", timeout=60).json()
        assert health["coverage"][partly_embedded] == {
            "index": partly_embedded,
            "documents": 24,
            "with_vector": 20,
            "without_vector": 3,
            "without_text": 1,
            "unverified": 0,
            "failing": 0,
            "verified_through": None,
        }
        metrics = httpx.get(f"{url}/_itlr/metrics", timeout=60).text
        assert f'itlr_index_documents_without_vector{{index="{partly_embedded}"}} 3' in metrics


def test_a_fully_embedded_index_has_no_warning_and_exact_holds(opensearch_url, corpus) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 12))
    try:
        itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        bulk(opensearch_url, name, [{"_id": "no-text", "year": 2001, "topic": "sleep"}])
        index = open_index(opensearch_url, name)
        result = index.search(QUERY, k=5, mode="exact")
        assert not [w for w in result.warnings if "no vector" in w]
        assert result.exact is True
        coverage = index.coverage()
        assert coverage is not None and (coverage.without_vector, coverage.without_text) == (0, 1)
    finally:
        delete_index(opensearch_url, name)


def test_a_count_is_reused_for_its_time_to_live_then_counted_again(monkeypatch) -> None:
    from itlr.engines import coverage as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    cache = module.CoverageCache(ttl=5.0)
    counted = []

    def count() -> module.Coverage:
        counted.append(now[0])
        return module.Coverage("idx", 10, len(counted), 0)

    assert cache.get("idx", count).without_vector == 1
    now[0] += 4.9
    assert cache.get("idx", count).without_vector == 1  # reused
    now[0] += 0.2
    assert cache.get("idx", count).without_vector == 2  # older than 5 s: counted again
    cache.forget()
    assert cache.get("idx", count).without_vector == 3  # an own write forgets it
    assert counted == pytest.approx([100.0, 105.1, 105.1])


def test_a_search_after_an_own_write_counts_again(opensearch_url, corpus) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 6))
    try:
        itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        index = open_index(opensearch_url, name)
        assert index.search(QUERY, k=3, mode="exact").exact is True
        bulk(opensearch_url, name, [{"_id": "late", "body": "A late article on vitamin D."}])
        index.backend.refresh()  # as after itlr's own writes: the cached count is dropped
        result = index.search(QUERY, k=3, mode="exact")
        assert result.exact is False
        assert any(w.startswith(f"1 of 7 documents of '{name}'") for w in result.warnings)
    finally:
        delete_index(opensearch_url, name)
