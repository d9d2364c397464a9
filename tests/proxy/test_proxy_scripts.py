"""The proxy's hold on itlr's stored scripts (issue 42.5), in front of a real OpenSearch: a path
with dot segments cannot reach a script id past the write guard (`PUT /_scripts/./itlr-...`
overwrote the score script before), and a running proxy compares the scripts again at a bounded
interval and after any write to `_scripts` it relays, so a script overwritten on the engine
directly is noticed: logical searches are refused (502 naming `itlr install`) until the packaged
script is back, rather than answered with the foreign script's scores or silently repaired."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from typer.testing import CliRunner

from demo_backend import demo_backend
from itlr.cli import app as cli
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.proxy import create_proxy_app, serving

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D benefits" AND NOT "bone health"'
LOGICAL = {"size": 5, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
FOREIGN = {"script": {"lang": "painless", "source": "return 1.0;"}}


@pytest.fixture(scope="module")
def backend(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[OpenSearchBackend]:
    docs, vectors = corpus[:60], corpus_vectors[:60]
    with demo_backend(
        opensearch_url, "itlr-proxy-scripts", embedder, docs, vectors, with_scripts=True
    ) as backend:
        yield backend


@pytest.fixture
def score_id(backend) -> Iterator[str]:
    """The score script's id; every test leaves the packaged scripts installed."""
    yield backend.dialect.score_script.id
    backend.install_scripts()


def stored_source(url: str, script_id: str) -> str:
    return httpx.get(f"{url}/_scripts/{script_id}").json()["script"]["source"]


def raw_request(base: str, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    """A request whose path goes out exactly as written (httpx would resolve dot segments)."""
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body, {"content-type": "application/json"})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def logical_search(url: str, index: str) -> httpx.Response:
    return httpx.post(f"{url}/{index}/_search", json=LOGICAL, timeout=60)


def assert_mismatch(response: httpx.Response, script_id: str) -> None:
    assert response.status_code == 502, response.text[:400]
    error = response.json()["error"]
    assert error["type"] == "itlr_script_mismatch"
    assert script_id in error["reason"] and "itlr install --url" in error["reason"]


@pytest.mark.parametrize(
    "path",
    [
        "/_scripts/./{id}",
        "/_scripts/x/../{id}",
        "/_scripts/%2e/{id}",
        "/_scripts/x/%2E%2E/{id}",
        "/_scripts/x%2F..%2F{id}",
    ],
    ids=["dot", "dot-dot", "encoded-dot", "encoded-dot-dot", "encoded-slashes"],
)
def test_a_dot_segment_path_cannot_overwrite_itlr_scripts(
    opensearch_url, embedder, score_id, path
) -> None:
    packaged = stored_source(opensearch_url, score_id)
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        status, body = raw_request(
            url,
            "PUT",
            path.format(id=score_id),
            b'{"script": {"lang": "painless", "source": "return 1.0;"}}',
        )
    assert status == 400, body[:300]
    assert b"dot segments" in body
    assert stored_source(opensearch_url, score_id) == packaged


def test_a_script_overwritten_on_the_engine_is_noticed_within_the_check_interval(
    opensearch_url, embedder, backend, score_id
) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, script_check_seconds=1)
    with serving(app) as url:
        before = logical_search(url, backend.index_name)
        assert before.status_code == 200, before.text[:300]
        scores = [hit["_score"] for hit in before.json()["hits"]["hits"]]
        assert len(set(scores)) > 1
        httpx.put(f"{opensearch_url}/_scripts/{score_id}", json=FOREIGN).raise_for_status()
        time.sleep(1.2)
        assert_mismatch(logical_search(url, backend.index_name), score_id)
        # Refused, not repaired behind the operator's back, until the packaged script is back.
        assert_mismatch(logical_search(url, backend.index_name), score_id)
        assert stored_source(opensearch_url, score_id) == FOREIGN["script"]["source"]
        backend.install_scripts()
        # The proxy's own check notices within a second (it looks every second while a
        # script is foreign), without any search asking it to.
        time.sleep(1.5)
        again = logical_search(url, backend.index_name)
        assert again.status_code == 200, again.text[:300]
        assert [hit["_score"] for hit in again.json()["hits"]["hits"]] == scores


def test_a_script_write_relayed_by_the_proxy_is_checked_at_the_next_search(
    opensearch_url, embedder, backend, score_id
) -> None:
    app = create_proxy_app(
        Connection(opensearch_url),
        embedder=embedder,
        allow_script_writes=True,
        script_check_seconds=3600,
    )
    with serving(app) as url:
        assert logical_search(url, backend.index_name).status_code == 200
        written = httpx.put(f"{url}/_scripts/{score_id}", json=FOREIGN)
        assert written.status_code == 200, written.text
        assert_mismatch(logical_search(url, backend.index_name), score_id)


def test_a_script_deleted_on_the_engine_is_stored_again_after_the_interval(
    opensearch_url, embedder, backend, score_id
) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, script_check_seconds=1)
    with serving(app) as url:
        assert logical_search(url, backend.index_name).status_code == 200
        httpx.delete(f"{opensearch_url}/_scripts/{score_id}").raise_for_status()
        time.sleep(1.2)
        answer = logical_search(url, backend.index_name)
        assert answer.status_code == 200, answer.text[:300]
    assert httpx.get(f"{opensearch_url}/_scripts/{score_id}").status_code == 200


@pytest.mark.parametrize("seconds", ["0", "-1", "inf", "nan", "3601"])
def test_a_script_check_interval_out_of_bounds_is_refused_in_one_line(seconds) -> None:
    result = CliRunner().invoke(
        cli,
        ["serve", "--proxy", "--url", "http://127.0.0.1:1", "--script-check-interval", seconds],
    )
    assert result.exit_code == 2, result.output
    assert "--script-check-interval" in result.output and "at most 3600" in result.output
