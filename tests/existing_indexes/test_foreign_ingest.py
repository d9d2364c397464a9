"""Ingesting into an index itlr did not make (mapped and `_bulk`-loaded through REST: text
`body`, `year`, `topic`; no `_meta.itlr`) on a real OpenSearch: documents keep their shape,
only itlr's own fields are added to the mapping, each mapped explicitly before the first write,
and what cannot be written safely is refused in one line before anything changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.cli import app
from itlr.errors import IndexStateError

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'
ITLR_FIELDS = {
    "vec": "knn_vector",
    "itlr_hash": "keyword",
    "itlr_tokens": "keyword",
    "itlr_token_keys": "long",
    "itlr_length": "integer",
}
# Mapped too, never written by ingestion: where itlr's hash guard moves a rewritten document's
# hash (itlr.hash_guard).
ITLR_MAPPED = {**ITLR_FIELDS, "itlr_hash_was": "keyword"}


def mapping(url: str, name: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/{name}/_mapping", timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()[name]["mappings"]


def matching(url: str, name: str, query: dict[str, Any]) -> set[str]:
    """The ids a REST query of the team's own matches (no itlr involved)."""
    httpx.post(f"{url}/{name}/_refresh", timeout=60)
    body = {"size": 1000, "_source": False, "query": query}
    answer = httpx.post(f"{url}/{name}/_search", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return {hit["_id"] for hit in answer.json()["hits"]["hits"]}


TEAM_FILTERS = (
    {"term": {"topic": "sleep"}},
    {"range": {"year": {"gte": 2010, "lt": 2020}}},
    {"bool": {"filter": [{"term": {"topic": "sport"}}, {"range": {"year": {"lte": 2012}}}]}},
)


def bulk_file(path: Path, docs: list[dict[str, Any]]) -> Path:
    """The team's own `_bulk` export of these documents."""
    lines = []
    for doc in docs:
        source = {k: v for k, v in doc.items() if k != "_id"}
        lines += [json.dumps({"index": {"_id": doc["_id"]}}), json.dumps(source)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def team(opensearch_url, corpus):
    """A foreign index of 40 documents without vectors, and the documents."""
    docs = documents(corpus, 40)
    name = create_index(opensearch_url, "opensearch", docs)
    yield name, docs
    delete_index(opensearch_url, name)


def test_cli_ingest_adds_only_itlr_fields_with_their_types_and_keeps_documents_whole(
    opensearch_url, team, tmp_path
) -> None:
    name, docs = team
    before = mapping(opensearch_url, name)
    matched_before = [matching(opensearch_url, name, f) for f in TEAM_FILTERS]
    source = bulk_file(tmp_path / "export.ndjson", docs)
    args = ["ingest", str(source), "--url", opensearch_url, "--index", name]
    result = CliRunner().invoke(app, [*args, "--text-field", "body", "--vector-field", "vec"])
    assert result.exit_code == 0, result.output

    after = mapping(opensearch_url, name)
    for field, spec in before["properties"].items():
        assert after["properties"][field] == spec, field  # the team's fields untouched
    added = {k: v for k, v in after["properties"].items() if k not in before["properties"]}
    assert {k: v["type"] for k, v in added.items()} == ITLR_MAPPED
    assert added["vec"]["dimension"] == 384
    assert added["vec"]["method"]["space_type"] == "cosinesimil"
    assert added["itlr_hash"]["index"] is False and added["itlr_token_keys"]["index"] is False
    assert "_meta" not in after and after.get("dynamic_templates") == before.get(
        "dynamic_templates"
    )

    stored = all_sources(opensearch_url, name)
    assert set(stored) == {d["_id"] for d in docs}
    for doc in docs:
        kept = stored[doc["_id"]]
        assert set(kept) == {"body", "year", "topic", *ITLR_FIELDS}  # no doc_id, no metadata
        assert {k: kept[k] for k in ("body", "year", "topic")} == {
            k: doc[k] for k in ("body", "year", "topic")
        }
    assert [matching(opensearch_url, name, f) for f in TEAM_FILTERS] == matched_before


def test_filters_on_the_team_fields_keep_working_in_itlr_search_after_ingest(
    opensearch_url, team
) -> None:
    name, docs = team
    index = itlr.Index.open(
        name, url=opensearch_url, vector_field="vec", text_field="body", create=True
    )
    report = index.add(
        [{"id": d["_id"], **{k: v for k, v in d.items() if k != "_id"}} for d in docs]
    )
    assert report.failed == {} and report.added + report.updated == len(docs)
    for clause in TEAM_FILTERS:
        wanted = matching(opensearch_url, name, clause)
        for mode in ("knn", "exact"):
            result = index.search(QUERY, k=40, mode=mode, filter=clause)
            got = {hit.id for hit in result.hits}
            assert got and got <= wanted, (clause, mode)
            assert not any("does not map" in w for w in result.warnings)
        exact = index.search(QUERY, k=40, mode="exact", filter=clause)
        assert {hit.id for hit in exact.hits} == wanted  # every matching document is scored
    hit = index.search(QUERY, k=1).hits[0]
    assert set(hit.fields) == {"year", "topic"}
    # Ingested again: compared by hash against the documents as the index holds them.
    again = index.add(
        [{"id": d["_id"], **{k: v for k, v in d.items() if k != "_id"}} for d in docs]
    )
    assert again.unchanged == len(docs) and not again.changed


def test_the_id_stays_a_field_only_where_the_mapping_has_it_or_it_is_named(
    opensearch_url, corpus
) -> None:
    docs = documents(corpus, 3)
    name = create_index(opensearch_url, "opensearch", [])
    try:
        put = {"properties": {"ref": {"type": "keyword"}}}
        assert httpx.put(f"{opensearch_url}/{name}/_mapping", json=put, timeout=60).is_success
        index = itlr.Index.open(
            name, url=opensearch_url, vector_field="vec", text_field="body", create=True
        )
        unmapped = [{"id": d["_id"], "body": d["body"], "year": d["year"]} for d in docs[:1]]
        index.add(unmapped)
        mapped = [{"ref": d["_id"], "body": d["body"], "year": d["year"]} for d in docs[1:2]]
        index.add(mapped, id_field="ref")
        named = [{"sku": 7, "body": d["body"], "year": d["year"]} for d in docs[2:]]
        index.add(named, id_field="sku")
        stored = all_sources(opensearch_url, name)
        assert "id" not in stored[docs[0]["_id"]]
        assert stored[docs[1]["_id"]]["ref"] == docs[1]["_id"]
        assert stored["7"]["sku"] == 7  # as given, not as the id's text
        properties = mapping(opensearch_url, name)["properties"]
        assert "id" not in properties and "doc_id" not in properties
    finally:
        delete_index(opensearch_url, name)


def test_a_replace_that_would_drop_fields_is_refused_before_writing(opensearch_url, team) -> None:
    name, docs = team
    index = itlr.Index.open(
        name, url=opensearch_url, vector_field="vec", text_field="body", create=True
    )
    before = all_sources(opensearch_url, name)
    fine = {"id": docs[1]["_id"], "body": "a new text about sleep", "year": 1999, "topic": "x"}
    short = {"id": docs[0]["_id"], "body": "a new text about sleep", "year": 1999}
    with pytest.raises(IndexStateError, match="'topic'") as refused:
        index.add([fine, short], batch_size=1)  # the refused copy is in the second batch
    assert "\n" not in str(refused.value) and "drop" in str(refused.value)
    after = all_sources(opensearch_url, name)
    assert after[docs[0]["_id"]] == before[docs[0]["_id"]]
    assert after[docs[1]["_id"]] == before[docs[1]["_id"]]  # the first batch: not written either


def test_an_index_without_knn_is_refused_before_its_mapping_changes(
    opensearch_url, corpus, tmp_path
) -> None:
    docs = documents(corpus, 5)
    name = create_index(opensearch_url, "opensearch", docs, knn=False)
    try:
        before = mapping(opensearch_url, name)
        source = bulk_file(tmp_path / "export.ndjson", docs)
        args = ["ingest", str(source), "--url", opensearch_url, "--index", name]
        result = CliRunner().invoke(app, [*args, "--text-field", "body", "--vector-field", "vec"])
        assert result.exit_code != 0
        assert "index.knn: true" in result.output and "--into" in result.output
        assert mapping(opensearch_url, name) == before
        assert all_sources(opensearch_url, name) == {
            d["_id"]: {k: v for k, v in d.items() if k != "_id"} for d in docs
        }
    finally:
        delete_index(opensearch_url, name)


def test_a_vector_field_of_another_dimension_is_refused_before_writing(
    opensearch_url, corpus
) -> None:
    docs = documents(corpus, 3)
    name = create_index(opensearch_url, "opensearch", [], vector_dims=8)
    try:
        bulk(opensearch_url, name, docs)
        before = mapping(opensearch_url, name)
        with pytest.raises(IndexStateError, match="8-dim vectors") as refused:
            itlr.Index.open(
                name, url=opensearch_url, vector_field="vec", text_field="body", create=True
            ).add([{"id": "new", "body": "vitamin D", "year": 2001, "topic": "sleep"}])
        assert "\n" not in str(refused.value)
        assert mapping(opensearch_url, name) == before
        assert "new" not in all_sources(opensearch_url, name)
    finally:
        delete_index(opensearch_url, name)


def test_a_field_itlr_writes_mapped_with_another_type_is_refused(opensearch_url, corpus) -> None:
    docs = documents(corpus, 3)
    name = create_index(opensearch_url, "opensearch", docs)
    try:
        put = {"properties": {"itlr_length": {"type": "keyword"}}}
        assert httpx.put(f"{opensearch_url}/{name}/_mapping", json=put, timeout=60).is_success
        before = mapping(opensearch_url, name)
        index = itlr.Index.open(
            name, url=opensearch_url, vector_field="vec", text_field="body", create=True
        )
        with pytest.raises(IndexStateError, match="'itlr_length' is mapped as keyword"):
            index.add([{"id": "new", "body": "vitamin D", "year": 2001, "topic": "sleep"}])
        assert mapping(opensearch_url, name) == before
    finally:
        delete_index(opensearch_url, name)


def test_ingest_after_a_backfill_leaves_the_mapping_as_it_was_and_search_working(
    opensearch_url, team, embedder
) -> None:
    # The reported case: a team index back-filled in place, then documents ingested into it.
    name, docs = team
    itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
    before = mapping(opensearch_url, name)
    index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
    replaced = {**{k: v for k, v in docs[0].items() if k != "_id"}, "body": "vitamin D and sun"}
    added = {"body": "vitamin D in winter", "year": 2024, "topic": "sleep"}
    report = index.add([{"id": docs[0]["_id"], **replaced}, {"id": "new-1", **added}])
    assert (report.added, report.updated, report.failed) == (1, 1, {})
    assert mapping(opensearch_url, name) == before  # nothing added: all was mapped
    stored = all_sources(opensearch_url, name)
    for doc_id, fields in ((docs[0]["_id"], replaced), ("new-1", added)):
        assert {k: stored[doc_id][k] for k in fields} == fields
        assert set(stored[doc_id]) == {*fields, *ITLR_FIELDS}
    for mode in ("knn", "exact"):
        hits = index.search(QUERY, k=5, mode=mode, filter={"term": {"topic": "sleep"}}).hits
        assert "new-1" in {h.id for h in hits} and {h.fields["topic"] for h in hits} == {"sleep"}


def test_ingest_and_backfill_write_the_same_itlr_fields_for_the_same_text(
    opensearch_url, team
) -> None:
    """One document transform (itlr.transform.ItlrFields): a text back-filled in place and the
    same text ingested under another id carry the same vector, hash and token counts."""
    name, docs = team
    itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
    index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
    twin = {k: v for k, v in docs[0].items() if k != "_id"}
    assert index.add([{"id": "ingested-twin", **twin}]).failed == {}
    stored = all_sources(opensearch_url, name)
    backfilled, ingested = stored[docs[0]["_id"]], stored["ingested-twin"]
    assert set(ingested) == set(backfilled) == {*twin, *ITLR_FIELDS}
    for field in ITLR_FIELDS:
        if field == "vec":
            assert ingested[field] == pytest.approx(backfilled[field], abs=1e-6)
        else:
            assert ingested[field] == backfilled[field], field
