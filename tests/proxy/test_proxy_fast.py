"""The query-bar proxy's fast path on a real OpenSearch: repeated terms skip the worker thread,
answers relay byte for byte (whole or streamed), the stage breakdown of `itlr bench proxy`, a
model whose dimension is not the mapped one is refused in one line, and `itlr serve --proxy`
takes the proxy's index-layout flags."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from foreign_index import create_index, delete_index, documents
from itlr.cli import app as cli
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.app import RELAY_IN_ONE_PIECE
from itlr.proxy.codec import decode_json
from itlr.proxy.stages import STAGES, StageTimes
from itlr.proxy.upstream import IndexConfig
from itlr.service.server import free_port
from itlr.term_cache import cache_for

pytestmark = pytest.mark.opensearch

PLUGIN = str(Path(__file__).resolve().parents[2] / "plugin")
QUERY = '"vitamin D" AND NOT "bone health"'


def logical(query: str, size: int = 5) -> dict[str, object]:
    return {"size": size, "query": {"query_string": {"query": f"itlr:({query})"}}}


@pytest.fixture(scope="module")
def foreign(opensearch_url, corpus, embedder) -> Iterator[str]:
    """An index itlr did not make: text `body`, vectors `vec`, no `_meta.itlr`."""
    docs = documents(corpus, 40)
    for doc, vector in zip(docs, embedder.encode([d["body"] for d in docs]), strict=True):
        doc["vec"] = vector.tolist()
    name = create_index(opensearch_url, "opensearch", docs, vector_dims=embedder.dims)
    yield name
    delete_index(opensearch_url, name)


def ids_scores(response: httpx.Response) -> list[tuple[str, float]]:
    assert response.status_code == 200, response.text
    return [(h["_id"], round(h["_score"], 4)) for h in response.json()["hits"]["hits"]]


def test_a_repeated_query_is_answered_from_the_term_cache_without_a_thread_hand_off(
    opensearch_url, opensearch_demo, embedder
) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder)
    recorder = app.state.proxy.stages = StageTimes()
    # Terms no other test asks for: the first request must miss.
    query = '"magnesium and restless legs" AND NOT "iron deficiency anaemia"'
    path = f"/{opensearch_demo.index_name}/_search"
    cache = cache_for(embedder.name)
    with serving(app) as url:
        first = httpx.post(url + path, json=logical(query), timeout=60)
        hits_before = cache.stats().hits
        second = httpx.post(url + path, json=logical(query), timeout=60)
    assert ids_scores(second) == ids_scores(first) and ids_scores(first)
    missed, repeated = recorder.requests
    assert "thread hand-off" in missed and "thread hand-off" not in repeated
    assert cache.stats().hits == hits_before + 2


def test_a_repeated_query_reuses_the_request_shape_the_first_one_worked_out(
    opensearch_url, opensearch_demo, embedder, monkeypatch
) -> None:
    """What does not depend on the vectors is worked out once per query (the dialect's
    request shapes): the proxy keeps one dialect per index, so the second search reuses it."""
    from itlr.engines.dialect import Dialect

    worked_out: list[object] = []
    shape = Dialect._shape

    def counted(self: Dialect, *args: object, **kwargs: object) -> object:
        worked_out.append(args[0])
        return shape(self, *args, **kwargs)

    monkeypatch.setattr(Dialect, "_shape", counted)
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder)
    query = '"a shape worked out once" AND NOT "twice"'
    with serving(app) as url:
        answers = [
            httpx.post(
                f"{url}/{opensearch_demo.index_name}/_search", json=logical(query), timeout=60
            )
            for _ in range(3)
        ]
    assert ids_scores(answers[0]) == ids_scores(answers[2]) and ids_scores(answers[0])
    assert len(worked_out) == 1


def test_the_stage_recorder_times_every_stage_of_a_logical_search(
    opensearch_url, opensearch_demo, embedder
) -> None:
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder)
    recorder = app.state.proxy.stages = StageTimes()
    with serving(app) as url:
        answer = httpx.post(
            f"{url}/{opensearch_demo.index_name}/_search",
            json=logical('"a stage for every step" AND NOT "nothing left out"'),
            timeout=60,
        )
    assert answer.status_code == 200, answer.text
    (marks,) = recorder.requests
    assert set(marks) == set(STAGES)
    assert all(ms >= 0 for ms in marks.values())


def test_a_large_answer_streams_through_byte_for_byte(opensearch_url, opensearch_demo) -> None:
    # Every passage with its vector: far past the size that is relayed in one piece.
    body = {"size": 400, "sort": ["_doc"], "query": {"match_all": {}}}
    path = f"/{opensearch_demo.index_name}/_search"
    direct = httpx.post(opensearch_url + path, json=body, timeout=60)
    with serving(create_proxy_app(Connection(opensearch_url))) as url:
        proxied = httpx.post(url + path, json=body, timeout=60)
    assert len(direct.content) > RELAY_IN_ONE_PIECE
    assert proxied.status_code == direct.status_code == 200
    assert proxied.json()["hits"] == direct.json()["hits"]


def test_a_small_answer_keeps_the_upstream_headers_and_bytes(
    opensearch_url, opensearch_demo
) -> None:
    path = f"/{opensearch_demo.index_name}/_mapping"
    direct = httpx.get(opensearch_url + path, timeout=60)
    with serving(create_proxy_app(Connection(opensearch_url))) as url:
        proxied = httpx.get(url + path, timeout=60)
    assert proxied.content == direct.content
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    # Compressed as the upstream sent it (httpx asks for gzip): the same length, the same coding.
    for header in ("content-length", "content-encoding"):
        assert proxied.headers.get(header) == direct.headers.get(header)


def test_a_head_request_gets_the_upstream_status_and_headers_without_a_body(
    opensearch_url, opensearch_demo
) -> None:
    with serving(create_proxy_app(Connection(opensearch_url))) as url:
        for index in (opensearch_demo.index_name, "itlr-no-such-index"):
            direct = httpx.head(f"{opensearch_url}/{index}", timeout=60)
            proxied = httpx.head(f"{url}/{index}", timeout=60)
            assert proxied.status_code == direct.status_code
            assert proxied.headers.get("content-length") == direct.headers.get("content-length")
            assert proxied.content == b""


def test_json_orjson_refuses_still_parses_as_the_standard_library_does() -> None:
    assert decode_json(b'{"size": 5}') == {"size": 5}
    assert math.isnan(decode_json(b'{"boost": NaN}')["boost"])
    assert (
        decode_json(b'{"n": 123456789012345678901234567890}')["n"] == 123456789012345678901234567890
    )
    with pytest.raises(ValueError):
        decode_json(b'{"size": ')


def test_a_model_of_another_dimension_than_the_mapping_is_refused_in_one_line(
    opensearch_url, corpus, embedder
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 3), vector_dims=8)
    config = IndexConfig(name, "vec", "body")
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder, indexes=(config,))
    try:
        with serving(app) as url:
            answer = httpx.post(f"{url}/{name}/_search", json=logical(QUERY), timeout=60)
    finally:
        delete_index(opensearch_url, name)
    assert answer.status_code == 400, answer.text
    reason = answer.json()["error"]["reason"]
    assert "8-dim vectors" in reason and f"{embedder.dims}-dim" in reason and "--model" in reason
    assert "\n" not in reason


def serve_proxy_process(*flags: str) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": PLUGIN, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", "from itlr.cli import app; app()", "serve", "--proxy"]
    server = subprocess.Popen(
        [*command, "--port", str(port), *flags], env=env, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(url + "/", timeout=5)
            return server, url
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                output = server.stderr.read() if server.stderr else "no output"
                raise AssertionError(output) from None
            time.sleep(0.5)


@pytest.mark.parametrize("layout", ["index-config", "field-flags"])
def test_itlr_serve_proxy_takes_the_index_layout_flags(
    layout, opensearch_url, foreign, tmp_path
) -> None:
    if layout == "index-config":
        config = tmp_path / "indexes.json"
        config.write_text(json.dumps({foreign: {"vector_field": "vec", "text_field": "body"}}))
        flags = ["--index-config", str(config)]
    else:
        flags = ["--vector-field", "vec", "--text-field", "body"]
    server, url = serve_proxy_process("--url", opensearch_url, *flags)
    try:
        answer = httpx.post(f"{url}/{foreign}/_search", json=logical(QUERY), timeout=60)
    finally:
        server.terminate()
        server.wait(30)
    hits = ids_scores(answer)
    assert hits and all(score > 0 for _id, score in hits)


def test_serve_without_proxy_refuses_an_index_config_in_one_line(tmp_path) -> None:
    config = tmp_path / "indexes.json"
    config.write_text("{}")
    result = CliRunner().invoke(cli, ["serve", "--index", "demo", "--index-config", str(config)])
    assert result.exit_code == 2
    assert "--index-config" in result.stderr and "--proxy" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_proxy_benchmark_reports_each_stage_and_the_cache_on_row(
    opensearch_url, opensearch_demo, embedder
) -> None:
    from itlr.benchmarks.proxy import OUTSIDE, PROXY_OWN, measure_proxy_overhead, proxy_process

    opensearch_demo.install_scripts()
    app = create_proxy_app(Connection(opensearch_url), embedder=embedder)
    with serving(app) as url, proxy_process(opensearch_url) as own_url:
        result = measure_proxy_overhead(
            opensearch_demo,
            embedder,
            opensearch_url,
            app.state.proxy,
            url,
            repeats=2,
            own_process_url=own_url,
        )
    # The proxy in its own process answered every timed search (a failure raises).
    assert result.own_process is not None and result.own_process.name == PROXY_OWN
    assert result.timings[-1] is result.own_process
    assert set(result.stages_off) == set(result.stages_on) == {*STAGES, OUTSIDE}
    # Cache on, every term comes from the cache on the event loop: no hand-off at all.
    assert result.stages_on["thread hand-off"] == 0.0
    assert result.stages_off["thread hand-off"] > 0.0
    assert app.state.proxy.stages is None  # detached again: a served proxy records nothing
