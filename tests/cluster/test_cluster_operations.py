"""The cluster operations ingestion, back-fill and the follower compose
(itlr.engines.operations), each engine's call shapes against a real server: the same calls do
the same on OpenSearch and Elasticsearch, refused bulk actions come back by id, and an error
names the index the request was about."""

from __future__ import annotations

import uuid

import httpx
import pytest

from foreign_index import delete_index
from itlr.engines.connection import Connection
from itlr.engines.elasticsearch import ElasticsearchOperations
from itlr.engines.opensearch import OpenSearchOperations
from itlr.engines.operations import ClusterOperations
from itlr.errors import IndexStateError


@pytest.fixture(
    params=[
        pytest.param("opensearch", marks=pytest.mark.opensearch),
        pytest.param("elasticsearch", marks=pytest.mark.elasticsearch),
    ]
)
def cluster(request: pytest.FixtureRequest):
    """(operations, url, a fresh index name); the indexes and pipeline named after it are
    deleted afterwards."""
    url = request.getfixturevalue(f"{request.param}_url")
    connection = Connection(url)
    if request.param == "opensearch":
        operations: ClusterOperations = OpenSearchOperations(connection.opensearch(), url)
    else:
        operations = ElasticsearchOperations(connection.elasticsearch(), url)
    name = f"itlr-ops-{uuid.uuid4().hex[:8]}"
    yield operations, url, name
    for index in (name, f"{name}-b"):
        delete_index(url, index)
    httpx.delete(f"{url}/_ingest/pipeline/{name}", timeout=30)


def test_the_operations_do_the_same_on_either_engine(cluster) -> None:
    operations, url, name = cluster
    mappings = {"properties": {"body": {"type": "text"}, "n": {"type": "integer"}}}
    operations.create_index(name, {"index": {"number_of_shards": 1}}, mappings)
    assert operations.exists(name) and not operations.exists(f"{name}-b")

    failed = operations.bulk(
        [
            {"_op_type": "index", "_index": name, "_id": "a", "body": "alpha", "n": 1},
            {"_op_type": "index", "_index": name, "_id": "b", "body": "beta", "n": 2},
            {"_op_type": "index", "_index": name, "_id": "c", "body": "gamma", "n": "many"},
            {"_op_type": "delete", "_index": name, "_id": "gone"},
        ],
        name,
    )
    assert set(failed) == {"c", "gone"}
    assert "[n]" in failed["c"] and failed["gone"] == "not found"

    operations.refresh(name)
    assert operations.count(name) == 2
    assert operations.count(name, {"term": {"n": 2}}) == 1
    assert operations.mget(name, ["a", "b", "missing"], ["body"]) == {
        "a": {"body": "alpha"},
        "b": {"body": "beta"},
    }
    assert operations.mget(name, ["a"], False) == {"a": {}}
    assert operations.mget(name, ["a"], excludes=["n"]) == {"a": {"body": "alpha"}}
    assert operations.mget(name, []) == {}
    assert sorted(hit["_id"] for hit in operations.scan(name, False, size=1)) == ["a", "b"]
    hits = operations.search(name, {"query": {"match": {"body": "beta"}}})["hits"]["hits"]
    assert [hit["_id"] for hit in hits] == ["b"]

    operations.put_mapping(name, {"tag": {"type": "keyword"}})
    assert operations.mapping(name)["properties"]["tag"] == {"type": "keyword"}
    operations.put_pipeline(name, {"description": "test", "processors": []}, name)
    operations.put_settings(name, {"index": {"final_pipeline": name}})
    assert operations.settings(name)["final_pipeline"] == name

    alias = f"{name}-current"
    operations.create_index(f"{name}-b", {}, mappings)
    operations.move_alias(alias, name)
    operations.move_alias(alias, f"{name}-b")
    holders = httpx.get(f"{url}/_alias/{alias}", timeout=30).json()
    assert list(holders) == [f"{name}-b"]


def test_an_error_is_one_line_about_the_index_the_request_named(cluster) -> None:
    operations, _, name = cluster
    for request in (
        lambda: operations.mapping(name),
        lambda: operations.count(name),
        lambda: operations.mget(name, ["a"]),
        lambda: list(operations.scan(name)),
    ):
        with pytest.raises(IndexStateError, match=f"index '{name}' does not exist") as missing:
            request()
        assert "\n" not in str(missing.value)


def test_a_refused_write_is_known_by_status_and_type_on_either_engine(cluster) -> None:
    """A conditional write on a document changed since it was read is a conflict, and an
    update of a missing one is missing, whatever words the engine uses (OpenSearch: "version
    conflict, required seqNo ...")."""
    operations, _, name = cluster
    operations.create_index(name, {"index": {"number_of_shards": 1}}, {})
    operations.bulk([{"_op_type": "index", "_index": name, "_id": "a", "n": 1}], name)
    refused = operations.bulk_refusals(
        [
            {"_op_type": "update", "_index": name, "_id": "a", "doc": {"n": 2}}
            | {"if_seq_no": 99, "if_primary_term": 1},
            {"_op_type": "update", "_index": name, "_id": "gone", "doc": {"n": 2}},
            {"_op_type": "index", "_index": name, "_id": "b", "n": "many"},
        ],
        name,
    )
    assert refused["a"].conflict and not refused["a"].missing
    assert refused["gone"].missing and not refused["gone"].conflict
    assert not refused["b"].conflict and not refused["b"].missing and "[n]" in refused["b"].reason


def test_one_index_is_asked_of_a_name_that_names_several_in_one_line(cluster) -> None:
    operations, _, name = cluster
    for index in (name, f"{name}-b"):
        operations.create_index(index, {"index": {"number_of_shards": 2}}, {})
    assert [state.name for state in operations.describe(f"{name}*")] == [name, f"{name}-b"]
    for several in (f"{name}*", f"{name},{name}-b"):
        with pytest.raises(IndexStateError, match=r"names 2 indexes .*: give the name of one"):
            operations.mapping(several)
        with pytest.raises(IndexStateError, match=r"names 2 indexes"):
            operations.settings(several)
    (state,) = operations.describe(name)
    assert state.uuid and state.settings["number_of_shards"] == "2"
    operations.bulk([{"_op_type": "index", "_index": name, "_id": "r", "routing": "x"}], name)
    assert operations.shard_checkpoints(name) in ({0: 0, 1: -1}, {0: -1, 1: 0})
    assert operations.mget(name, ["r"], False, routing={"r": "x"}) == {"r": {}}


def test_an_action_that_makes_the_engine_refuse_its_whole_request_costs_itself_only(
    cluster,
) -> None:
    # An id over 512 bytes fails validation of the whole _bulk request (HTTP 400): the request
    # is sent again in halves until that action alone is refused (issue 56, item 2).
    operations, _url, name = cluster
    operations.create_index(name, {"index": {"number_of_shards": 1}}, {})
    long_id = "x" * 600
    actions = [
        {"_op_type": "index", "_index": name, "_id": f"d{i}", "_source": {"n": i}}
        for i in range(40)
    ]
    actions.insert(17, {"_op_type": "index", "_index": name, "_id": long_id, "_source": {"n": -1}})
    actions.append({"_op_type": "update", "_index": name, "_id": "d3", "doc": {"m": 3}})
    failed = operations.bulk(actions, name, chunk_size=16)
    assert list(failed) == [long_id]
    assert "512" in failed[long_id] and len(failed[long_id]) <= 300
    operations.refresh(name)
    assert operations.count(name) == 40
    assert operations.mget(name, ["d3"])["d3"] == {"n": 3, "m": 3}
