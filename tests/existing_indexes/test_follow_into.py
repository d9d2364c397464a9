"""`itlr backfill --follow --into COPY` on a real OpenSearch: the team's index has no
`index.knn` (OpenSearch's default), two shards and its own default pipeline, and the team keeps
writing to it through REST; itlr's copy follows every write (new, overwritten, partial
`_update`, `_bulk` update, routed, deleted) and survives a kill -9, resuming where it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid

import httpx
import numpy as np
import pytest

import itlr
from following import rest, wait_for
from foreign_index import all_sources, bulk, delete_index, documents
from itlr.backfill import cluster_backend
from itlr.change_feed import FOLLOW_META
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec
from itlr.engines.layout import IndexLayout
from itlr.errors import ConfigurationError
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.follow_copy import CopyFollower
from itlr.option_groups import BackfillOptions

pytestmark = pytest.mark.opensearch

# A copy follower copies, then embeds: it is given longer than the in-place one.
COPY_WAIT = 180.0

ITLR_FIELDS = {"vec", HASH_FIELD, "itlr_hash_was", "itlr_tokens", "itlr_token_keys", "itlr_length"}


def team_index(url: str, docs: list[dict]) -> tuple[str, str]:
    """A 2-shard index without index.knn whose default pipeline lowercases `topic` and stamps
    `ingested_at`; (its name, its pipeline's id)."""
    name = f"team-{uuid.uuid4().hex[:8]}"
    pipeline = f"{name}-stamp"
    httpx.put(
        f"{url}/_ingest/pipeline/{pipeline}",
        json={
            "processors": [
                {"lowercase": {"field": "topic", "ignore_missing": True}},
                {"set": {"field": "ingested_at", "value": "{{_ingest.timestamp}}"}},
            ]
        },
        timeout=30,
    ).raise_for_status()
    body = {
        "settings": {
            "index": {"number_of_shards": 2, "number_of_replicas": 0, "default_pipeline": pipeline}
        },
        "mappings": {"properties": {"body": {"type": "text"}, "topic": {"type": "keyword"}}},
    }
    httpx.put(f"{url}/{name}", json=body, timeout=30).raise_for_status()
    bulk(url, name, docs)
    return name, pipeline


def mirrored(url: str, source: str, copy: str, embedder) -> bool:
    """The copy holds exactly the source's documents, each with the vector of its text."""
    try:
        theirs, ours = all_sources(url, source), all_sources(url, copy)
    except AssertionError:  # the copy not created yet, or its shards not started yet
        return False
    if set(theirs) != set(ours):
        return False
    for doc_id, fields in theirs.items():
        if {k: v for k, v in ours[doc_id].items() if k not in ITLR_FIELDS} != fields:
            return False
        if fields.get("body") and ours[doc_id].get(HASH_FIELD) != content_hash(
            fields["body"], embedder.name
        ):
            return False
    with_text = sorted(i for i, s in ours.items() if s.get("body"))
    stored = np.asarray([ours[i]["vec"] for i in with_text], dtype=np.float32)
    expected = embedder.encode([ours[i]["body"] for i in with_text])
    return bool(np.allclose(stored, expected, atol=1e-5))


def test_follow_into_keeps_a_copy_of_a_knn_less_index_current(
    opensearch_url, corpus, embedder
) -> None:
    url = opensearch_url
    docs = documents(corpus, 20)
    source, pipeline = team_index(url, docs)
    copy, alias = f"{source}-itlr", f"{source}-search"
    stop = threading.Event()
    cycles: list = []
    lines: list[str] = []
    outcome: dict = {}

    def follow() -> None:
        outcome["report"] = itlr.Index.follow(
            source,
            url=url,
            text_field="body",
            vector_field="vec",
            into=copy,
            alias=alias,
            stop=stop,
            interval=0.2,
            on_cycle=cycles.append,
            on_line=lines.append,
        )

    thread = threading.Thread(target=follow, daemon=True)
    try:
        thread.start()
        wait_for(lambda: httpx.head(f"{url}/{alias}", timeout=30).status_code == 200, COPY_WAIT)
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        settings = httpx.get(f"{url}/{copy}/_settings", timeout=30).json()[copy]["settings"]
        assert settings["index"]["number_of_shards"] == "2"
        assert settings["index"]["knn"] == "true"
        assert settings["index"]["default_pipeline"] == pipeline

        # The team's application writes to its own index, every way it can.
        base = f"{url}/{source}"
        rest("PUT", f"{base}/_doc/new-one", {"body": "Penguins huddle on the ice.", "topic": "X"})
        rest("PUT", f"{base}/_doc/routed?routing=r1", {"body": "Owls hunt at night."})
        bulk(url, source, [{**docs[1], "body": "Volcanoes erupt molten lava and ash."}])
        rest(
            "POST", f"{base}/_update/{docs[2]['_id']}", {"doc": {"body": "Glaciers carve valleys."}}
        )
        rest("POST", f"{base}/_update/{docs[3]['_id']}", {"doc": {"topic": "Changed"}})
        lines_of_bulk = [
            json.dumps({"update": {"_index": source, "_id": docs[4]["_id"]}}),
            json.dumps({"doc": {"body": "Honeybees dance to tell the hive where flowers are."}}),
        ]
        answer = httpx.post(
            f"{url}/_bulk",
            content="\n".join(lines_of_bulk) + "\n",
            headers={"content-type": "application/x-ndjson"},
            timeout=30,
        )
        assert not answer.json()["errors"], answer.text
        rest("DELETE", f"{base}/_doc/{docs[5]['_id']}")

        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        index = itlr.Index.open(alias, url=url, vector_field="vec", text_field="body")
        for query, expected in [
            ('"penguins on ice"', "new-one"),
            ('"owls at night"', "routed"),
            ('"volcano lava"', docs[1]["_id"]),
            ('"glaciers and valleys"', docs[2]["_id"]),
            ('"bees and flowers"', docs[4]["_id"]),
        ]:
            assert [h.id for h in index.search(query, k=1).hits] == [expected], query
        coverage = index.coverage()
        assert coverage is not None and coverage.without_vector == 0
        assert coverage.verified_through is not None and coverage.failing == 0
    finally:
        stop.set()
        thread.join(120)
        delete_index(url, copy)
        delete_index(url, source)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)
    report = outcome["report"]
    assert report.failed == {} and report.deleted == 1
    assert report.embedded == 20 + 5  # the copy, then the five new or changed texts
    assert any(f"following {source!r} into {copy!r}" in line for line in lines)


def test_a_killed_copy_follower_resumes_where_it_stopped(opensearch_url, corpus, embedder) -> None:
    url = opensearch_url
    docs = documents(corpus, 30)
    source, pipeline = team_index(url, docs[:24])
    copy = f"{source}-itlr"
    command = [
        *(sys.executable, "-c", "from itlr.cli import app; app()"),
        *("backfill", "--url", url, "--index", source, "--into", copy, "--follow"),
        *("--text-field", "body", "--vector-field", "vec", "--interval", "0.2"),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:

        def saved() -> dict | None:
            if httpx.head(f"{url}/{copy}", timeout=30).status_code != 200:
                return None
            meta = httpx.get(f"{url}/{copy}/_mapping", timeout=30).json()[copy]["mappings"]
            return (meta.get("_meta") or {}).get(FOLLOW_META)

        wait_for(lambda: saved() is not None and mirrored(url, source, copy, embedder), COPY_WAIT)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        bulk(url, source, docs[24:])  # written while no follower runs

        stop = threading.Event()
        lines: list[str] = []
        outcome: dict = {}

        def follow() -> None:
            outcome["report"] = itlr.Index.follow(
                source,
                url=url,
                text_field="body",
                vector_field="vec",
                into=copy,
                stop=stop,
                interval=0.2,
                on_line=lines.append,
            )

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        stop.set()
        thread.join(120)
        assert any("resuming the copy" in line for line in lines), lines
        # Only what was written while it was down is embedded (no second whole copy).
        assert outcome["report"].embedded == 6
    finally:
        if process.poll() is None:
            process.kill()
        delete_index(url, copy)
        delete_index(url, source)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)


def test_a_copy_follower_mirrors_a_source_or_copy_created_again_from_the_start(
    opensearch_url, corpus, embedder
) -> None:
    url = opensearch_url
    source, pipeline = team_index(url, documents(corpus, 6))
    copy = f"{source}-itlr"
    stop = threading.Event()
    lines: list[str] = []
    thread = threading.Thread(
        target=itlr.Index.follow,
        args=(source,),
        kwargs={
            "url": url,
            "text_field": "body",
            "vector_field": "vec",
            "into": copy,
            "stop": stop,
            "interval": 0.2,
            "on_line": lines.append,
        },
        daemon=True,
    )
    try:
        thread.start()
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        delete_index(url, source)
        httpx.put(
            f"{url}/{source}",
            json={
                "mappings": {
                    "properties": {
                        "body": {"type": "text"},
                        "topic": {"type": "keyword"},  # as before: the copy maps it so
                        "tag": {"type": "keyword"},
                    }
                }
            },
            timeout=30,
        ).raise_for_status()
        bulk(url, source, [{**d, "tag": "again"} for d in documents(corpus[10:], 4)])
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        said = "was deleted and created again: copying it from the start"
        assert any(said in line for line in lines)
        mapping = httpx.get(f"{url}/{copy}/_mapping", timeout=30).json()[copy]["mappings"]
        assert mapping["properties"]["tag"] == {"type": "keyword"}  # mapped as the source maps it

        # The copy deleted under the follower: made again, never created by a write with
        # every field mapped by guess.
        delete_index(url, copy)
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        mapping = httpx.get(f"{url}/{copy}/_mapping", timeout=30).json()[copy]["mappings"]
        assert mapping["properties"]["vec"]["type"] == "knn_vector"
        assert any(f"the copy {copy!r} is gone" in line for line in lines)
    finally:
        stop.set()
        thread.join(120)
        delete_index(url, copy)
        delete_index(url, source)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)


def test_follow_into_refuses_an_alias_that_would_make_the_copy_its_own_source(
    opensearch_url, corpus
) -> None:
    url = opensearch_url
    source, pipeline = team_index(url, documents(corpus, 3))
    try:
        with pytest.raises(ConfigurationError, match="would become its own source"):
            itlr.Index.follow(
                source,
                url=url,
                text_field="body",
                vector_field="vec",
                into=f"{source}-itlr",
                alias=source,
            )
        assert httpx.head(f"{url}/{source}-itlr", timeout=30).status_code == 404
    finally:
        delete_index(url, source)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)


def test_a_field_the_source_maps_anew_is_mapped_in_the_copy_before_a_document_carries_it(
    opensearch_url, corpus, embedder
) -> None:
    """The team maps a new field and writes at once: the copy maps it as the source does before
    any document brings it there (never by guess: `tag` as text would refuse the source's
    keyword for good and stop the follower)."""
    url = opensearch_url
    source, pipeline = team_index(url, documents(corpus, 4))
    copy = f"{source}-itlr"
    spec = EngineSpec(
        engine="opensearch",
        index_name=source,
        connection=Connection(url),
        layout=IndexLayout("vec", "body"),
    )
    # No timed look at the source (recheck): only the documents the feed reads can tell.
    follower = CopyFollower(
        cluster_backend(spec, embedder),
        embedder,
        "body",
        BackfillOptions(into=copy, interval=0.2),
        recheck=3600,
    )
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            follower.prepare()
            follower.run()
        except BaseException as stopped:
            failure.append(stopped)

    thread = threading.Thread(target=follow, daemon=True)
    try:
        thread.start()
        wait_for(lambda: mirrored(url, source, copy, embedder), COPY_WAIT)
        rest("PUT", f"{url}/{source}/_mapping", {"properties": {"tag": {"type": "keyword"}}})
        bulk(url, source, [{**d, "tag": "Mixed Case"} for d in documents(corpus[10:], 3)])
        wait_for(lambda: bool(failure) or mirrored(url, source, copy, embedder), COPY_WAIT)
        assert not failure, failure
        mapping = httpx.get(f"{url}/{copy}/_mapping", timeout=30).json()[copy]["mappings"]
        assert mapping["properties"]["tag"] == {"type": "keyword"}
    finally:
        follower.stop.set()
        thread.join(120)
        delete_index(url, copy)
        delete_index(url, source)
        httpx.delete(f"{url}/_ingest/pipeline/{pipeline}", timeout=30)
