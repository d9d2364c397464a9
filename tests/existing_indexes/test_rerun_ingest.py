"""Re-runnable ingestion into the index a team really has (issue 53, item 3), on a real
OpenSearch: 2 shards, its own `default_pipeline` that lowercases `tags` and stamps
`ingested_at`, documents loaded through REST. The second run of the same file was refused
(exit 2) because the pipeline's `ingested_at` "was missing from the new copy", and under
itlr's hash guard because of itlr's own `itlr_hash_was`; now it is "unchanged", with and
without the guard, and `--merge` sends only changed fields."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import all_sources, delete_index
from itlr.cli import app

pytestmark = pytest.mark.opensearch

TAGS = (["Sleep", "Memory"], ["Vitamin-D", "Bones"], ["Sport"])


def team_documents(corpus: list[Any], count: int) -> list[dict[str, Any]]:
    return [
        {"id": doc.id, "body": doc.text, "year": 2000 + n, "tags": TAGS[n % 3]}
        for n, doc in enumerate(corpus[:count])
    ]


@pytest.fixture()
def team(opensearch_url: str, corpus):
    """A team's index (2 shards, knn on, a default pipeline of its own) holding 12 documents
    written through REST, and those documents as the team's ingestion file holds them."""
    name = f"itlr-team-{uuid.uuid4().hex[:8]}"
    pipeline = f"{name}-pipeline"
    body = {
        "processors": [
            {"foreach": {"field": "tags", "processor": {"lowercase": {"field": "_ingest._value"}}}},
            {"set": {"field": "ingested_at", "value": "{{_ingest.timestamp}}"}},
        ]
    }
    answer = httpx.put(f"{opensearch_url}/_ingest/pipeline/{pipeline}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    settings = {"number_of_shards": 2, "number_of_replicas": 0, "knn": True}
    settings["default_pipeline"] = pipeline
    mappings = {
        "properties": {
            "body": {"type": "text"},
            "year": {"type": "integer"},
            "tags": {"type": "keyword"},
            "ingested_at": {"type": "date"},
        }
    }
    answer = httpx.put(
        f"{opensearch_url}/{name}",
        json={"settings": {"index": settings}, "mappings": mappings},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    docs = team_documents(corpus, 12)
    lines = []
    for doc in docs:
        lines += [json.dumps({"index": {"_id": doc["id"]}}), json.dumps(doc)]
    answer = httpx.post(
        f"{opensearch_url}/{name}/_bulk?refresh=true",
        content="\n".join(lines) + "\n",
        headers={"content-type": "application/x-ndjson"},
        timeout=60,
    )
    assert answer.status_code == 200 and not answer.json()["errors"], answer.text[:300]
    yield name, docs
    delete_index(opensearch_url, name)
    httpx.delete(f"{opensearch_url}/_ingest/pipeline/{pipeline}", timeout=30)


def ingest(url: str, name: str, source: Path, *more: str):
    args = ["ingest", str(source), "--url", url, "--index", name]
    return CliRunner().invoke(app, [*args, "--text-field", "body", "--vector-field", "vec", *more])


def jsonl(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_the_same_file_twice_is_unchanged_on_a_team_index_with_its_pipeline(
    opensearch_url: str, team, tmp_path: Path
) -> None:
    name, docs = team
    source = jsonl(tmp_path / "team.jsonl", docs)
    first = ingest(opensearch_url, name, source)
    assert first.exit_code == 0, first.output
    assert "added 0, updated 12, unchanged 0" in first.stdout  # embedded: no vector before
    stamped = {i: s["ingested_at"] for i, s in all_sources(opensearch_url, name).items()}
    second = ingest(opensearch_url, name, source)
    assert second.exit_code == 0, second.output
    assert "added 0, updated 0, unchanged 12" in second.stdout
    after = all_sources(opensearch_url, name)
    assert {i: s["ingested_at"] for i, s in after.items()} == stamped  # nothing rewritten
    assert after[docs[1]["id"]]["tags"] == ["vitamin-d", "bones"]  # the pipeline's work kept


def test_the_same_file_twice_is_unchanged_under_itlrs_hash_guard(
    opensearch_url: str, team, tmp_path: Path
) -> None:
    from itlr.hash_guard import install_hash_guard

    name, docs = team
    index = itlr.Index.open(
        name, url=opensearch_url, vector_field="vec", text_field="body", create=True
    )
    install_hash_guard(index.backend)  # type: ignore[arg-type]
    source = jsonl(tmp_path / "team.jsonl", docs)
    assert ingest(opensearch_url, name, source).exit_code == 0
    stored = all_sources(opensearch_url, name)
    assert all("itlr_hash" not in s and s["itlr_hash_was"] for s in stored.values())
    second = ingest(opensearch_url, name, source)
    assert second.exit_code == 0, second.output
    assert "added 0, updated 0, unchanged 12" in second.stdout

    # A text changed through REST meanwhile: the moved hash no longer matches it, so the file's
    # copy (the old text) is embedded and written again.
    changed = docs[0]["id"]
    answer = httpx.post(
        f"{opensearch_url}/{name}/_update/{changed}?refresh=true",
        json={"doc": {"body": "a text the team's application rewrote"}},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    third = ingest(opensearch_url, name, source)
    assert "added 0, updated 1, unchanged 11" in third.stdout, third.output
    assert all_sources(opensearch_url, name)[changed]["body"] == docs[0]["body"]


def test_a_replace_that_lacks_a_teams_field_is_refused_naming_that_field_only(
    opensearch_url: str, team, tmp_path: Path
) -> None:
    name, docs = team
    assert ingest(opensearch_url, name, jsonl(tmp_path / "a.jsonl", docs)).exit_code == 0
    short = [{k: v for k, v in docs[0].items() if k != "year"}]
    result = ingest(opensearch_url, name, jsonl(tmp_path / "b.jsonl", short))
    assert result.exit_code == 2, result.output
    assert "'year'" in result.stderr
    assert "ingested_at" not in result.stderr and "itlr_" not in result.stderr


def test_merge_changes_only_the_fields_a_script_sends(
    opensearch_url: str, team, tmp_path: Path
) -> None:
    name, docs = team
    assert ingest(opensearch_url, name, jsonl(tmp_path / "a.jsonl", docs)).exit_code == 0
    before = all_sources(opensearch_url, name)
    target, other = docs[2]["id"], docs[3]["id"]
    changes = jsonl(
        tmp_path / "changes.jsonl",
        [
            {"id": target, "year": 1999},  # fields only: no text, no re-embedding
            {"id": other, "tags": ["Sleep"]},
            {"id": docs[4]["id"], "year": docs[4]["year"]},  # the same value: unchanged
        ],
    )
    result = ingest(opensearch_url, name, changes, "--merge")
    assert result.exit_code == 0, result.output
    assert "added 0, updated 2, unchanged 1" in result.stdout
    after = all_sources(opensearch_url, name)
    assert after[target]["year"] == 1999
    assert after[target]["body"] == before[target]["body"]
    assert after[target]["tags"] == before[target]["tags"]
    assert after[target]["vec"] == before[target]["vec"]  # the stored vector kept
    assert after[other]["tags"] == ["sleep"] and after[other]["year"] == before[other]["year"]
    again = ingest(opensearch_url, name, changes, "--merge")
    assert "added 0, updated 0, unchanged 3" in again.stdout, again.output

    bulk = tmp_path / "update.ndjson"
    bulk.write_text(
        json.dumps({"update": {"_id": target}}) + "\n" + json.dumps({"doc": {"year": 2001}}) + "\n"
    )
    assert ingest(opensearch_url, name, bulk).exit_code == 0
    final = all_sources(opensearch_url, name)[target]
    assert final["year"] == 2001 and final["tags"] == before[target]["tags"]


def test_hits_and_stored_fields_carry_no_itlr_field(opensearch_url: str, team, tmp_path) -> None:
    from itlr.hash_guard import install_hash_guard

    name, docs = team
    index = itlr.Index.open(
        name, url=opensearch_url, vector_field="vec", text_field="body", create=True
    )
    install_hash_guard(index.backend)  # type: ignore[arg-type]
    assert ingest(opensearch_url, name, jsonl(tmp_path / "a.jsonl", docs)).exit_code == 0
    stored = index.backend.fingerprints([docs[0]["id"]])[docs[0]["id"]][1]
    assert not any(key.startswith("itlr_") for key in stored)
    hits = index.search('"sleep"', k=3).hits
    assert hits and not any(key.startswith("itlr_") for hit in hits for key in hit.fields)
