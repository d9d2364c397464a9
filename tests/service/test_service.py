"""`itlr serve`'s JSON API, served by a real uvicorn over the real model and engines: the same
answers as `itlr search --json`, the same errors as the CLI, and a policy on who may ask."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec, remote_backend
from itlr.service import create_app
from itlr.service.security import check_exposure, client_token, is_loopback, token_matches
from itlr.service.server import free_port, serving
from served_process import first_answer

runner = CliRunner()
QUERY = '"vitamin D benefits" AND NOT "bone health"'
TOKEN = "a-client-token-of-32-characters!"

# (JSON body, the same options as `itlr search` flags)
CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"query": QUERY}, []),
    (
        {"query": QUERY, "k": 5, "mode": "exact", "hard_filter": 0.5, "and": "min", "or": "max"},
        ["-k", "5", "--mode", "exact", "--hard-filter", "0.5", "--and", "min", "--or", "max"],
    ),
    (
        {"query": '"sunlight" OR NOT "vitamin D"', "truth": "sigmoid", "tau": 0.3, "lam": 8},
        ["--truth", "sigmoid", "--tau", "0.3", "--lam", "8"],
    ),
    (
        {"query": "vitamin D, but not bone health", "rewrite": "rules", "candidates": 50},
        ["--rewrite", "rules", "--candidates", "50"],
    ),
]


def cli_search(query: str, index: str, *flags: str) -> dict[str, Any]:
    result = runner.invoke(cli, ["search", query, "--index", index, "--json", *flags])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(("body", "flags"), CASES, ids=["default", "options", "sigmoid", "rules"])
def test_search_gives_the_hits_itlr_search_json_gives(service, demo_index, body, flags) -> None:
    answer = service.post("/search", json=body)
    assert answer.status_code == 200, answer.text
    expected = cli_search(body["query"], str(demo_index.spec.index_name), *flags)
    assert answer.json() == expected
    assert len(expected["hits"]) > 0


def test_eight_concurrent_clients_get_what_one_client_gets(service) -> None:
    bodies = [body for body, _ in CASES] * 4
    sequential = [service.post("/search", json=b).json() for b in bodies]
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda b: service.post("/search", json=b).json(), bodies))
    assert concurrent == sequential


def test_a_syntax_error_is_a_422_with_the_position_and_caret_the_cli_shows(service) -> None:
    answer = service.post("/search", json={"query": '"vitamin D" AND (NOT "bones"'})
    assert answer.status_code == 422
    error = answer.json()
    cli_run = runner.invoke(cli, ["parse", '"vitamin D" AND (NOT "bones"'])
    assert cli_run.exit_code == 2
    assert error["position"] == 16 and error["caret"].splitlines()[-1] == " " * 16 + "^"
    assert cli_run.stderr.strip() == f"{error['error']}\n{error['caret']}".strip()


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"query": QUERY, "hard_filter": 2}, 422, "hard_filter: Input should be less than"),
        ({"query": QUERY, "mode": "fast"}, 422, "mode: Input should be 'knn' or 'exact'"),
        ({"query": QUERY, "hardfilter": 0.5}, 422, "hardfilter: Extra inputs are not permitted"),
        ({"k": 3}, 422, "query: Field required"),
        ({"query": QUERY, "exclude_lexical": True}, 400, "`exclude_lexical` needs a text index"),
        ({"query": QUERY, "rewrite": "llm"}, 400, "started without an LLM"),
        ({"query": QUERY, "filter": {"bogus": {}}}, 400, "bogus"),
    ],
)
def test_bad_options_are_a_4xx_with_one_line(service, body, status, fragment) -> None:
    answer = service.post("/search", json=body)
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert fragment in message and "\n" not in message and "Traceback" not in answer.text


def test_a_body_that_is_not_json_is_a_422(service) -> None:
    answer = service.post("/search", content=b"{nope", headers={"content-type": "application/json"})
    assert answer.status_code == 422 and "not valid JSON" in answer.json()["error"]


def test_a_body_over_the_limit_is_refused_before_parsing(demo_index) -> None:
    app = create_app(demo_index, max_body_bytes=1000)
    with serving(app) as url:
        big = httpx.post(f"{url}/search", json={"query": '"' + "x" * 2000 + '"'})
        assert big.status_code == 413 and "over 1000 bytes" in big.json()["error"]

        def chunks():  # no Content-Length: the limit still holds
            yield b'{"query": "'
            yield b"x" * 2000
            yield b'"}'

        streamed = httpx.post(
            f"{url}/search", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413


def test_translate_parse_rewrite_and_healthz_answer_as_the_cli_does(service, demo_index) -> None:
    translated = service.post("/translate", json={"query": QUERY, "k": 7, "hard_filter": 0.5})
    assert translated.status_code == 200
    (search,) = translated.json()["requests"]
    name = demo_index.spec.index_name
    printed = runner.invoke(
        cli, ["translate", QUERY, "-i", name, "-k", "7", "--hard-filter", "0.5", "--format", "json"]
    )
    assert search["method"] == "GET" and search["path"] == f"{name}/_search"
    assert search["body"] == json.loads(printed.stdout)
    installs = service.post("/translate", json={"query": QUERY, "with_install": True}).json()
    assert [r["method"] for r in installs["requests"]] == ["PUT", "PUT", "GET"]

    parsed = service.post("/parse", json={"query": "a OR NOT b"}).json()
    assert parsed == json.loads(runner.invoke(cli, ["parse", "a OR NOT b", "--json"]).stdout)

    rewritten = service.post("/rewrite", json={"question": "vitamin D, but not bone health"})
    assert rewritten.json()["query"] == '("vitamin D" AND NOT "bone health")'

    health = service.get("/healthz").json()
    assert health["status"] == "ok" and health["count"] == demo_index.count()
    assert health["encoder"] == demo_index.embedder.encoder
    assert service.get("/docs").status_code == 200
    assert "/search" in service.get("/openapi.json").json()["paths"]


def test_a_token_is_needed_on_every_request_when_one_is_set(demo_index) -> None:
    with serving(create_app(demo_index, token=TOKEN)) as url:
        assert httpx.get(f"{url}/healthz").status_code == 401
        assert httpx.get(f"{url}/docs").status_code == 401
        wrong = httpx.post(f"{url}/search", json={"query": QUERY}, headers={"X-Itlr-Token": "x"})
        assert wrong.status_code == 401 and TOKEN not in wrong.text
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.post(f"{url}/search", json={"query": QUERY}, headers=bearer).status_code == 200
        header = {"X-Itlr-Token": TOKEN}
        assert httpx.get(f"{url}/healthz", headers=header).status_code == 200


def test_binding_beyond_loopback_needs_a_token(monkeypatch) -> None:
    monkeypatch.delenv("ITLR_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    check_exposure("127.0.0.1", None)
    with pytest.raises(itlr.ConfigurationError, match="exposes the cluster credentials"):
        check_exposure("0.0.0.0", None)
    check_exposure("0.0.0.0", TOKEN)
    with pytest.raises(itlr.ConfigurationError, match="at least 16"):
        client_token("short")
    monkeypatch.setenv("ITLR_TOKEN", TOKEN)
    assert client_token(None) == TOKEN
    assert token_matches(TOKEN, TOKEN) and not token_matches(TOKEN[:-1], TOKEN)


def test_serve_refuses_to_start_beyond_loopback_without_a_token(monkeypatch) -> None:
    monkeypatch.delenv("ITLR_TOKEN", raising=False)
    refused = runner.invoke(cli, ["serve", "--index", "whatever", "--host", "0.0.0.0"])
    assert refused.exit_code == 2
    assert "exposes the cluster credentials" in refused.stderr and "--token" in refused.stderr


# -- OpenSearch ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_index(opensearch_url, corpus) -> itlr.Index:
    name = f"itlr-serve-{uuid.uuid4().hex[:8]}"
    idx = itlr.Index.open(name, url=opensearch_url, create=True)
    records = [{"id": d.id, "text": d.text, **d.fields} for d in corpus[:120]]
    report = idx.add(records)
    assert report.added == 120 and not report.failed
    return idx


@pytest.mark.opensearch
def test_search_on_opensearch_gives_the_hits_itlr_search_json_gives(
    cluster_index, opensearch_url
) -> None:
    assert cluster_index.engine == "opensearch"
    with serving(create_app(cluster_index)) as url:
        for body, flags in CASES[:2]:
            answer = httpx.post(f"{url}/search", json={**body, "explain": True}, timeout=60)
            assert answer.status_code == 200, answer.text
            expected = cli_search(
                body["query"], cluster_index.name, "--url", opensearch_url, "--explain", *flags
            )
            assert answer.json() == expected and expected["hits"]


# The recommended hybrid setting, named in full so that these tests hold whatever the default.
HYBRID_BODY = {"truth": "hybrid", "lexical_share": 0.3, "not_evidence": "max"}
HYBRID_FLAGS = ["--truth", "hybrid", "--lexical-share", "0.3", "--not-evidence", "max"]


@pytest.mark.opensearch
def test_hybrid_truths_on_opensearch_search_and_translate_as_the_cli_does(
    cluster_index, opensearch_url
) -> None:
    with serving(create_app(cluster_index)) as url:
        answer = httpx.post(f"{url}/search", json={"query": QUERY, **HYBRID_BODY}, timeout=60)
        assert answer.status_code == 200, answer.text
        expected = cli_search(QUERY, cluster_index.name, "--url", opensearch_url, *HYBRID_FLAGS)
        assert answer.json() == expected and expected["hits"]
        # /translate counts the index's statistics itself: its body, sent as is, scores alike.
        translated = httpx.post(
            f"{url}/translate", json={"query": QUERY, **HYBRID_BODY}, timeout=60
        )
        assert translated.status_code == 200, translated.text
        (search,) = translated.json()["requests"]
    sent = httpx.post(f"{opensearch_url}/{search['path']}", json=search["body"], timeout=60)
    assert sent.status_code == 200, sent.text
    hits = [(hit["_id"], hit["_score"]) for hit in sent.json()["hits"]["hits"]]
    assert [i for i, _ in hits] == [hit["id"] for hit in expected["hits"]]
    assert [s for _, s in hits] == pytest.approx([h["score"] for h in expected["hits"]], abs=1e-4)


def test_translate_on_an_embedded_index_refuses_hybrid_truths_asked_for(service) -> None:
    answer = service.post("/translate", json={"query": QUERY, **HYBRID_BODY})
    assert answer.status_code == 400
    assert "token statistics, counted on the cluster" in answer.json()["error"]


def test_translate_on_an_embedded_index_builds_cosine_truths_for_a_hybrid_default(
    service, monkeypatch
) -> None:
    from itlr.options import search_options
    from itlr.scoring import TRUTH_CODES

    monkeypatch.setitem(search_options.__kwdefaults__, "truth", "hybrid")
    answer = service.post("/translate", json={"query": QUERY})
    assert answer.status_code == 200, answer.text
    (note,) = answer.json()["warnings"]
    assert note.startswith("the default hybrid truths need the index's token statistics")
    (search,) = answer.json()["requests"]
    assert (
        search["body"]["query"]["script_score"]["script"]["params"]["truth"]
        == (TRUTH_CODES["clamp"])
    )


@pytest.mark.opensearch
def test_an_engine_that_is_down_is_a_502_that_shows_no_credentials(embedder) -> None:
    password = "s3cret-password-never-shown"
    connection = Connection(f"http://127.0.0.1:{free_port()}", user="admin", password=password)
    spec = EngineSpec(engine="opensearch", index_name="gone", connection=connection)
    down = itlr.Index(spec, remote_backend(spec, embedder.name, embedder.dims), embedder)
    with serving(create_app(down)) as url:
        answer = httpx.post(f"{url}/search", json={"query": QUERY}, timeout=60)
        assert answer.status_code == 502
        assert "127.0.0.1" in answer.json()["error"] and password not in answer.text
        health = httpx.get(f"{url}/healthz", timeout=60)
        assert health.status_code == 503 and password not in health.text


def test_the_service_only_names_its_own_index(tmp_path: Path, demo_index) -> None:
    # There is no index parameter anywhere in the API: every path acts on the configured one.
    schema = create_app(demo_index).app.openapi()
    for path in schema["paths"].values():
        for operation in path.values():
            body = operation.get("requestBody", {}).get("content", {})
            ref = body.get("application/json", {}).get("schema", {}).get("$ref", "")
            if ref:
                fields = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
                assert "index" not in fields


def test_itlr_serve_starts_answers_and_stops(demo_index) -> None:
    import subprocess
    import sys

    port = free_port()
    command = [sys.executable, "-c", "from itlr.cli import app; app()", "serve"]
    command += [
        "--index",
        str(demo_index.spec.index_name),
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        health = first_answer(server, f"http://127.0.0.1:{port}/healthz")
        assert health.status_code == 200 and health.json()["count"] == demo_index.count()
        answer = httpx.post(f"http://127.0.0.1:{port}/search", json={"query": QUERY}, timeout=60)
        served, expected = answer.json(), demo_index.search(QUERY).to_dict()
        # This process's term cache may hold a term's vector from a batch with other terms:
        # the last bits (about 1e-7) depend on the batch, the hits do not.
        assert [h["id"] for h in served["hits"]] == [h["id"] for h in expected["hits"]]
        for mine, theirs in zip(served["hits"], expected["hits"], strict=True):
            assert abs(mine["score"] - theirs["score"]) < 1e-6
    finally:
        server.terminate()
        server.wait(30)


def test_serve_proxy_without_a_url_says_what_to_give() -> None:
    result = runner.invoke(cli, ["serve", "--proxy"])
    assert result.exit_code == 2
    assert "--proxy needs --url" in result.stderr


def test_serve_without_an_index_names_both_ways_to_run() -> None:
    result = runner.invoke(cli, ["serve"])
    assert result.exit_code == 2
    assert "--index" in result.stderr and "--proxy" in result.stderr


@pytest.mark.opensearch
def test_the_service_searches_from_remembered_statistics_and_counts_after_a_write(
    opensearch_url, corpus, monkeypatch
) -> None:
    """service -> Index -> ClusterBackend: hybrid statistics are counted until two counts
    agreed, then not again (ITLR_STATS_MAX_AGE), and again at once after a write through the
    Index; the scores are those of a freshly counted search."""
    monkeypatch.setenv("ITLR_STATS_MAX_AGE", "3600")
    name = f"itlr-serve-stats-{uuid.uuid4().hex[:8]}"
    idx = itlr.Index.open(name, url=opensearch_url, create=True)
    try:
        assert idx.add([{"id": d.id, "text": d.text} for d in corpus[:80]]).added == 80
        counts: list[str] = []
        backend = idx.backend
        searches = backend.searches  # the backend's search rounds
        count, multi = searches.term_statistics, searches._multi_search
        monkeypatch.setattr(
            searches, "term_statistics", lambda q: counts.append("apart") or count(q)
        )

        def multi_search(bodies):
            counts.extend("along" for body in bodies if "aggs" in body)
            return multi(bodies)

        monkeypatch.setattr(searches, "_multi_search", multi_search)

        def fresh() -> list[tuple[str, float]]:
            again = itlr.Index.open(name, url=opensearch_url, create=False)
            options = {"truth": "hybrid", "lexical": 0.3, "not_evidence": "max"}
            return [(h.id, h.score) for h in again.search(QUERY, **options).hits]

        body = {"query": QUERY, **HYBRID_BODY}
        with serving(create_app(idx)) as url:

            def searched() -> list[tuple[str, float]]:
                answer = httpx.post(f"{url}/search", json=body, timeout=60)
                assert answer.status_code == 200, answer.text
                return [(h["id"], h["score"]) for h in answer.json()["hits"]]

            before = fresh()
            for _ in range(4):
                got = searched()
                assert [i for i, _ in got] == [i for i, _ in before]
                assert [s for _, s in got] == pytest.approx([s for _, s in before], abs=1e-4)
            assert counts == ["apart", "apart"]
            assert idx.add([{"id": d.id, "text": d.text} for d in corpus[80:90]]).added == 10
            got = searched()
            # Untrusted by the write: a count goes along with the search (one `_msearch`); it
            # differs from the remembered one, so the search is built again from it.
            assert counts == ["apart", "apart", "along"]
        after = fresh()
        assert [i for i, _ in got] == [i for i, _ in after] and got != before
        assert [s for _, s in got] == pytest.approx([s for _, s in after], abs=1e-4)
    finally:
        idx.backend.client.indices.delete(index=name, ignore_unavailable=True)
