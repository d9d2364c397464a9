"""Script and pipeline integrity while itlr runs (issue 57.3), on a real OpenSearch: the JSON
service, the query-bar proxy and the follower compare itlr's stored scripts and its hash-guard
ingest pipeline again on an interval and after a failure, refuse to score with a foreign script
(a one-line error naming `itlr install`), store again what was deleted, and the proxy refuses
writes to the pipeline as it does to the scripts. Before, a replaced score script kept scoring
(`_score: 42.0`) in a running service, and the pipeline could be emptied through the proxy."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

import itlr
from foreign_index import create_index, delete_index, documents
from itlr.engines.connection import Connection
from itlr.hash_guard import PIPELINE, PIPELINE_ID
from itlr.proxy import create_proxy_app, serving
from itlr.service import create_app

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'
FOREIGN = {"script": {"lang": "painless", "source": "return 42.0;"}}
EMPTIED = {"description": "emptied", "processors": []}


@pytest.fixture(scope="module")
def guarded_index(opensearch_url, corpus) -> Iterator[str]:
    """An index back-filled with itlr's hash-guard pipeline as its final pipeline."""
    name = create_index(opensearch_url, "opensearch", documents(corpus, 24))
    itlr.Index.backfill(
        name, url=opensearch_url, text_field="body", vector_field="vec", install_pipeline=True
    )
    yield name
    delete_index(opensearch_url, name)


@pytest.fixture
def index(opensearch_url, guarded_index) -> Iterator[itlr.Index]:
    """The index as the service opens it, checking its scripts every second; every test
    leaves the packaged scripts and pipeline installed."""
    opened = itlr.Index.open(
        guarded_index, url=opensearch_url, vector_field="vec", text_field="body"
    )
    opened.backend.script_check_seconds = 1.0
    yield opened
    opened.backend.install_scripts()
    httpx.put(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}", json=PIPELINE, timeout=30)


def pipeline(url: str) -> httpx.Response:
    return httpx.get(f"{url}/_ingest/pipeline/{PIPELINE_ID}", timeout=30)


def test_the_service_refuses_a_replaced_script_within_the_interval(opensearch_url, index) -> None:
    script_id = index.backend.dialect.score_script.id
    with serving(create_app(index)) as url:
        before = httpx.post(f"{url}/search", json={"query": QUERY, "k": 5}, timeout=60)
        assert before.status_code == 200, before.text
        scores = [hit["score"] for hit in before.json()["hits"]]
        httpx.put(f"{opensearch_url}/_scripts/{script_id}", json=FOREIGN).raise_for_status()
        time.sleep(1.2)
        refused = httpx.post(f"{url}/search", json={"query": QUERY, "k": 5}, timeout=60)
        assert refused.status_code == 502, refused.text[:300]
        error = refused.json()["error"]
        assert script_id in error and "itlr install --url" in error and "\n" not in error
        index.backend.install_scripts()
        time.sleep(1.2)
        again = httpx.post(f"{url}/search", json={"query": QUERY, "k": 5}, timeout=60)
        assert again.status_code == 200, again.text[:300]
        assert [hit["score"] for hit in again.json()["hits"]] == scores


def test_the_service_stores_a_deleted_script_and_pipeline_again(opensearch_url, index) -> None:
    script_id = index.backend.dialect.score_script.id
    with serving(create_app(index)) as url:
        assert httpx.post(f"{url}/search", json={"query": QUERY}, timeout=60).status_code == 200
        httpx.delete(f"{opensearch_url}/_scripts/{script_id}").raise_for_status()
        httpx.delete(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}").raise_for_status()
        time.sleep(1.2)
        answer = httpx.post(f"{url}/search", json={"query": QUERY}, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
    assert httpx.get(f"{opensearch_url}/_scripts/{script_id}").status_code == 200
    stored = pipeline(opensearch_url)
    assert (
        stored.status_code == 200
        and stored.json()[PIPELINE_ID]["processors"] == PIPELINE["processors"]
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/_ingest/pipeline/{id}"),
        ("DELETE", "/_ingest/pipeline/{id}"),
        ("DELETE", "/_ingest/pipeline/*"),
        ("DELETE", "/_ingest/pipeline/itlr-hash-*"),
        ("DELETE", "/_ingest/pipeline/other,{id}"),
        ("PUT", "/_ingest//pipeline/{id}/"),
        ("PUT", "/%5Fingest/pipeline/{id}"),
    ],
    ids=[
        "put",
        "delete",
        "delete-all",
        "delete-pattern",
        "delete-list",
        "empty-segment",
        "escaped",
    ],
)
def test_the_proxy_refuses_writes_to_itlrs_pipeline(
    opensearch_url, embedder, guarded_index, method, path
) -> None:
    before = pipeline(opensearch_url).json()
    with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
        answer = httpx.request(method, url + path.format(id=PIPELINE_ID), json=EMPTIED, timeout=60)
    assert answer.status_code == 403, answer.text[:300]
    reason = answer.json()["error"]["reason"]
    assert PIPELINE_ID in reason and "--allow-script-writes" in reason
    assert pipeline(opensearch_url).json() == before


def test_the_proxy_stores_a_deleted_pipeline_again_on_its_own_schedule(
    opensearch_url, embedder, guarded_index
) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, script_check_seconds=1)
    try:
        with serving(app):
            # The proxy's own schedule runs from its start, searched or not: it sees the pipeline.
            time.sleep(1.0)
            httpx.delete(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}").raise_for_status()
            deadline = time.monotonic() + 10
            while pipeline(opensearch_url).status_code != 200:
                assert time.monotonic() < deadline, "the proxy did not store the pipeline again"
                time.sleep(0.2)
    finally:
        httpx.put(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}", json=PIPELINE, timeout=30)
    assert pipeline(opensearch_url).json()[PIPELINE_ID]["processors"] == PIPELINE["processors"]


def test_a_follower_stops_in_one_line_on_an_emptied_pipeline(opensearch_url, guarded_index) -> None:
    # The follower looks at its index (and itlr's pipeline) every RECHECK_SECONDS (10 s).
    stop = threading.Event()
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            itlr.Index.follow(
                guarded_index,
                url=opensearch_url,
                text_field="body",
                vector_field="vec",
                stop=stop,
                interval=0.2,
            )
        except BaseException as stopped:
            failure.append(stopped)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)
        httpx.put(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}", json=EMPTIED, timeout=30)
        thread.join(30)
        assert not thread.is_alive(), "the follower carried on with an emptied pipeline"
    finally:
        stop.set()
        thread.join(30)
        httpx.put(f"{opensearch_url}/_ingest/pipeline/{PIPELINE_ID}", json=PIPELINE, timeout=30)
    (stopped,) = failure
    message = str(stopped)
    assert PIPELINE_ID in message and "--install-pipeline" in message and "\n" not in message
