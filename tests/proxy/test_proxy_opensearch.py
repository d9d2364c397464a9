"""The query-bar proxy in front of a real OpenSearch: logical searches return what `itlr search`
returns, everything else returns what the upstream returns."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from itlr.engines.connection import Connection
from itlr.options import SearchOptions, search_options
from itlr.proxy import create_proxy_app, serving
from itlr.retriever import Retriever

pytestmark = pytest.mark.opensearch

FIXTURES = Path(__file__).parent / "fixtures" / "query_bar"
LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
# The demo corpus has no time field: the UI's time range becomes a filter on a field it has.
TOPIC_FILTER = {"terms": {"metadata.topic": ["vitamin_d", "sleep", "exercise", "diet"]}}


def reference_ids(backend, embedder, options: SearchOptions) -> list[tuple[str, float]]:
    result = Retriever(backend, embedder).search(LOGICAL, options)
    return [(h.id, round(h.score, 4)) for h in result.hits]


def ids_scores(response: dict[str, Any]) -> list[tuple[str, float]]:
    return [(h["_id"], round(h["_score"], 4)) for h in response["hits"]["hits"]]


def with_index(fixture: dict[str, Any], index: str) -> dict[str, Any]:
    """A fixture aimed at the test index, its time range swapped for the topic filter."""
    text = json.dumps(fixture).replace("itlr-demo", index)
    swapped = json.loads(text)
    for body in [swapped.get("body"), *swapped.get("lines", [])[1::2]]:
        if body:
            body["query"]["bool"]["filter"] = [
                TOPIC_FILTER if "range" in clause else clause
                for clause in body["query"]["bool"]["filter"]
            ]
    return swapped


def without_took(response: dict[str, Any]) -> dict[str, Any]:
    cleaned = copy.deepcopy(response)
    for item in [cleaned, *cleaned.get("responses", [])]:
        item.pop("took", None)
    return cleaned


def test_a_lucene_query_bar_search_returns_the_hits_of_itlr_search(
    proxy_url, opensearch_demo, embedder
) -> None:
    body = {
        "size": 10,
        "query": {
            "bool": {
                "must": [
                    {"query_string": {"query": f"itlr:({LOGICAL})", "analyze_wildcard": True}}
                ],
                "filter": [],
                "should": [],
                "must_not": [],
            }
        },
    }
    response = httpx.post(
        f"{proxy_url}/{opensearch_demo.index_name}/_search", json=body, timeout=60
    )
    assert response.status_code == 200, response.text
    expected = reference_ids(opensearch_demo, embedder, SearchOptions(k=10, filter=None))
    assert ids_scores(response.json()) == expected


def test_a_dql_query_bar_search_from_dashboards_returns_the_hits_of_itlr_search(
    proxy_url, opensearch_demo, embedder
) -> None:
    fixture = with_index(
        json.loads((FIXTURES / "dashboards_dql_search.json").read_text()),
        opensearch_demo.index_name,
    )
    response = httpx.post(
        f"{proxy_url}{fixture['path']}", params=fixture["params"], json=fixture["body"], timeout=60
    )
    assert response.status_code == 200, response.text
    rest = {"bool": {"must": [], "filter": [TOPIC_FILTER], "should": [], "must_not": []}}
    expected = reference_ids(opensearch_demo, embedder, SearchOptions(k=500, filter=rest))
    got = response.json()
    assert ids_scores(got) == expected
    assert 0 < len(expected) < 338  # the filter took effect, and something matched
    assert got["hits"]["total"]["value"] == len(expected)  # the candidates, not the index


def test_a_search_without_the_virtual_field_returns_exactly_what_the_upstream_returns(
    proxy_url, opensearch_url, opensearch_demo
) -> None:
    body = {"size": 5, "query": {"match": {"text": "vitamin D"}}, "_source": ["doc_id"]}
    path = f"/{opensearch_demo.index_name}/_search"
    through = httpx.post(proxy_url + path, json=body, params={"track_total_hits": "true"})
    direct = httpx.post(opensearch_url + path, json=body, params={"track_total_hits": "true"})
    assert through.status_code == direct.status_code == 200
    assert without_took(through.json()) == without_took(direct.json())
    # Any other API passes through too: a mapping, a cat table, an upstream error.
    for path in (
        f"/{opensearch_demo.index_name}/_mapping",
        "/_cat/indices/itlr-proxy-*?h=index",
        "/nope-index/_doc/1",
    ):
        through, direct = httpx.get(proxy_url + path), httpx.get(opensearch_url + path)
        assert (through.status_code, through.content) == (direct.status_code, direct.content)


def test_an_async_search_poll_passes_through_to_the_upstream(proxy_url, opensearch_url) -> None:
    poll = json.loads((FIXTURES / "kibana8_kql_async_search.json").read_text())["poll"]
    through = httpx.get(proxy_url + poll["path"], params=poll["params"])
    direct = httpx.get(opensearch_url + poll["path"], params=poll["params"])
    assert (through.status_code, through.content) == (direct.status_code, direct.content)


def test_msearch_with_one_logical_and_one_plain_search(
    proxy_url, opensearch_url, opensearch_demo, embedder
) -> None:
    fixture = with_index(
        json.loads((FIXTURES / "dashboards_lucene_msearch.json").read_text()),
        opensearch_demo.index_name,
    )
    ndjson = "".join(json.dumps(line) + "\n" for line in fixture["lines"])
    headers = {"content-type": "application/x-ndjson"}
    through = httpx.post(
        proxy_url + fixture["path"],
        params=fixture["params"],
        content=ndjson,
        headers=headers,
        timeout=60,
    )
    assert through.status_code == 200, through.text
    logical, plain = through.json()["responses"]
    rest = {
        "bool": {
            "must": [{"match_all": {}}],
            "filter": [TOPIC_FILTER],
            "should": [],
            "must_not": [],
        }
    }
    assert ids_scores(logical) == reference_ids(
        opensearch_demo, embedder, SearchOptions(k=500, filter=rest)
    )
    plain_only = "".join(json.dumps(line) + "\n" for line in fixture["lines"][2:])
    direct = httpx.post(
        opensearch_url + fixture["path"],
        params=fixture["params"],
        content=plain_only,
        headers=headers,
    )
    assert without_took(plain) == without_took(direct.json()["responses"][0])


def test_bad_logical_syntax_in_the_query_bar_is_an_error_the_ui_can_show(
    proxy_url, opensearch_demo
) -> None:
    text = 'itlr:("vitamin D" AND OR "bone")'
    body = {"query": {"query_string": {"query": text}}}
    response = httpx.post(f"{proxy_url}/{opensearch_demo.index_name}/_search", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "itlr_query_error"
    assert error["position"] == text.index("OR")
    assert "syntax error at position" in error["root_cause"][0]["reason"]


def test_an_index_without_itlr_vectors_is_a_clear_error(proxy_url, opensearch_url) -> None:
    plain = f"itlr-proxy-plain-{uuid.uuid4().hex[:6]}"
    httpx.put(f"{opensearch_url}/{plain}").raise_for_status()
    try:
        body = {"query": {"query_string": {"query": "itlr:(a)"}}}
        response = httpx.post(f"{proxy_url}/{plain}/_search", json=body)
        assert response.status_code == 400
        assert "no itlr index" in response.json()["error"]["reason"]
    finally:
        httpx.delete(f"{opensearch_url}/{plain}")


def test_an_upstream_that_is_down_is_a_502_with_a_clear_message(embedder) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    app = create_proxy_app(Connection(closed), embedder=embedder)

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            logical = {"query": {"query_string": {"query": "itlr:(a AND NOT b)"}}}
            return [
                await client.get("/_cluster/health"),
                await client.post("/docs/_search", json=logical),
            ]

    for response in asyncio.run(ask()):
        assert response.status_code == 502
        assert f"cannot reach the upstream {closed}" in response.json()["error"]["reason"]


def test_a_proxy_with_a_token_refuses_requests_without_it(opensearch_url, embedder) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, token="s3cret")

    async def ask(headers: dict[str, str]) -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return (await client.get("/", headers=headers)).status_code

    assert asyncio.run(ask({})) == 401
    assert asyncio.run(ask({"x-itlr-token": "wrong"})) == 401
    assert asyncio.run(ask({"x-itlr-token": "s3cret"})) == 200


# -- hybrid truths: the proxy counts the index's token statistics upstream ------------------

# The recommended hybrid setting, named in full so that these tests hold whatever the default.
HYBRID = {"truth": "hybrid", "lexical": 0.3, "not_evidence": "max"}
SECOND = '("sleep quality" OR insomnia) AND NOT caffeine'


def hybrid_options(**more: Any) -> SearchOptions:
    return search_options(**HYBRID, **more)


@pytest.fixture(scope="module")
def hybrid_proxy_url(opensearch_url, embedder) -> Iterator[str]:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, defaults=hybrid_options())
    with serving(app) as url:
        yield url


def lucene_body(query: str, size: int = 10) -> dict[str, Any]:
    return {"size": size, "query": {"query_string": {"query": f"itlr:({query})"}}}


def library_hits(backend, embedder, query: str, options: SearchOptions) -> list[tuple[str, float]]:
    result = Retriever(backend, embedder).search(query, options)
    return [(h.id, round(h.score, 4)) for h in result.hits]


def test_hybrid_truths_in_the_query_bar_rank_and_score_as_the_library_does(
    hybrid_proxy_url, opensearch_demo, embedder
) -> None:
    for query in (LOGICAL, SECOND):
        response = httpx.post(
            f"{hybrid_proxy_url}/{opensearch_demo.index_name}/_search",
            json=lucene_body(query),
            timeout=60,
        )
        assert response.status_code == 200, response.text
        expected = library_hits(opensearch_demo, embedder, query, hybrid_options(k=10))
        assert ids_scores(response.json()) == expected and len(expected) == 10
        cosine = library_hits(opensearch_demo, embedder, query, search_options(truth="clamp"))
        assert expected != cosine  # the lexical evidence changed the scores


def test_hybrid_truths_with_a_query_bar_filter_score_as_the_library_does(
    hybrid_proxy_url, opensearch_demo, embedder
) -> None:
    fixture = with_index(
        json.loads((FIXTURES / "dashboards_dql_search.json").read_text()),
        opensearch_demo.index_name,
    )
    response = httpx.post(
        f"{hybrid_proxy_url}{fixture['path']}",
        params=fixture["params"],
        json=fixture["body"],
        timeout=60,
    )
    assert response.status_code == 200, response.text
    rest = {"bool": {"must": [], "filter": [TOPIC_FILTER], "should": [], "must_not": []}}
    # The statistics are the whole index's, as the library's: the filter narrows the hits only.
    expected = library_hits(opensearch_demo, embedder, LOGICAL, hybrid_options(k=500, filter=rest))
    assert ids_scores(response.json()) == expected
    assert 0 < len(expected) < 338


def test_an_msearch_of_several_hybrid_searches_scores_each_as_the_library_does(
    hybrid_proxy_url, opensearch_demo, embedder
) -> None:
    header = {"index": opensearch_demo.index_name}
    plain = {"size": 3, "query": {"match": {"text": "coffee"}}}
    pairs = [lucene_body(LOGICAL), lucene_body(SECOND), plain, lucene_body(LOGICAL, size=5)]
    ndjson = "".join(json.dumps(line) + "\n" for body in pairs for line in (header, body))
    response = httpx.post(
        f"{hybrid_proxy_url}/_msearch",
        content=ndjson,
        headers={"content-type": "application/x-ndjson"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    first, second, unchanged, again = response.json()["responses"]
    assert ids_scores(first) == library_hits(opensearch_demo, embedder, LOGICAL, hybrid_options())
    assert ids_scores(second) == library_hits(opensearch_demo, embedder, SECOND, hybrid_options())
    assert ids_scores(again) == ids_scores(first)[:5]
    assert len(unchanged["hits"]["hits"]) == 3


def proxy_search(url: str, index: str, query: str) -> httpx.Response:
    return httpx.post(f"{url}/{index}/_search", json=lucene_body(query), timeout=60)


def throwaway_backend(url: str, embedder, name: str):
    from itlr.engines.opensearch import OpenSearchBackend

    backend = OpenSearchBackend(
        Connection(url).opensearch(),
        f"itlr-proxy-{name}-{uuid.uuid4().hex[:6]}",
        embedder.name,
        embedder.dims,
        url=url,
    )
    backend.ensure_index()
    return backend


def test_hybrid_statistics_written_by_another_client_show_within_the_max_age(
    opensearch_url, corpus, corpus_vectors, embedder, monkeypatch
) -> None:
    max_age = 0.5
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", str(max_age))
    backend = throwaway_backend(opensearch_url, embedder, "stats")
    options = hybrid_options(mode="exact")
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, defaults=options)
    rounds: list[dict[str, float]] = []
    try:
        with serving(app) as url:
            for start, stop in ((0, 60), (60, len(corpus))):
                documents = corpus[start:stop]
                added = backend.add(
                    [d.id for d in documents],
                    [d.text for d in documents],
                    corpus_vectors[start:stop],
                )
                assert added == {}
                backend.refresh()
                # Written past the proxy: its remembered counts are used for at most max_age.
                time.sleep(max_age)
                for _ in range(2):  # the second from remembered statistics
                    response = proxy_search(url, backend.index_name, LOGICAL)
                    assert response.status_code == 200, response.text
                    expected = library_hits(backend, embedder, LOGICAL, options)
                    assert ids_scores(response.json()) == expected
                rounds.append(dict(expected))
    finally:
        backend.client.indices.delete(index=backend.index_name, ignore_unavailable=True)
    # The corpus grew: a passage ranked both times scores otherwise (new statistics).
    common = rounds[0].keys() & rounds[1].keys()
    assert common and any(rounds[0][i] != rounds[1][i] for i in common)


def test_statistics_the_upstream_refuses_are_a_one_line_error(
    opensearch_url, embedder, corpus, corpus_vectors
) -> None:
    backend = throwaway_backend(opensearch_url, embedder, "closed")
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, defaults=hybrid_options())
    try:
        assert backend.add([corpus[0].id], [corpus[0].text], corpus_vectors[:1]) == {}
        backend.client.indices.close(index=backend.index_name)
        with serving(app) as url:
            response = proxy_search(url, backend.index_name, LOGICAL)
        assert response.status_code == 502, response.text
        reason = response.json()["error"]["reason"]
        assert reason.startswith("itlr: cannot count the token statistics of")
        assert "closed" in reason and "\n" not in reason
    finally:
        backend.client.indices.delete(index=backend.index_name, ignore_unavailable=True)
