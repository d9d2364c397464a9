"""Limits that bound the work of one request (issue 26, parts 1 and 3): each one refused cheaply,
before the parser, json.loads or the encoder, with one line that names the limit; on the CLI
(exit 2), the service (413 / 422 / 400) and the proxy in front of a real OpenSearch (the
cluster's error shape)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr import query as query_module
from itlr.cli import app as cli
from itlr.embed import FairSlots
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS, LimitError, Limits, json_depth, query_shape
from itlr.proxy import create_proxy_app
from itlr.service import create_app
from itlr.service.server import serving

runner = CliRunner()
LOGICAL = '"vitamin D benefits" AND NOT "bone health"'


def many_terms(count: int, joiner: str = " AND ") -> str:
    return joiner.join(f"t{i}" for i in range(count))


def deep_bool(levels: int) -> bytes:
    """A bool query `levels` deep, as text: the standard library cannot even write it."""
    return b'{"bool": {"must": [' * levels + b'{"term": {"topic": "sleep"}}' + b"]}}" * levels


def one_line(text: str) -> str:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text


# -- the figures and the cheap scans -----------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "terms", "depth"),
    [
        ('"vitamin D" AND NOT "bone health"', 2, 1),
        ("a bare phrase of words", 1, 0),
        ("COVID-19 -don't AND (x OR 'y z'^0.5)", 4, 1),
        ("NOT NOT a", 1, 2),
        ("a -b -c", 3, 1),
        ("((a) OR b) && !c", 3, 2),
    ],
)
def test_the_pre_parse_scan_counts_terms_and_nesting_as_the_parser_does(
    query: str, terms: int, depth: int
) -> None:
    assert query_shape(query) == (terms, depth)
    assert len(query_module.parse(query).terms) == terms  # every term differs: no duplicates merged


def test_json_depth_counts_objects_and_arrays_but_not_brackets_inside_strings() -> None:
    assert json_depth(b'{"a": [{"b": "[[[{{{\\"]]"}]}') == 3
    assert json_depth("[" * 50_000) == 50_000
    assert json_depth(b'"just a string"') == 0


@pytest.mark.parametrize("kind", [bytes, str])
def test_the_depth_check_refuses_by_structure_whether_or_not_it_scans(kind) -> None:
    """Few brackets in all pass without the scan; many are scanned, so brackets inside strings
    never count and one level past the limit is refused, as JSON text or bytes."""
    limits = Limits(max_depth=4)

    def text(value: str) -> bytes | str:
        return value.encode() if kind is bytes else value

    limits.check_json_depth(text('{"a": {"b": [[1]]}}'))  # 4 brackets: no scan needed
    limits.check_json_depth(text('{"a": {"b": "[[[[{{{{"}}'))  # deep only inside a string
    with pytest.raises(LimitError, match="nested 5 levels deep"):
        limits.check_json_depth(text('{"a": {"b": [[[1]]]}}'))


def test_every_limit_comes_from_its_environment_variable(monkeypatch) -> None:
    monkeypatch.setenv("ITLR_MAX_TERMS", "3")
    monkeypatch.setenv("ITLR_MAX_DEPTH", "5")
    limits = Limits.from_env()
    assert (limits.max_terms, limits.max_depth, limits.max_query_chars) == (3, 5, 4096)
    with pytest.raises(LimitError, match=r"the query has 4 terms; the limit is 3 \(max_terms"):
        limits.check_query_text("a OR b OR c OR d")
    monkeypatch.setenv("ITLR_MAX_TERMS", "many")
    with pytest.raises(ConfigurationError, match=r"ITLR_MAX_TERMS='many': .*an integer >= 1"):
        Limits.from_env()


def test_a_query_of_the_most_terms_parses_and_one_more_is_refused() -> None:
    assert len(query_module.parse(many_terms(LIMITS.max_terms)).terms) == LIMITS.max_terms
    with pytest.raises(LimitError, match=r"has 65 terms; the limit is 64 \(max_terms, raise it"):
        query_module.parse(many_terms(LIMITS.max_terms + 1))
    with pytest.raises(LimitError, match=r"nested 33 levels deep; the limit is 32 \(max_depth"):
        query_module.parse("(" * 33 + "a" + ")" * 33)


def test_the_probes_10000_term_query_is_refused_on_the_cli_without_being_parsed() -> None:
    before = query_module._parse.cache_info()
    result = runner.invoke(cli, ["parse", "-"], input=many_terms(10_000))
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    assert "the limit is 4,096 (max_query_chars, raise it with ITLR_MAX_QUERY_CHARS)" in line
    after = query_module._parse.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)  # pyparsing never ran


# -- the encoder is shared in arrival order ----------------------------------------------------


def test_encoder_slots_are_given_in_arrival_order() -> None:
    slots = FairSlots(1)
    order: list[int] = []
    waiting = threading.Semaphore(0)

    def take(n: int) -> None:
        waiting.release()
        with slots.slot():
            order.append(n)

    with slots.slot():
        threads = []
        for n in range(6):
            thread = threading.Thread(target=take, args=(n,))
            thread.start()
            waiting.acquire()
            time.sleep(0.05)  # the thread is queued before the next one starts
            threads.append(thread)
    for thread in threads:
        thread.join(10)
    assert order == list(range(6))


# -- the service -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(embedded) -> Iterator[httpx.Client]:
    index = itlr.Index.open(str(embedded.path), create=False)
    with serving(create_app(index)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_the_service_refuses_the_probes_9000_term_search_in_one_line(service) -> None:
    answer = service.post("/search", json={"query": " ".join(f'"t{i}"' for i in range(9000))})
    assert answer.status_code == 422
    assert "max_query_chars" in one_line(answer.json()["error"])
    answer = service.post("/search", json={"query": many_terms(65, " OR ")})
    assert answer.status_code == 422 and answer.json()["limit"] == "max_terms"
    assert service.post("/search", json={"query": many_terms(64, " OR ")}).status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 50_000,
        b'{"query": "a", "filter": ' + b'{"x": ' * 5000 + b"1" + b"}" * 5001,
        b'{"query": "sleep", "filter": ' + deep_bool(600) + b"}",
    ],
    ids=["50000-deep", "5000-deep-filter", "600-bool-levels"],
)
def test_the_service_refuses_deep_json_before_parsing_it(service, raw: bytes) -> None:
    for path in ("/search", "/translate", "/parse", "/rewrite"):
        answer = service.post(path, content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        error = one_line(answer.json()["error"])
        assert "levels deep; the limit is 32 (max_depth, raise it with ITLR_MAX_DEPTH)" in error


def test_the_service_refuses_a_body_over_the_limit_with_413(service) -> None:
    answer = service.post("/search", json={"query": "x" * (LIMITS.max_body_bytes + 1)})
    assert answer.status_code == 413
    assert "max_body_bytes" in one_line(answer.json()["error"])


# -- the proxy in front of a real OpenSearch ---------------------------------------------------


@pytest.fixture(scope="module")
def proxied(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[tuple[str, str]]:
    backend = OpenSearchBackend(
        Connection(opensearch_url).opensearch(),
        f"itlr-limits-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=opensearch_url,
    )
    backend.ensure_index()
    ids, texts, fields = (
        [d.id for d in corpus],
        [d.text for d in corpus],
        [d.fields for d in corpus],
    )
    assert backend.add(ids, texts, corpus_vectors, fields) == {}
    backend.refresh()
    try:
        with serving(create_proxy_app(Connection(opensearch_url), embedder=embedder)) as url:
            yield url, backend.index_name
    finally:
        backend.client.indices.delete(index=backend.index_name)


def cluster_error(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["status"] == status and body["error"]["root_cause"][0]["type"]
    return one_line(body["error"]["reason"])


def test_the_proxy_still_runs_an_ordinary_logical_search(proxied) -> None:
    url, index = proxied
    body = {"query": {"query_string": {"query": f"itlr:({LOGICAL})"}}}
    answer = httpx.post(f"{url}/{index}/_search", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["hits"]["hits"]


def test_the_proxy_refuses_the_probes_12000_term_query_bar_search(proxied) -> None:
    url, index = proxied
    query = many_terms(12_000, " OR ")
    body = {"query": {"query_string": {"query": f"itlr:({query})"}}}
    reason = cluster_error(httpx.post(f"{url}/{index}/_search", json=body, timeout=60), 400)
    assert "max_query_chars" in reason
    body = {"query": {"query_string": {"query": f"itlr:({many_terms(65, ' OR ')})"}}}
    reason = cluster_error(httpx.post(f"{url}/{index}/_search", json=body, timeout=60), 400)
    assert "the query has 65 terms; the limit is 64 (max_terms" in reason


@pytest.mark.parametrize(
    "raw",
    [b"[" * 50_000, b'{"query": ' + deep_bool(600) + b"}"],
    ids=["50000-deep", "600-bool-levels"],
)
def test_the_proxy_refuses_deep_search_bodies_in_the_clusters_shape(proxied, raw: bytes) -> None:
    url, index = proxied
    headers = {"content-type": "application/json"}
    answer = httpx.post(f"{url}/{index}/_search", content=raw, headers=headers, timeout=60)
    assert "(max_depth, raise it with ITLR_MAX_DEPTH)" in cluster_error(answer, 400)


def test_the_proxy_refuses_a_search_body_over_the_limit_with_413(proxied) -> None:
    url, index = proxied
    body = {"query": {"match": {"text": "x" * (LIMITS.max_body_bytes + 1)}}}
    answer = httpx.post(f"{url}/{index}/_search", json=body, timeout=60)
    assert "max_body_bytes" in cluster_error(answer, 413)


def test_the_proxy_refuses_an_msearch_of_more_pairs_than_the_limit(proxied) -> None:
    url, index = proxied
    pair = json.dumps({"index": index}) + "\n" + json.dumps({"query": {"match_all": {}}}) + "\n"
    headers = {"content-type": "application/x-ndjson"}
    over = httpx.post(f"{url}/_msearch", content=pair * 65, headers=headers, timeout=60)
    assert "the _msearch holds 65 searches; the limit is 64 (max_msearch" in cluster_error(
        over, 400
    )
    within = httpx.post(f"{url}/_msearch", content=pair * 64, headers=headers, timeout=60)
    assert within.status_code == 200 and len(within.json()["responses"]) == 64
