"""Every wait on the cluster has a deadline for the whole answer, not one per read (issue 56.6),
in the query-bar proxy and the JSON service: a real OpenSearch behind a relay that slows its
answers to a byte every quarter second (tests/support/trickle_relay.py) is cut off at the
deadline, where each read's time-out alone waited for ever; a statistics count cut off so is
dropped, and the next search counts afresh instead of waiting on it (one logical query stayed
wedged for 40 minutes before)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

import itlr
from demo_backend import demo_backend
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.service import create_app
from trickle_relay import TrickleRelay

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'
LOGICAL = {"size": 3, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
PLAIN = {"size": 3, "query": {"match": {"text": "vitamin"}}}
# Above what a logical search takes on a busy machine; far below a trickled answer's minutes.
DEADLINE = 6.0
CLIENT_WAIT = 40.0


@pytest.fixture(scope="module")
def demo(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    docs, vectors = corpus[:40], corpus_vectors[:40]
    with demo_backend(
        opensearch_url, "itlr-deadline", embedder, docs, vectors, with_scripts=True
    ) as backend:
        yield backend.index_name


@pytest.fixture
def relay(opensearch_url) -> Iterator[TrickleRelay]:
    with TrickleRelay(opensearch_url) as relay:
        yield relay


def timed(send) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = send()
    return answer, time.monotonic() - started


def assert_cut_off(answer: httpx.Response, seconds: float) -> None:
    assert answer.status_code == 504, answer.text[:300]
    assert seconds < DEADLINE + 10, seconds  # the deadline and a little work, not minutes


def test_the_proxy_cuts_off_a_trickled_answer_at_its_deadline(relay, embedder, demo) -> None:
    app = create_proxy_app(Connection(relay.url), embedder=embedder, timeout=DEADLINE)
    with serving(app) as url:
        assert httpx.post(f"{url}/{demo}/_search", json=PLAIN, timeout=CLIENT_WAIT).is_success
        relay.trickling.set()
        answer, seconds = timed(
            lambda: httpx.post(f"{url}/{demo}/_search", json=PLAIN, timeout=CLIENT_WAIT)
        )
    assert_cut_off(answer, seconds)
    assert answer.json()["error"]["type"] == "itlr_upstream_timeout"


def test_the_proxys_own_reads_are_cut_off_at_its_deadline(relay, embedder, demo) -> None:
    app = create_proxy_app(Connection(relay.url), embedder=embedder, timeout=DEADLINE)
    with serving(app) as url:
        relay.trickling.set()  # the index's mapping, read for the logical search, trickles
        answer, seconds = timed(
            lambda: httpx.post(f"{url}/{demo}/_search", json=LOGICAL, timeout=CLIENT_WAIT)
        )
    assert_cut_off(answer, seconds)


def test_a_statistics_count_cut_off_is_dropped_and_the_next_search_counts_again(
    relay, embedder, demo, monkeypatch
) -> None:
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", "0.1")  # every search counts its statistics
    app = create_proxy_app(Connection(relay.url), embedder=embedder, timeout=DEADLINE)
    with serving(app) as url:
        first = httpx.post(f"{url}/{demo}/_search", json=LOGICAL, timeout=CLIENT_WAIT)
        assert first.status_code == 200, first.text[:300]
        time.sleep(0.3)
        relay.trickling.set()
        answer, seconds = timed(
            lambda: httpx.post(f"{url}/{demo}/_search", json=LOGICAL, timeout=CLIENT_WAIT)
        )
        assert_cut_off(answer, seconds)
        relay.trickling.clear()
        again, seconds = timed(
            lambda: httpx.post(f"{url}/{demo}/_search", json=LOGICAL, timeout=CLIENT_WAIT)
        )
    assert again.status_code == 200, again.text[:300]
    assert [h["_id"] for h in again.json()["hits"]["hits"]] == [
        h["_id"] for h in first.json()["hits"]["hits"]
    ]
    assert seconds < DEADLINE + 10


def test_the_service_cuts_off_a_trickled_cluster_answer_at_its_deadline(relay, demo) -> None:
    index = itlr.Index.open(demo, url=relay.url, engine="opensearch")
    with serving(create_app(index, upstream_timeout=DEADLINE)) as url:
        body = {"query": QUERY, "k": 3}
        assert httpx.post(f"{url}/search", json=body, timeout=CLIENT_WAIT).status_code == 200
        relay.trickling.set()
        answer, seconds = timed(lambda: httpx.post(f"{url}/search", json=body, timeout=CLIENT_WAIT))
    assert_cut_off(answer, seconds)
    error = answer.json()["error"]
    assert "did not answer in time" in error and "\n" not in error
