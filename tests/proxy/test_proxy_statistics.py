"""The proxy remembers hybrid truths' token statistics per target and caller: a repeated search
is not counted again, a write through the proxy shows in the next search through it, two
callers never share a count, and the scores stay those of freshly counted statistics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers

from demo_backend import demo_backend
from itlr.engines.bulk import bulk_actions
from itlr.engines.connection import Connection
from itlr.engines.layout import IndexLayout
from itlr.engines.opensearch import OpenSearchBackend
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions, search_options
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.statistics import CallerStatistics, caller_digest, changes_documents
from itlr.proxy.upstream import auth_headers
from itlr.retriever import Retriever

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
HYBRID = {"truth": "hybrid", "lexical": 0.3, "not_evidence": "max"}
TOLERANCE = 1e-4


# -- which relayed requests count as writes -----------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "refresh"),
    [
        ("POST", "/_bulk", None),
        ("PUT", "/_bulk", None),
        ("POST", "/docs/_bulk", None),
        ("PUT", "/docs/_doc/1", None),
        ("POST", "/docs/_doc", None),
        ("PUT", "/docs/_create/1", None),
        ("POST", "/docs/_update/1", None),
        ("DELETE", "/docs/_doc/1", None),
        ("PUT", "/docs/_doc/_search", None),  # a document whose id is `_search`
        ("POST", "/docs/_delete_by_query", None),
        ("POST", "/docs/_update_by_query", None),
        ("POST", "/_reindex", None),
        ("PUT", "/docs", None),
        ("DELETE", "/docs", None),
        ("POST", "/docs/_close", None),
        ("POST", "/docs/_open", None),
        ("POST", "/_aliases", None),
        ("PUT", "/docs/_alias/all", None),
        ("POST", "/docs/_refresh", None),
        ("GET", "/docs/_refresh", None),
        ("GET", "/_refresh", None),
        ("POST", "/docs/_flush", None),
        ("GET", "/docs/_doc/1", "true"),  # a realtime GET may refresh the shard
        ("GET", "/docs/_doc/1", ""),
        ("POST", "/_plugins/_asynchronous_search", None),  # unknown: a write, to be safe
    ],
)
def test_writes_and_refreshes_the_proxy_relays_are_told_apart(
    method: str, path: str, refresh: str | None
) -> None:
    assert changes_documents(method, path, refresh)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/docs/_doc/1"),
        ("HEAD", "/docs"),
        ("GET", "/_cat/indices"),
        ("POST", "/docs/_search"),
        ("POST", "/_msearch"),
        ("POST", "/docs/_async_search"),
        ("DELETE", "/_async_search/abc"),
        ("POST", "/docs/_count"),
        ("POST", "/_mget"),
        ("POST", "/docs/_field_caps"),
        ("POST", "/_search/scroll"),
        ("DELETE", "/_search/scroll"),
        ("POST", "/docs/_search/template"),
        ("POST", "/docs/_pit"),
        ("POST", "/_security/user/_has_privileges"),
    ],
)
def test_reads_the_proxy_relays_leave_the_statistics_trusted(method: str, path: str) -> None:
    assert not changes_documents(method, path, None)
    assert not changes_documents(method, path, "false")


def agreed(memory) -> None:
    """Two agreeing counts: the index is steady, the statistics recent."""
    for _ in range(2):
        memory.record(CorpusStats(5, 50, {"a": 1}))


def test_each_caller_and_target_has_statistics_of_its_own_and_a_write_untrusts_them_all() -> None:
    store = CallerStatistics(max_age=3600.0)
    alice = {"authorization": "Basic YWxpY2U6eA=="}
    bob = {"authorization": "Basic Ym9iOng="}
    assert store.of("docs", alice) is store.of("docs", dict(alice))
    assert store.of("docs", alice) is not store.of("docs", bob)
    assert store.of("docs", alice) is not store.of("docs", {**alice, "cookie": "sid=1"})
    # Acting as another user, with the same credentials: that user's counts, not the caller's.
    for acting in ("es-security-runas-user", "opendistro_security_impersonate_as"):
        as_carol = auth_headers(Headers({**alice, acting: "carol"}))
        assert as_carol[acting] == "carol"
        assert store.of("docs", as_carol) is not store.of("docs", alice)
    assert store.of("docs", alice) is not store.of("other", alice)
    assert caller_digest(alice) != caller_digest(bob)
    assert b"YWxpY2U6eA" not in caller_digest(alice)  # the credentials themselves are not kept
    for target, caller in (("docs", alice), ("docs", bob), ("other", alice)):
        agreed(store.of(target, caller))
        assert store.of(target, caller).lookup(["a"])[1]
    store.written()
    for target, caller in (("docs", alice), ("docs", bob), ("other", alice)):
        assert not store.of(target, caller).lookup(["a"])[1]


def test_the_remembered_targets_are_bounded_least_recently_used_out_first() -> None:
    store = CallerStatistics(max_age=3600.0, targets=2)
    first = store.of("a", {})
    store.of("b", {})
    assert store.of("a", {}) is first
    store.of("c", {})  # b was the least recently used
    assert len(store) == 2
    assert store.of("a", {}) is first
    assert store.of("b", {}).lookup([])[0] is None  # forgotten: counted again


def test_searches_asking_while_a_count_is_on_its_way_share_it_unless_a_write_came_between() -> None:
    store = CallerStatistics(max_age=3600.0)
    counted = CorpusStats(5, 50, {"a": 1})
    asked: list[int] = []

    async def settle() -> None:
        for _ in range(5):  # every task started so far runs up to its next wait
            await asyncio.sleep(0)

    async def scenario() -> list[CorpusStats]:
        release = asyncio.Event()

        async def count() -> CorpusStats:
            asked.append(1)
            await release.wait()
            return counted

        alice = {"authorization": "Basic YWxpY2U6eA=="}
        first = [asyncio.ensure_future(store.statistics("docs", alice, ["a"], count))]
        await settle()
        first += [asyncio.ensure_future(store.statistics("docs", alice, ["a"], count))]
        first[1].cancel()  # a caller who went away does not cancel the others' count
        first += [asyncio.ensure_future(store.statistics("docs", alice, ["a"], count))]
        other = asyncio.ensure_future(store.statistics("docs", {}, ["a"], count))
        await settle()
        assert len(asked) == 2  # one count per caller
        store.written()
        after = asyncio.ensure_future(store.statistics("docs", alice, ["a"], count))
        await settle()
        assert len(asked) == 3  # asked before the write: not shared with a search after it
        release.set()
        return await asyncio.gather(first[0], first[2], other, after)

    assert asyncio.run(scenario()) == [counted] * 4


# -- through the proxy, on a real OpenSearch ----------------------------------------------


def hybrid_options(**more: Any) -> SearchOptions:
    return search_options(**HYBRID, **more)


@pytest.fixture()
def documents_index(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    """A throw-away index holding the demo corpus but its last ten passages."""
    with demo_backend(
        opensearch_url, "itlr-proxy-stats", embedder, corpus[:-10], corpus_vectors[:-10]
    ) as backend:
        yield backend.index_name


class CountingProxy:
    """The proxy served on a free port, its upstream counts noted (and still sent)."""

    def __init__(self, opensearch_url: str, embedder) -> None:
        self.app = create_proxy_app(
            Connection(opensearch_url), embedder=embedder, defaults=hybrid_options()
        )
        self.counts: list[tuple[str, dict[str, str]]] = []
        upstream = self.app.state.proxy.upstream
        count = upstream.term_statistics

        async def counting(caller, target, query):
            self.counts.append((target, dict(caller.headers)))
            return await count(caller, target, query)

        upstream.term_statistics = counting

    def search(self, url: str, index: str, headers: dict[str, str] | None = None) -> list:
        response = httpx.post(
            f"{url}/{index}/_search",
            json={"size": 10, "query": {"query_string": {"query": f"itlr:({LOGICAL})"}}},
            headers=headers,
            timeout=60,
        )
        assert response.status_code == 200, response.text
        return [(h["_id"], h["_score"]) for h in response.json()["hits"]["hits"]]


@pytest.fixture()
def counting_proxy(opensearch_url, embedder, monkeypatch) -> CountingProxy:
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", "3600")  # nothing expires during a test
    return CountingProxy(opensearch_url, embedder)


def freshly_counted(opensearch_url: str, index: str, embedder) -> list[tuple[str, float]]:
    """The library's ranking with statistics counted now (a new backend remembers nothing)."""
    backend = OpenSearchBackend(
        Connection(opensearch_url).opensearch(), index, embedder.name, embedder.dims
    )
    result = Retriever(backend, embedder).search(LOGICAL, hybrid_options(k=10))
    return [(h.id, h.score) for h in result.hits]


def assert_scores_close(got: list, expected: list) -> None:
    assert [i for i, _ in got] == [i for i, _ in expected] and len(got) == 10
    assert all(abs(a - b) <= TOLERANCE for (_, a), (_, b) in zip(got, expected, strict=True))


@pytest.mark.opensearch
def test_a_repeated_hybrid_search_through_the_proxy_is_not_counted_again(
    counting_proxy, opensearch_url, documents_index, embedder
) -> None:
    expected = freshly_counted(opensearch_url, documents_index, embedder)
    with serving(counting_proxy.app) as url:
        for _ in range(5):
            assert_scores_close(counting_proxy.search(url, documents_index), expected)
        # Counted until two counts agreed (the index is steady), not after.
        assert len(counting_proxy.counts) == 2
        header = json.dumps({"index": documents_index})
        body = json.dumps({"size": 10, "query": {"query_string": {"query": f"itlr:({LOGICAL})"}}})
        response = httpx.post(
            f"{url}/_msearch",
            content=f"{header}\n{body}\n{header}\n{body}\n",
            headers={"content-type": "application/x-ndjson"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert len(counting_proxy.counts) == 2
        for answer in response.json()["responses"]:
            got = [(h["_id"], h["_score"]) for h in answer["hits"]["hits"]]
            assert_scores_close(got, expected)


@pytest.mark.opensearch
def test_with_a_max_age_of_zero_every_search_is_counted(
    opensearch_url, documents_index, embedder, monkeypatch
) -> None:
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", "0")
    proxy = CountingProxy(opensearch_url, embedder)
    with serving(proxy.app) as url:
        for _ in range(3):
            proxy.search(url, documents_index)
    assert len(proxy.counts) == 3


def bulk_lines(index: str, corpus, corpus_vectors, model: str) -> str:
    added = corpus[-10:]
    actions = bulk_actions(
        index,
        IndexLayout(),
        [d.id for d in added],
        [d.text for d in added],
        corpus_vectors[-10:],
        None,
        model,
    )
    lines = []
    for action in actions:
        lines.append(json.dumps({"index": {"_index": action["_index"], "_id": action["_id"]}}))
        lines.append(json.dumps(action["_source"]))
    return "\n".join(lines) + "\n"


WRITES = ("bulk", "delete a document", "delete by query", "write, then refresh apart")


@pytest.mark.opensearch
@pytest.mark.parametrize("write", WRITES)
def test_a_write_through_the_proxy_shows_in_the_next_search_through_it(
    write, counting_proxy, opensearch_url, documents_index, corpus, corpus_vectors, embedder
) -> None:
    before = freshly_counted(opensearch_url, documents_index, embedder)
    with serving(counting_proxy.app) as url:
        if write == "write, then refresh apart":
            # No refresh but the one sent through the proxy: the write is not searchable first.
            settings = {"index": {"refresh_interval": "-1"}}
            httpx.put(f"{opensearch_url}/{documents_index}/_settings", json=settings, timeout=30)
        for _ in range(3):
            assert_scores_close(counting_proxy.search(url, documents_index), before)
        counted = len(counting_proxy.counts)
        if write in ("bulk", "write, then refresh apart"):
            refresh = "true" if write == "bulk" else "false"
            response = httpx.post(
                f"{url}/_bulk?refresh={refresh}",
                content=bulk_lines(documents_index, corpus, corpus_vectors, embedder.name),
                headers={"content-type": "application/x-ndjson"},
                timeout=60,
            )
        elif write == "delete a document":
            response = httpx.delete(
                f"{url}/{documents_index}/_doc/{before[0][0]}?refresh=true", timeout=60
            )
        else:
            response = httpx.post(
                f"{url}/{documents_index}/_delete_by_query?refresh=true",
                json={"query": {"match": {"text": "vitamin"}}, "max_docs": 5},
                timeout=60,
            )
        assert response.status_code == 200, response.text
        assert not response.json().get("errors"), response.text
        if write == "write, then refresh apart":
            # Searched before the refresh: the statistics of what is searchable (the old ones).
            assert_scores_close(counting_proxy.search(url, documents_index), before)
            assert_scores_close(counting_proxy.search(url, documents_index), before)
            refreshed = httpx.post(f"{url}/{documents_index}/_refresh", timeout=60)
            assert refreshed.status_code == 200, refreshed.text
            counted = len(counting_proxy.counts)
        after = counting_proxy.search(url, documents_index)
    assert len(counting_proxy.counts) == counted + 1
    expected = freshly_counted(opensearch_url, documents_index, embedder)
    assert_scores_close(after, expected)
    assert after != before  # the write changed the ranking or the scores


@pytest.mark.opensearch
def test_two_callers_never_share_a_count(
    counting_proxy, opensearch_url, documents_index, embedder
) -> None:
    alice = {"authorization": "Basic YWxpY2U6c2VjcmV0"}
    bob = {"authorization": "Basic Ym9iOnNlY3JldA=="}
    expected = freshly_counted(opensearch_url, documents_index, embedder)
    with serving(counting_proxy.app) as url:
        for _ in range(3):
            assert_scores_close(counting_proxy.search(url, documents_index, alice), expected)
        assert [h for _, h in counting_proxy.counts] == [alice, alice]
        assert_scores_close(counting_proxy.search(url, documents_index, bob), expected)
        # Bob's search is counted with Bob's credentials, Alice's counts notwithstanding.
        assert [h for _, h in counting_proxy.counts] == [alice, alice, bob]
        counting_proxy.search(url, documents_index, bob)
        counting_proxy.search(url, documents_index, bob)
        counting_proxy.search(url, documents_index, alice)
        assert [h for _, h in counting_proxy.counts] == [alice, alice, bob, bob]
        counting_proxy.search(url, documents_index)  # no credentials: a caller of its own
        assert [h for _, h in counting_proxy.counts][-1] == {}
    assert len(counting_proxy.app.state.proxy.statistics) == 3


@pytest.mark.opensearch
def test_a_dashboards_panels_searching_at_once_after_a_write_wait_for_one_count(
    counting_proxy, opensearch_url, documents_index, embedder
) -> None:
    expected = freshly_counted(opensearch_url, documents_index, embedder)
    body = {"size": 10, "query": {"query_string": {"query": f"itlr:({LOGICAL})"}}}
    with serving(counting_proxy.app) as url:
        counting_proxy.search(url, documents_index)  # mapping, scripts and term vectors known
        refreshed = httpx.post(f"{url}/{documents_index}/_refresh", timeout=60)
        assert refreshed.status_code == 200, refreshed.text
        counted = len(counting_proxy.counts)

        async def panels() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as client:
                search = f"{url}/{documents_index}/_search"
                return await asyncio.gather(*(client.post(search, json=body) for _ in range(12)))

        answers = asyncio.run(panels())
    assert len(counting_proxy.counts) == counted + 1
    for answer in answers:
        assert answer.status_code == 200, answer.text
        got = [(h["_id"], h["_score"]) for h in answer.json()["hits"]["hits"]]
        assert_scores_close(got, expected)
