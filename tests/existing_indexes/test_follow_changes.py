"""A follower that never gives up silently, on a real OpenSearch: it embeds with the passage
prompt the back-fill used; a conflict is known by status and type (OpenSearch's words are "version
conflict, required seqNo"); a write the engine refuses is retried and counted where coverage
sees it; an index deleted and created again, an alias moved, the hash guard removed or replaced
are handled or stop it with one line; a cluster that trickles its answers meets a deadline; an
idle follower says so."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

import itlr
from following import Following, Running, current, wait_for
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.backfill import cluster_backend
from itlr.engines.connection import Connection, opensearch_errors
from itlr.engines.deadline import longer_deadline, set_deadline
from itlr.engines.factory import EngineSpec
from itlr.engines.layout import IndexLayout
from itlr.errors import EngineError, IndexStateError
from itlr.fingerprint import HASH_FIELD
from itlr.follow import Follower
from itlr.hash_guard import PIPELINE_ID
from itlr.option_groups import BackfillOptions
from trickle_relay import TrickleRelay

pytestmark = pytest.mark.opensearch


def follower_of(url: str, name: str, embedder, verify_rate: float = 1000.0, **options) -> Follower:
    spec = EngineSpec(
        engine="opensearch",
        index_name=name,
        connection=Connection(url),
        layout=IndexLayout("vec", "body"),
    )
    options = {"recheck": 0.5, **options}
    pace = BackfillOptions(interval=0.2, verify_rate=verify_rate)
    return Follower(cluster_backend(spec, embedder), embedder, "body", pace, **options)


def test_the_follower_embeds_with_the_passage_prompt_the_backfill_used(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 8)
    name = create_index(opensearch_url, "opensearch", docs[:4])
    try:
        with Following(opensearch_url, name, passage_prompt="passage: "):
            bulk(opensearch_url, name, docs[4:])  # written while it follows

            def all_embedded() -> bool:
                sources = all_sources(opensearch_url, name).values()
                return sum(HASH_FIELD in s for s in sources) == 8

            wait_for(all_embedded)
            sources = all_sources(opensearch_url, name)
            ids = sorted(sources)
            texts = [sources[i]["body"] for i in ids]
            stored = np.asarray([sources[i]["vec"] for i in ids], dtype=np.float32)
            prompted = embedder.with_prompts("", "passage: ").encode_passages(texts)
            assert np.allclose(stored, prompted, atol=1e-5)
            assert not np.allclose(stored, embedder.encode(texts), atol=1e-3)
    finally:
        delete_index(opensearch_url, name)


def test_a_conflict_on_opensearch_is_changed_meanwhile_never_a_failure(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 4)
    name = create_index(opensearch_url, "opensearch", docs)
    follower = follower_of(opensearch_url, name, embedder)
    follower.prepare()
    embed = follower.transform.embed
    rewritten = "Volcanoes erupt molten lava and ash."

    def embed_while_someone_writes(texts):
        # Between the follower's read and its write, the team rewrites one document.
        httpx.post(
            f"{opensearch_url}/{name}/_update/{docs[0]['_id']}",
            json={"doc": {"body": rewritten}},
            timeout=30,
        ).raise_for_status()
        follower.transform.embed = embed
        return embed(texts)

    follower.transform.embed = embed_while_someone_writes
    try:
        first = follower.cycle()
        assert (first.changed_meanwhile, first.failed, first.embedded) == (1, 0, 3)
        assert follower.report.failed == {} and not follower.failing
        second = follower.cycle()
        assert second.embedded == 1
        assert current(opensearch_url, name, embedder)
        assert all_sources(opensearch_url, name)[docs[0]["_id"]]["body"] == rewritten
    finally:
        delete_index(opensearch_url, name)


def test_refused_writes_are_retried_and_counted_where_coverage_sees_them(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 6)
    name = create_index(opensearch_url, "opensearch", docs)
    url = f"{opensearch_url}/{name}"
    follower = follower_of(opensearch_url, name, embedder, verify_rate=0)
    try:
        running = Running(follower)  # prepared (its mapping put) before the block
        # Blocked before the follower's first cycle: no document can be written ahead of it.
        httpx.put(f"{url}/_settings", json={"index.blocks.write": True}, timeout=30)
        with running:
            wait_for(lambda: len(follower.report.failed) == 6)
            assert all("index write" in r for r in follower.report.failed.values())
            index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")

            def counted() -> bool:
                index.backend.coverage_cache.forget()
                coverage = index.coverage()
                return coverage is not None and coverage.failing == 6

            wait_for(counted, 30)
            result = index.search('"vitamin D"', k=3, mode="exact")
            assert result.exact is False
            assert any("could not be written by the follower" in w for w in result.warnings)

            httpx.put(f"{url}/_settings", json={"index.blocks.write": False}, timeout=30)
            wait_for(lambda: current(opensearch_url, name, embedder), 180)
            wait_for(lambda: not follower.report.failed, 60)

            def cleared() -> bool:
                index.backend.coverage_cache.forget()
                coverage = index.coverage()
                return coverage is not None and coverage.failing == 0

            wait_for(cleared, 30)
        assert follower.report.embedded == 6
    finally:
        httpx.put(f"{url}/_settings", json={"index.blocks.write": False}, timeout=30)
        delete_index(opensearch_url, name)


def test_an_index_deleted_and_created_again_is_prepared_again_and_embedded(
    opensearch_url, corpus, embedder
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 5))
    lines: list[str] = []
    follower = follower_of(opensearch_url, name, embedder, on_line=lines.append)
    try:
        with Running(follower) as running:
            wait_for(lambda: current(opensearch_url, name, embedder))
            delete_index(opensearch_url, name)
            body = {
                "settings": {"index": {"knn": True, "number_of_shards": 2}},
                "mappings": {"properties": {"body": {"type": "text"}}},
            }
            httpx.put(f"{opensearch_url}/{name}", json=body, timeout=30).raise_for_status()
            bulk(opensearch_url, name, documents(corpus[10:], 7))
            wait_for(lambda: len(all_sources(opensearch_url, name)) == 7)
            wait_for(lambda: current(opensearch_url, name, embedder))
            assert running.error is None
        mapping = httpx.get(f"{opensearch_url}/{name}/_mapping", timeout=30).json()
        assert mapping[name]["mappings"]["properties"]["vec"]["type"] == "knn_vector"
        assert any("was deleted and created again: checked, mapped" in line for line in lines)
    finally:
        delete_index(opensearch_url, name)


def test_an_alias_moved_to_another_index_is_followed_there(
    opensearch_url, corpus, embedder
) -> None:
    first = create_index(opensearch_url, "opensearch", documents(corpus, 4))
    second = create_index(opensearch_url, "opensearch", documents(corpus[10:], 5))
    alias = f"{first}-current"

    def point(at: str, away: str | None) -> None:
        actions = [{"add": {"index": at, "alias": alias}}]
        if away:
            actions.insert(0, {"remove": {"index": away, "alias": alias}})
        httpx.post(
            f"{opensearch_url}/_aliases", json={"actions": actions}, timeout=30
        ).raise_for_status()

    point(first, None)
    lines: list[str] = []
    follower = follower_of(opensearch_url, alias, embedder, on_line=lines.append)
    try:
        with Running(follower) as running:
            wait_for(lambda: current(opensearch_url, first, embedder))
            point(second, first)
            wait_for(lambda: current(opensearch_url, second, embedder))
            assert running.error is None
        assert any(f"now names index {second!r} (was {first!r})" in line for line in lines)
    finally:
        delete_index(opensearch_url, first)
        delete_index(opensearch_url, second)


def test_an_index_created_again_without_knn_stops_the_cli_follower_with_one_line(
    opensearch_url, corpus
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 4))
    command = [
        *(sys.executable, "-c", "from itlr.cli import app; app()"),
        *("backfill", "--url", opensearch_url, "--index", name, "--follow", "--interval", "0.2"),
        *("--text-field", "body", "--vector-field", "vec"),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:

        def hashed() -> int:
            return sum(HASH_FIELD in s for s in all_sources(opensearch_url, name).values())

        wait_for(lambda: hashed() == 4)
        delete_index(opensearch_url, name)
        # Created with its text field mapped, as a team recreates it: between an unmapped
        # creation and the first write the follower may look, and rightly say the index maps
        # no text field (a different one-line stop than the one this test is about).
        body = {
            "settings": {"index": {"number_of_shards": 1}},
            "mappings": {"properties": {"body": {"type": "text"}}},
        }
        httpx.put(f"{opensearch_url}/{name}", json=body, timeout=30).raise_for_status()
        bulk(opensearch_url, name, documents(corpus, 2))
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 2, stdout + stderr
        error = stderr.strip().splitlines()[-1]
        assert "index.knn: true" in error and "Traceback" not in stderr, stderr
        assert "vec" not in httpx.get(f"{opensearch_url}/{name}/_mapping", timeout=30).json()[name][
            "mappings"
        ].get("properties", {})
    finally:
        if process.poll() is None:
            process.kill()
        delete_index(opensearch_url, name)


def test_the_hash_guard_removed_is_put_back_and_replaced_stops_the_follower(
    opensearch_url, corpus, embedder
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 3))
    url = f"{opensearch_url}/{name}"
    lines: list[str] = []
    follower = follower_of(opensearch_url, name, embedder, on_line=lines.append)
    try:
        with Running(follower, install_pipeline=True) as running:
            wait_for(lambda: current(opensearch_url, name, embedder))
            httpx.put(
                f"{url}/_settings", json={"index": {"final_pipeline": None}}, timeout=30
            ).raise_for_status()

            def guarded() -> bool:
                got = httpx.get(f"{url}/_settings", timeout=30).json()[name]["settings"]["index"]
                return got.get("final_pipeline") == PIPELINE_ID

            wait_for(guarded, 30)
            assert any("made its final pipeline again" in line for line in lines)
            httpx.put(
                f"{opensearch_url}/_ingest/pipeline/{name}-other",
                json={"processors": []},
                timeout=30,
            ).raise_for_status()
            httpx.put(
                f"{url}/_settings", json={"index": {"final_pipeline": f"{name}-other"}}, timeout=30
            ).raise_for_status()
            wait_for(lambda: not running.thread.is_alive(), 30)
            assert isinstance(running.error, IndexStateError)
            message = str(running.error)
            assert "\n" not in message and f"'{name}-other' instead of itlr's hash guard" in message
    finally:
        delete_index(opensearch_url, name)
        httpx.delete(f"{opensearch_url}/_ingest/pipeline/{name}-other", timeout=30)


def test_the_followers_deadline_cuts_a_trickled_request_and_a_bulk_gets_a_longer_one(
    opensearch_url,
) -> None:
    """The follower's deadline is the service's one mechanism (itlr.engines.deadline): a
    trickled answer is cut at the client's deadline for a whole request; within
    `longer_deadline` (a bulk write) a request gets the longer one."""
    with TrickleRelay(opensearch_url) as relay:
        client = Connection(relay.url).opensearch()
        set_deadline(client, 1.0)
        relay.trickling.set()
        for seconds in (None, 3.0):
            started = time.monotonic()
            with (
                pytest.raises(EngineError) as cut,
                longer_deadline(seconds) if seconds else contextlib.nullcontext(),
                opensearch_errors(relay.url, "itlr"),
            ):
                client.info()
            took = time.monotonic() - started
            assert (seconds or 1.0) <= took < (seconds or 1.0) + 10, took
            message = str(cut.value)
            assert "did not answer in time (the overall deadline of a request)" in message
            assert "\n" not in message


def test_a_cluster_that_trickles_its_answers_meets_the_followers_deadline(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 6)
    name = create_index(opensearch_url, "opensearch", docs[:3])
    errors: list[str] = []
    with TrickleRelay(opensearch_url, interval=1.0) as relay:
        follower = follower_of(
            relay.url, name, embedder, request_deadline=2.0, on_error=errors.append
        )
        try:
            with Running(follower) as running:
                wait_for(lambda: current(opensearch_url, name, embedder))
                relay.trickling.set()
                wait_for(lambda: bool(errors), 30)
                assert "did not answer in time (the overall deadline" in errors[0]
                assert "\n" not in errors[0]
                # Cut, not abandoned: no thread is left waiting on the trickled answer.
                assert not [t for t in threading.enumerate() if t.name == "itlr-request"]
                relay.trickling.clear()
                bulk(opensearch_url, name, docs[3:])
                wait_for(
                    lambda: (
                        len(all_sources(opensearch_url, name)) == 6
                        and current(opensearch_url, name, embedder)
                    ),
                    120,
                )
                assert running.error is None
        finally:
            delete_index(opensearch_url, name)


def test_an_idle_follower_says_so_at_the_start_and_on_every_heartbeat(
    opensearch_url, corpus, embedder
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 3))
    lines: list[str] = []
    follower = follower_of(opensearch_url, name, embedder, on_line=lines.append, heartbeat=0.5)
    try:
        with Running(follower):
            wait_for(lambda: sum("idle; so far 3 embedded" in line for line in lines) >= 2, 60)
        assert f"following {name!r} in place (3 documents)" in lines[0]
        assert "hash sweep at 1000 documents/s" in lines[0]
        beat = next(line for line in lines if "idle" in line)
        assert "every write before" in beat and "0 failing (retried)" in beat
    finally:
        delete_index(opensearch_url, name)
