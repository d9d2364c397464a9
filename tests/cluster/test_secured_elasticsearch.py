"""itlr against an Elasticsearch with security on (fixture `secured_elasticsearch`: TLS on HTTP
from a generated CA, file-realm users, a role that reads only `itlr-secure-a*`). That build has
no Painless, so what runs here is what needs no `script_score`: back-fill, `translate`, the dense
baseline, the query-bar proxy relaying with the UI user's own credentials, and the one-line
refusals (a missing privilege, a wrong CA, a wrong API key)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import documents
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.errors import EngineError
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import IndexConfig
from secured_elasticsearch import INDEX_A, INDEX_B, SecuredCluster

pytestmark = pytest.mark.elasticsearch

QUERY = '"vitamin D" AND NOT "bone health"'
COUNT = 30


def load(cluster: SecuredCluster, name: str, docs: list[dict[str, Any]]) -> None:
    properties = {"body": {"type": "text"}, "year": {"type": "integer"}}
    properties["topic"] = {"type": "keyword"}
    body = {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0},
        "mappings": {"properties": properties},
    }
    lines = []
    for doc in docs:
        source = {k: v for k, v in doc.items() if k != "_id"}
        lines += [json.dumps({"index": {"_index": name, "_id": doc["_id"]}}), json.dumps(source)]
    with cluster.client() as http:
        created = http.put(f"/{name}", json=body)
        assert created.status_code == 200, created.text
        loaded = http.post(
            "/_bulk?refresh=true",
            content="\n".join(lines) + "\n",
            headers={"content-type": "application/x-ndjson"},
        )
        assert loaded.status_code == 200 and not loaded.json()["errors"], loaded.text[:300]


def connection(cluster: SecuredCluster, **auth: Any) -> dict[str, Any]:
    """Index.open / Index.backfill keywords for this cluster (the build has no GET / to
    detect the engine with, so it is named)."""
    return {"url": cluster.url, "engine": "elasticsearch", "ca_file": cluster.ca_file, **auth}


def as_user(who: tuple[str, str]) -> dict[str, str]:
    return {"user": who[0], "password": who[1]}


def cli_auth(cluster: SecuredCluster, who: tuple[str, str]) -> list[str]:
    return [
        "--url", cluster.url, "--engine", "elasticsearch", "--ca-file", cluster.ca_file,
        "--user", who[0], "--password", who[1],
    ]  # fmt: skip


@pytest.fixture(scope="module")
def secured(secured_elasticsearch, corpus) -> Iterator[SecuredCluster]:
    """Index A back-filled (as admin, over TLS) and index B, both with the demo documents."""
    cluster = secured_elasticsearch
    docs = documents(corpus, COUNT)
    load(cluster, INDEX_A, docs)
    load(cluster, INDEX_B, docs)
    report = itlr.Index.backfill(
        INDEX_A,
        text_field="body",
        vector_field="vec",
        **connection(cluster, **as_user(cluster.admin)),
    )
    assert (report.embedded, report.failed) == (COUNT, {}), report.summary()
    yield cluster
    with cluster.client() as http:
        http.delete(f"/{INDEX_A},{INDEX_B}")


def test_cli_backfill_over_tls_with_a_user_finds_every_vector_current(secured) -> None:
    args = ["backfill", "--index", INDEX_A, "--text-field", "body", "--vector-field", "vec"]
    result = CliRunner().invoke(app, [*args, *cli_auth(secured, secured.admin)])
    assert result.exit_code == 0, result.output
    assert f"0 embedded, {COUNT} already current" in result.output


def test_backfill_with_an_api_key(secured) -> None:
    if secured.api_key is None:
        pytest.skip(f"this Elasticsearch build cannot make API keys: {secured.api_key_error}")
    report = itlr.Index.backfill(
        INDEX_A,
        text_field="body",
        vector_field="vec",
        **connection(secured, api_key=secured.api_key),
    )
    assert report.skipped == COUNT and report.failed == {}


def test_a_wrong_api_key_is_refused_in_one_line(secured) -> None:
    with pytest.raises(EngineError, match="refused the credentials") as refused:
        itlr.Index.open(
            INDEX_A,
            vector_field="vec",
            text_field="body",
            **connection(secured, api_key="bm9wZTpub3Bl"),
        )
    assert "\n" not in str(refused.value) and "bm9wZTpub3Bl" not in str(refused.value)


def test_the_dense_baseline_as_the_reader_over_tls(secured) -> None:
    index = itlr.Index.open(
        INDEX_A,
        vector_field="vec",
        text_field="body",
        **connection(secured, **as_user(secured.reader)),
    )
    hits = index.dense("vitamin D", k=5)
    assert len(hits) == 5 and "vitamin d" in hits[0].text.lower()
    assert set(hits[0].fields) == {"year", "topic"}


def test_the_reader_cannot_open_index_b(secured) -> None:
    with pytest.raises(EngineError, match="denied the request") as denied:
        itlr.Index.open(
            INDEX_B,
            vector_field="vec",
            text_field="body",
            **connection(secured, **as_user(secured.reader)),
        )
    message = str(denied.value)
    assert "\n" not in message and "reader" in message and "`read`" in message


def test_translate_counts_the_index_statistics_as_the_reader(secured) -> None:
    args = ["translate", QUERY, "--index", INDEX_A, "--format", "json", "--k", "5"]
    args += ["--vector-field", "vec", "--text-field", "body"]
    result = CliRunner().invoke(app, [*args, *cli_auth(secured, secured.reader)])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    # Hybrid truths were built from statistics counted over TLS as the reader.
    params = json.dumps(body)
    assert '"avgdl"' in params and "cosine truths" not in result.stderr


def test_a_script_install_without_manage_fails_in_one_line_naming_it(secured) -> None:
    result = CliRunner().invoke(app, ["install", *cli_auth(secured, secured.reader)])
    assert result.exit_code != 0
    said = [line for line in result.output.splitlines() if line.strip()]
    assert len(said) == 1, result.output
    assert "manage" in said[0] and "reader" in said[0] and "itlr install" in said[0]


def test_a_wrong_ca_fails_in_one_line_and_verify_certs_off_connects(secured) -> None:
    wrong = {**connection(secured, **as_user(secured.reader)), "ca_file": secured.wrong_ca_file}
    for ca in (secured.wrong_ca_file, None):  # another CA, and only the system's CAs
        with pytest.raises(EngineError, match="certificate verify failed") as failed:
            itlr.Index.open(
                INDEX_A, vector_field="vec", text_field="body", **{**wrong, "ca_file": ca}
            )
        assert "\n" not in str(failed.value) and "--ca-file" in str(failed.value)
    unverified = {**wrong, "ca_file": None, "verify_certs": False}
    index = itlr.Index.open(INDEX_A, vector_field="vec", text_field="body", **unverified)
    assert len(index.dense("vitamin D", k=3)) == 3
    result = CliRunner().invoke(
        app,
        ["backfill", "--index", INDEX_A, "--text-field", "body", "--vector-field", "vec",
         *cli_auth(secured, secured.admin)[:4], "--ca-file", secured.wrong_ca_file,
         "--user", "admin", "--password", secured.admin[1]],
    )  # fmt: skip
    assert result.exit_code != 0
    said = [line for line in result.output.splitlines() if line.strip()]
    assert len(said) == 1 and "certificate verify failed" in said[0], result.output


def test_the_proxy_relays_with_the_ui_users_own_credentials(secured, embedder) -> None:
    config = IndexConfig("itlr-secure-*", "vec", "body")
    upstream = Connection(secured.url, ca_file=secured.ca_file)
    proxy = create_proxy_app(upstream, embedder=embedder, indexes=(config,))
    plain = {"size": 3, "query": {"match": {"body": "vitamin"}}}
    logical = {"size": 3, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    with serving(proxy) as url, httpx.Client(base_url=url, timeout=120) as ui:
        allowed = ui.post(f"/{INDEX_A}/_search", json=plain, auth=secured.reader)
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["hits"]["hits"]
        for body in (plain, logical):
            denied = ui.post(f"/{INDEX_B}/_search", json=body, auth=secured.reader)
            assert denied.status_code == 403, denied.text
            assert "hits" not in denied.json() and "security_exception" in denied.text
        anonymous = ui.post(f"/{INDEX_A}/_search", json=plain)
        assert anonymous.status_code == 401
        admin = ui.post(f"/{INDEX_B}/_search", json=plain, auth=secured.admin)
        assert admin.status_code == 200 and admin.json()["hits"]["hits"]


def test_ingest_into_the_team_index_keeps_its_shape_on_elasticsearch(secured) -> None:
    auth = connection(secured, **as_user(secured.admin))
    index = itlr.Index.open(INDEX_B, vector_field="vec", text_field="body", create=True, **auth)
    with secured.client() as http:
        before = http.get(f"/{INDEX_B}/_mapping").json()[INDEX_B]["mappings"]
        stored = http.get(f"/{INDEX_B}/_doc/d001").json()["_source"]
    report = index.add([{"id": "d001", **stored}, {"id": "b-new", **{**stored, "body": "sleep"}}])
    assert (report.added, report.updated, report.failed) == (1, 1, {})
    with secured.client() as http:
        after = http.get(f"/{INDEX_B}/_mapping").json()[INDEX_B]["mappings"]
        kept = http.get(f"/{INDEX_B}/_doc/b-new").json()["_source"]
    added = {k: v["type"] for k, v in after["properties"].items() if k not in before["properties"]}
    assert added == {
        "vec": "dense_vector",
        "itlr_hash": "keyword",
        "itlr_hash_was": "keyword",  # mapped for the hash guard, never written by ingestion
        "itlr_tokens": "keyword",
        "itlr_token_keys": "long",
        "itlr_length": "integer",
    }
    assert all(after["properties"][k] == v for k, v in before["properties"].items())
    assert set(kept) == {"body", "year", "topic", *added} - {"itlr_hash_was"}
    again = index.add([{"id": "d001", **stored}])
    assert again.unchanged == 1


def test_a_proxy_that_does_not_trust_the_cluster_ca_says_so_in_one_line(secured, embedder) -> None:
    config = IndexConfig("itlr-secure-*", "vec", "body")
    upstream = Connection(secured.url, ca_file=secured.wrong_ca_file)
    proxy = create_proxy_app(upstream, embedder=embedder, indexes=(config,))
    plain = {"size": 3, "query": {"match": {"body": "vitamin"}}}
    logical = {"size": 3, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    with serving(proxy) as url, httpx.Client(base_url=url, timeout=120) as ui:
        for body in (plain, logical):
            answer = ui.post(f"/{INDEX_A}/_search", json=body, auth=secured.admin)
            assert answer.status_code == 502, answer.text
            reason = answer.json()["error"]["reason"]
            assert "certificate verify failed" in reason and "--ca-file" in reason
            assert "\n" not in reason
