"""`itlr backfill --into` never writes into an index that is not itlr's copy of this very source
(nor the source, its aliases or a pattern), never writes a vector into a field not mapped as one,
and creates the copy like its source (shards, analysis, pipelines, routing), on a real
OpenSearch and Elasticsearch, through the CLI and `itlr.Index.backfill`."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.cli import app
from itlr.errors import ItlrError
from itlr.into import COPY_META

pytestmark = pytest.mark.opensearch


def index_state(url: str, name: str) -> tuple[dict, int]:
    """(mapping, document count) of an index, to show it was left as it was."""
    httpx.post(f"{url}/{name}/_refresh", timeout=30)
    mapping = httpx.get(f"{url}/{name}/_mapping", timeout=30).json()
    count = httpx.get(f"{url}/{name}/_count", timeout=30).json()["count"]
    return mapping, count


def run_backfill(url: str, name: str, *extra: str, engine: str = "opensearch"):
    common = ["--url", url, "--index", name, "--text-field", "body", "--vector-field", "vec"]
    common += ["--engine", engine]
    return CliRunner().invoke(app, ["backfill", *common, *extra])


def refused_both_ways(
    url: str, name: str, into: str, pattern: str, engine: str = "opensearch", **options
) -> None:
    """The CLI refuses with exit 2 and one line; `Index.backfill` raises the same."""
    extra = ["--into", into]
    if options.get("alias"):
        extra += ["--alias", options["alias"]]
    result = run_backfill(url, name, *extra, engine=engine)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert pattern in line, line
    with pytest.raises(ItlrError, match=re.escape(pattern)):
        itlr.Index.backfill(
            name,
            url=url,
            text_field="body",
            vector_field="vec",
            into=into,
            engine=engine,
            **options,
        )


@pytest.fixture()
def source_and_users_index(opensearch_url, corpus):
    """A team's source index without index.knn, and another index of theirs (5 documents)
    with an alias; both deleted afterwards."""
    source = create_index(opensearch_url, "opensearch", documents(corpus, 8), knn=False)
    users = create_index(opensearch_url, "opensearch", documents(corpus[20:], 5), prefix="userdocs")
    alias = f"{users}-alias"
    httpx.post(
        f"{opensearch_url}/_aliases",
        json={"actions": [{"add": {"index": users, "alias": alias}}]},
        timeout=30,
    ).raise_for_status()
    yield source, users, alias
    delete_index(opensearch_url, source)
    delete_index(opensearch_url, users)


def test_into_an_existing_index_that_is_not_this_sources_copy_is_refused_and_left_whole(
    opensearch_url, source_and_users_index
) -> None:
    source, users, alias = source_and_users_index
    before = index_state(opensearch_url, users)
    refused_both_ways(opensearch_url, source, users, "not a copy itlr made")
    refused_both_ways(opensearch_url, source, alias, f"--into {alias!r} is an alias")
    assert index_state(opensearch_url, users) == before
    assert before[1] == 5


def test_into_a_copy_of_another_source_is_refused(opensearch_url, source_and_users_index) -> None:
    source, users, _ = source_and_users_index
    copy = f"{users}-copy"
    try:
        first = run_backfill(opensearch_url, users, "--into", copy)
        assert first.exit_code == 0, first.output
        before = index_state(opensearch_url, copy)
        refused_both_ways(opensearch_url, source, copy, f"a copy itlr made of {users!r}")
        assert index_state(opensearch_url, copy) == before
    finally:
        delete_index(opensearch_url, copy)


def test_into_the_source_itself_or_its_alias_is_refused_and_the_source_keeps_its_mapping(
    opensearch_url, source_and_users_index
) -> None:
    source, _, _ = source_and_users_index
    alias = f"{source}-read"
    httpx.post(
        f"{opensearch_url}/_aliases",
        json={"actions": [{"add": {"index": source, "alias": alias}}]},
        timeout=30,
    ).raise_for_status()
    before = index_state(opensearch_url, source)
    refused_both_ways(opensearch_url, source, source, "is the source index")
    refused_both_ways(opensearch_url, source, alias, "is the source index")
    # The source named by its alias, the copy by the source's own name.
    refused_both_ways(opensearch_url, alias, source, "is the source index")
    assert index_state(opensearch_url, source) == before
    assert "vec" not in before[0][source]["mappings"]["properties"]


@pytest.mark.parametrize("into", ["*", "_all", "a,b", "copy*", "Upper", "<logs-{now/d}>", " "])
def test_into_or_alias_that_is_not_one_index_name_is_refused_in_one_line(
    into, opensearch_url, source_and_users_index
) -> None:
    source, users, _ = source_and_users_index
    before = index_state(opensearch_url, users)
    refused_both_ways(opensearch_url, source, into, f"--into {into!r}")
    refused_both_ways(opensearch_url, source, f"{source}-new", f"--alias {into!r}", alias=into)
    assert index_state(opensearch_url, users) == before
    assert httpx.head(f"{opensearch_url}/{source}-new", timeout=30).status_code == 404


def test_an_alias_that_cannot_name_the_copy_is_refused_before_the_copy_is_made(
    opensearch_url, source_and_users_index
) -> None:
    source, users, _ = source_and_users_index
    copy = f"{source}-copy"
    refused_both_ways(opensearch_url, source, copy, "is an index, not an alias", alias=users)
    refused_both_ways(opensearch_url, source, copy, "is the --into name", alias=copy)
    assert httpx.head(f"{opensearch_url}/{copy}", timeout=30).status_code == 404


@pytest.mark.parametrize("kind", ["users", "users alias", "source", "pattern"])
def test_following_into_an_index_that_is_not_this_sources_copy_is_refused(
    kind, opensearch_url, source_and_users_index
) -> None:
    source, users, alias = source_and_users_index
    into = {"users": users, "users alias": alias, "source": source, "pattern": "*"}[kind]
    before = index_state(opensearch_url, users), index_state(opensearch_url, source)
    with pytest.raises(ItlrError):
        itlr.Index.follow(
            source,
            url=opensearch_url,
            text_field="body",
            vector_field="vec",
            into=into,
        )
    assert (index_state(opensearch_url, users), index_state(opensearch_url, source)) == before


@pytest.mark.parametrize("into", [False, True], ids=["in place", "into"])
def test_a_source_name_that_names_several_indexes_is_refused_in_one_line(
    into, opensearch_url, source_and_users_index
) -> None:
    source, users, _ = source_and_users_index
    before = index_state(opensearch_url, users)
    for pattern in ("userdocs-*,itlr-foreign-*", "_all", f"{source},{users}"):
        extra = ["--into", f"{source}-copy"] if into else []
        result = run_backfill(opensearch_url, pattern, *extra)
        assert result.exit_code == 2, result.output
        line = result.output.strip()
        assert "\n" not in line and "indexes" in line and "one index" in line, line
    assert index_state(opensearch_url, users) == before


def test_a_vector_is_never_written_into_a_field_not_mapped_as_one(
    opensearch_url, source_and_users_index
) -> None:
    """An index that claims to be this source's copy but does not map the vector field (made
    by hand): refused before one document is written, not mapped by guess as `float`."""
    source, _, _ = source_and_users_index
    forged = f"{source}-forged"
    body = {
        "mappings": {
            "_meta": {COPY_META: {"source": source}},
            "properties": {"body": {"type": "text"}},
        }
    }
    httpx.put(f"{opensearch_url}/{forged}", json=body, timeout=30).raise_for_status()
    try:
        refused_both_ways(opensearch_url, source, forged, "does not map 'vec' as knn_vector")
        mapping, count = index_state(opensearch_url, forged)
        assert count == 0 and "vec" not in mapping[forged]["mappings"]["properties"]
    finally:
        delete_index(opensearch_url, forged)


def test_the_copy_is_created_like_its_source_and_marked_as_its_copy(
    opensearch_url, corpus, embedder
) -> None:
    """2 shards, a custom analyzer, the team's default pipeline, routed documents and a field
    named like bulk metadata: the copy has them all, plus index.knn and the marker; the
    default pipeline is not run again on the copy, so a re-run copies nothing."""
    url = opensearch_url
    name = f"team-{uuid.uuid4().hex[:8]}"
    pipeline = f"{name}-stamp"
    httpx.put(
        f"{url}/_ingest/pipeline/{pipeline}",
        json={
            "processors": [
                {"lowercase": {"field": "tag", "ignore_missing": True}},
                {"set": {"field": "ingested_at", "value": "{{_ingest.timestamp}}"}},
            ]
        },
        timeout=30,
    ).raise_for_status()
    settings = {
        "index": {
            "number_of_shards": 2,
            "number_of_replicas": 0,
            "default_pipeline": pipeline,
            "analysis": {
                "analyzer": {"folded": {"tokenizer": "standard", "filter": ["lowercase"]}}
            },
        }
    }
    mappings = {
        "properties": {
            "body": {"type": "text", "analyzer": "folded"},
            "tag": {"type": "keyword"},
            "pipeline": {"type": "keyword"},
        }
    }
    httpx.put(
        f"{url}/{name}", json={"settings": settings, "mappings": mappings}, timeout=30
    ).raise_for_status()
    docs = [
        {"_id": d.id, "body": d.text, "tag": "TEAM", "pipeline": "a field, not bulk metadata"}
        for d in corpus[:10]
    ]
    for doc in docs[:4]:  # routed by hand: the copy must find them on the same shard
        answer = httpx.put(
            f"{url}/{name}/_doc/{doc['_id']}?routing=r{doc['_id']}",
            json={k: v for k, v in doc.items() if k != "_id"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
    bulk(url, name, docs[4:])
    into = f"{name}-vectors"
    try:
        first = run_backfill(url, name, "--into", into)
        assert first.exit_code == 0, first.output
        assert "10 embedded" in first.output
        got = httpx.get(f"{url}/{into}/_settings", timeout=30).json()[into]["settings"]["index"]
        assert got["number_of_shards"] == "2" and got["knn"] == "true"
        assert got["default_pipeline"] == pipeline
        assert got["analysis"]["analyzer"]["folded"]["filter"] == ["lowercase"]
        meta = httpx.get(f"{url}/{into}/_mapping", timeout=30).json()[into]["mappings"]
        assert meta["_meta"][COPY_META]["source"] == name
        assert meta["properties"]["body"]["analyzer"] == "folded"
        assert meta["properties"]["vec"]["type"] == "knn_vector"

        source, copied = all_sources(url, name), all_sources(url, into)
        strip = {"vec", "itlr_hash", "itlr_tokens", "itlr_token_keys", "itlr_length"}
        assert {i: {k: v for k, v in s.items() if k not in strip} for i, s in copied.items()} == (
            source
        )
        assert all(
            s["tag"] == "team" and s["pipeline"].startswith("a field") for s in copied.values()
        )
        for doc in docs[:4]:
            routed = httpx.get(
                f"{url}/{into}/_doc/{doc['_id']}?routing=r{doc['_id']}", timeout=30
            ).json()
            assert routed["found"] and routed["_routing"] == f"r{doc['_id']}"

        again = run_backfill(url, name, "--into", into)
        assert again.exit_code == 0, again.output
        summary = again.output.strip().splitlines()[-1]
        assert "0 embedded, 10 already current (0 of them with changed fields copied)" in summary
        index = itlr.Index.open(into, url=url, vector_field="vec", text_field="body")
        assert len(index.search('"vitamin D"', k=3).hits) == 3
    finally:
        delete_index(url, into)
        delete_index(url, name)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)


@pytest.mark.elasticsearch
def test_on_elasticsearch_into_a_users_index_or_the_source_is_refused(
    elasticsearch_url, corpus
) -> None:
    url = elasticsearch_url
    source = create_index(url, "elasticsearch", documents(corpus, 6))
    users = create_index(url, "elasticsearch", documents(corpus[20:], 5), prefix="userdocs")
    try:
        before = index_state(url, users)
        es = "elasticsearch"
        refused_both_ways(url, source, users, "not a copy itlr made", engine=es)
        refused_both_ways(url, source, source, "is the source index", engine=es)
        refused_both_ways(url, source, "_all", "--into '_all'", engine=es)
        assert index_state(url, users) == before
        copy = f"{source}-copy"
        result = run_backfill(url, source, "--into", copy, engine=es)
        assert result.exit_code == 0, result.output
        assert "6 embedded" in result.output
        delete_index(url, copy)
    finally:
        delete_index(url, source)
        delete_index(url, users)
