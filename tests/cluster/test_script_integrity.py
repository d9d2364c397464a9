"""Integrity of the stored scripts (issue 26.6), on a real OpenSearch: a script stored under an
itlr id whose source is not the packaged file is refused, at start and when a search fails on a
script error, with one line naming `itlr install --url U`, which repairs it; the proxy refuses
writes to itlr's script ids unless started with --allow-script-writes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from itlr.cli import app as cli
from itlr.engines.connection import Connection
from itlr.engines.integrity import ScriptMismatch
from itlr.engines.opensearch import OpenSearchBackend
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import check_scripts_at_start
from itlr.retriever import Retriever

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D benefits" AND NOT "bone health"'
CLAUSE = {"query_string": {"query": f"itlr:({QUERY})"}}
# Valid Painless for script_score: a foreign script that ranks everything alike.
FOREIGN = {"script": {"lang": "painless", "source": "return 1.0;"}}
# One that fails at run time: the search itself errs on the script.
CLI = [sys.executable, "-c", "from itlr.cli import app; app()"]
FAILING = {"script": {"lang": "painless", "source": 'throw new IllegalArgumentException("x");'}}


def new_backend(url: str, index: str, embedder) -> OpenSearchBackend:
    return OpenSearchBackend(
        Connection(url).opensearch(), index, embedder.name, embedder.dims, url=url
    )


@pytest.fixture(scope="module")
def index_name(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    backend = new_backend(opensearch_url, f"itlr-integrity-{uuid.uuid4().hex[:8]}", embedder)
    backend.ensure_index()
    docs = corpus[:60]
    assert backend.add([d.id for d in docs], [d.text for d in docs], corpus_vectors[:60]) == {}
    backend.refresh()
    backend.install_scripts()
    yield backend.index_name
    backend.client.indices.delete(index=backend.index_name)


@pytest.fixture
def score_id(opensearch_url, index_name, embedder) -> Iterator[str]:
    """The score script's id; every test leaves the packaged scripts installed."""
    backend = new_backend(opensearch_url, index_name, embedder)
    yield backend.dialect.score_script.id
    backend.install_scripts()


def store(url: str, script_id: str, body: dict) -> None:
    response = httpx.put(f"{url}/_scripts/{script_id}", json=body)
    assert response.status_code == 200, response.text


def search(url: str, index: str, embedder):
    return Retriever(new_backend(url, index, embedder), embedder).search(QUERY)


def test_a_foreign_script_under_the_itlr_id_is_refused_at_the_first_search(
    opensearch_url, index_name, embedder, score_id
) -> None:
    store(opensearch_url, score_id, FOREIGN)
    with pytest.raises(ScriptMismatch) as refused:
        search(opensearch_url, index_name, embedder)
    message = str(refused.value)
    assert score_id in message and "\n" not in message
    assert f"`itlr install --url {opensearch_url}`" in message


def test_a_script_replaced_while_searching_is_refused_when_the_search_fails_on_it(
    opensearch_url, index_name, embedder, score_id
) -> None:
    backend = new_backend(opensearch_url, index_name, embedder)
    retriever = Retriever(backend, embedder)
    assert len(retriever.search(QUERY).hits) == 10  # checked once, then trusted
    store(opensearch_url, score_id, FAILING)
    with pytest.raises(ScriptMismatch, match="itlr install --url"):
        retriever.search(QUERY)


def test_a_script_deleted_while_searching_is_stored_again_and_the_search_answers(
    opensearch_url, index_name, embedder, score_id
) -> None:
    backend = new_backend(opensearch_url, index_name, embedder)
    retriever = Retriever(backend, embedder)
    before = [h.id for h in retriever.search(QUERY).hits]
    assert httpx.delete(f"{opensearch_url}/_scripts/{score_id}").status_code == 200
    assert [h.id for h in retriever.search(QUERY).hits] == before


def test_itlr_install_repairs_a_foreign_script(
    opensearch_url, index_name, embedder, score_id
) -> None:
    store(opensearch_url, score_id, FOREIGN)
    result = CliRunner().invoke(cli, ["install", "--url", opensearch_url])
    assert result.exit_code == 0, result.output
    assert score_id in result.output
    assert len(search(opensearch_url, index_name, embedder).hits) == 10
    again = CliRunner().invoke(cli, ["install", "--url", opensearch_url])
    assert "already installed" in again.output


def test_the_proxy_refuses_to_start_in_front_of_a_foreign_script(opensearch_url, score_id) -> None:
    assert check_scripts_at_start(Connection(opensearch_url), 10) is None
    store(opensearch_url, score_id, FOREIGN)
    with pytest.raises(ScriptMismatch):
        check_scripts_at_start(Connection(opensearch_url), 10)
    # The command line: one line, exit 2, before the model loads.
    result = subprocess.run(
        [*CLI, "serve", "--proxy", "--url", opensearch_url, "--engine", "opensearch"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"itlr install --url {opensearch_url}" in errors[0]
    assert "Traceback" not in result.stderr


def test_the_proxy_answers_a_foreign_script_with_a_502_naming_the_repair(
    opensearch_url, index_name, embedder, score_id
) -> None:
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as proxy:
        body = {"size": 5, "query": CLAUSE}
        assert httpx.post(f"{proxy}/{index_name}/_search", json=body, timeout=60).is_success
        store(opensearch_url, score_id, FAILING)  # after the proxy checked it once
        response = httpx.post(f"{proxy}/{index_name}/_search", json=body, timeout=60)
    assert response.status_code == 502, response.text[:300]
    error = response.json()["error"]
    assert error["type"] == "itlr_script_mismatch"
    assert f"itlr install --url {opensearch_url}" in error["reason"]


def test_the_proxy_refuses_writes_to_itlr_script_ids(opensearch_url, embedder, score_id) -> None:
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as proxy:
        for method in ("PUT", "POST", "DELETE"):
            body = FOREIGN if method != "DELETE" else None
            response = httpx.request(method, f"{proxy}/_scripts/{score_id}", json=body)
            assert response.status_code == 403, (method, response.text)
            assert "--allow-script-writes" in response.json()["error"]["reason"]
        # Reading passes, and other script ids are the cluster's business.
        assert httpx.get(f"{proxy}/_scripts/{score_id}").status_code == 200
        other = f"someone-else-{uuid.uuid4().hex[:6]}"
        assert httpx.put(f"{proxy}/_scripts/{other}", json=FOREIGN).status_code == 200
        httpx.delete(f"{opensearch_url}/_scripts/{other}")
    stored = httpx.get(f"{opensearch_url}/_scripts/{score_id}").json()["script"]["source"]
    assert stored != FOREIGN["script"]["source"]


def test_the_proxy_passes_script_writes_when_allowed(opensearch_url, embedder, score_id) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, allow_script_writes=True)
    with serving(app) as proxy:
        assert httpx.put(f"{proxy}/_scripts/{score_id}", json=FOREIGN).status_code == 200
    stored = httpx.get(f"{opensearch_url}/_scripts/{score_id}").json()["script"]["source"]
    assert stored == FOREIGN["script"]["source"]
