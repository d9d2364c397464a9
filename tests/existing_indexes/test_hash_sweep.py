"""No silent stale vector, on a real OpenSearch: the follower's hash sweep (itlr.change_feed) catches
a `_bulk` `update` that changes a text (no pipeline runs for it, so the hash guard cannot); until
a changed document is embedded again coverage counts it, a search is not exact and says why;
coverage and `/healthz` say up to when every write was verified; a restarted follower resumes
the sweep where it stopped."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import itlr
from following import Following, wait_for
from foreign_index import all_sources, create_index, delete_index, documents
from itlr.change_feed import FOLLOW_META
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD, content_hash
from itlr.service.app import create_app

pytestmark = pytest.mark.opensearch


def bulk_update(url: str, name: str, doc_id: str, fields: dict) -> None:
    lines = [json.dumps({"update": {"_index": name, "_id": doc_id}}), json.dumps({"doc": fields})]
    answer = httpx.post(
        f"{url}/_bulk?refresh=true",
        content="\n".join(lines) + "\n",
        headers={"content-type": "application/x-ndjson"},
        timeout=30,
    )
    assert not answer.json()["errors"], answer.text


def hash_of(url: str, name: str, doc_id: str) -> str | None:
    return all_sources(url, name)[doc_id].get(HASH_FIELD)


def test_a_bulk_update_that_changes_a_text_is_caught_by_the_sweep(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 12)
    name = create_index(opensearch_url, "opensearch", docs)
    target = docs[3]["_id"]
    changed = "Volcanoes erupt molten lava and ash."
    try:
        with Following(opensearch_url, name):
            wait_for(
                lambda: all(HASH_FIELD in s for s in all_sources(opensearch_url, name).values())
            )
            started = time.monotonic()
            bulk_update(opensearch_url, name, target, {"body": changed})
            wait_for(
                lambda: (
                    hash_of(opensearch_url, name, target) == content_hash(changed, embedder.name)
                ),
                60,
            )
            caught_in = time.monotonic() - started
        index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
        assert [h.id for h in index.search('"volcano lava"', k=1).hits] == [target]
        assert caught_in < 30, caught_in
    finally:
        delete_index(opensearch_url, name)


def test_coverage_counts_changed_texts_until_embedded_and_says_how_far_writes_were_verified(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 10)
    name = create_index(opensearch_url, "opensearch", docs)
    index_url = f"{opensearch_url}/{name}"
    try:
        with Following(opensearch_url, name, install_pipeline=True):
            wait_for(
                lambda: all(HASH_FIELD in s for s in all_sources(opensearch_url, name).values())
            )
            index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")

            def verified() -> bool:
                index.backend.coverage_cache.forget()
                coverage = index.coverage()
                return coverage is not None and coverage.verified_through is not None

            wait_for(verified)
        coverage = index.coverage()
        assert coverage.without_vector == 0 and coverage.unverified == 0
        assert time.time() - coverage.verified_through < 120
        result = index.search('"vitamin D"', k=3, mode="exact")
        assert result.exact is True and result.warnings == ()

        # No follower runs now: a write the guard catches leaves a vector of the old text.
        httpx.post(
            f"{index_url}/_update/{docs[2]['_id']}?refresh=true",
            json={"doc": {"body": "Glaciers carve deep valleys."}},
            timeout=30,
        ).raise_for_status()
        assert PREVIOUS_HASH_FIELD in all_sources(opensearch_url, name)[docs[2]["_id"]]
        index.backend.coverage_cache.forget()
        coverage = index.coverage()
        assert coverage.unverified == 1
        result = index.search('"vitamin D"', k=3, mode="exact")
        assert result.exact is False
        assert any(
            "1 documents of" in w and "wait to be embedded again" in w for w in result.warnings
        )
        with TestClient(create_app(index)) as client:
            health = client.get("/healthz").json()["coverage"]
        assert health["unverified"] == 1 and health["verified_through"].endswith("Z")

        with Following(opensearch_url, name, install_pipeline=True):

            def embedded_again() -> bool:
                index.backend.coverage_cache.forget()
                return index.coverage().unverified == 0

            wait_for(embedded_again)
    finally:
        delete_index(opensearch_url, name)


def test_a_restarted_follower_resumes_the_sweep_where_it_stopped(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 40)
    name = create_index(opensearch_url, "opensearch", docs)
    try:
        with Following(opensearch_url, name) as first:
            wait_for(
                lambda: any("idle" in line for line in first.lines) or _saved(opensearch_url, name)
            )
            wait_for(
                lambda: (_saved(opensearch_url, name) or {}).get("verified_through") is not None
            )
        state = _saved(opensearch_url, name)
        assert state is not None and sum(c + 1 for c in state["cursors"].values()) >= 40
        # A _bulk update while no follower runs: the next one finds it past its saved cursor.
        bulk_update(opensearch_url, name, docs[7]["_id"], {"body": "Honeybees dance."})
        from itlr.backfill import cluster_backend
        from itlr.engines.connection import Connection
        from itlr.engines.factory import EngineSpec
        from itlr.engines.layout import IndexLayout
        from itlr.follow import Follower
        from itlr.option_groups import BackfillOptions

        spec = EngineSpec(
            engine="opensearch",
            index_name=name,
            connection=Connection(opensearch_url),
            layout=IndexLayout("vec", "body"),
        )
        follower = Follower(
            cluster_backend(spec, embedder), embedder, "body", BackfillOptions(interval=0.2)
        )
        follower.prepare()
        cycle = follower.cycle()
        # Only what was written since the saved cursors is read again, not all 40.
        assert 1 <= cycle.verified <= 2 and cycle.stale == 1
        follower.cycle()
        expected = content_hash("Honeybees dance.", embedder.name)
        assert hash_of(opensearch_url, name, docs[7]["_id"]) == expected
    finally:
        delete_index(opensearch_url, name)


def _saved(url: str, name: str) -> dict | None:
    mapping = httpx.get(f"{url}/{name}/_mapping", timeout=30).json()[name]["mappings"]
    return (mapping.get("_meta") or {}).get(FOLLOW_META)
