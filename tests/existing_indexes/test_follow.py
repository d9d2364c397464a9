"""`itlr backfill --follow` / `Index.follow(...)` on a real OpenSearch: REST
writes made while it runs (new documents, overwrites, partial updates, deletes) are embedded or
gone within moments; the hash guard pipeline catches the writes that keep a stale hash; kill -9
and a restart lose nothing and embed nothing twice; SIGTERM finishes the batch and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

import itlr
from following import Following, current, hashed, rest, wait_for
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD, content_hash
from itlr.hash_guard import PIPELINE_ID
from itlr.option_groups import BackfillOptions

pytestmark = pytest.mark.opensearch


def test_rest_writes_during_a_follow_run_are_embedded_or_gone(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 30)
    name = create_index(opensearch_url, "opensearch", docs)
    url = f"{opensearch_url}/{name}"
    try:
        with Following(opensearch_url, name, install_pipeline=True) as follower:
            wait_for(lambda: hashed(opensearch_url, name) == 30)
            index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
            embedded_before = sum(c.embedded for c in follower.cycles)
            assert embedded_before == 30

            new = {"body": "Penguins huddle together on the Antarctic ice.", "topic": "sport"}
            rest("PUT", f"{url}/_doc/new-one", new)
            overwritten = {**docs[1], "body": "Volcanoes erupt molten lava and ash."}
            bulk(opensearch_url, name, [overwritten])
            rest(
                "POST",
                f"{url}/_update/{docs[2]['_id']}",
                {"doc": {"body": "Glaciers carve deep valleys."}},
            )
            rest("POST", f"{url}/_update/{docs[3]['_id']}", {"doc": {"topic": "changed"}})
            # A read-modify-write that carries the old hash along with a new text.
            carried = httpx.get(f"{url}/_doc/{docs[4]['_id']}", timeout=30).json()["_source"]
            carried["body"] = "Honeybees dance to tell the hive where flowers are."
            rest("PUT", f"{url}/_doc/{docs[4]['_id']}", carried)
            rest("DELETE", f"{url}/_doc/{docs[5]['_id']}")

            wait_for(
                lambda: (
                    current(opensearch_url, name, embedder) and hashed(opensearch_url, name) == 30
                )
            )
            for query, expected in [
                ('"penguins on ice"', "new-one"),
                ('"volcano lava"', docs[1]["_id"]),
                ('"glaciers and valleys"', docs[2]["_id"]),
                ('"bees and flowers"', docs[4]["_id"]),
            ]:
                assert [h.id for h in index.search(query, k=1).hits] == [expected], query
            assert docs[5]["_id"] not in {h.id for h in index.search('"health"', k=40).hits}
            # The topic-only update kept its text: the hash was put back, not re-embedded.
            source = httpx.get(f"{url}/_doc/{docs[3]['_id']}", timeout=30).json()["_source"]
            assert source[HASH_FIELD] == content_hash(docs[3]["body"], embedder.name)
            assert source.get(PREVIOUS_HASH_FIELD) is None
        report = follower.result
        assert report is not None and report.failed == {}
        assert report.embedded == 30 + 4 and report.restored == 1
        coverage = index.coverage()
        assert coverage is not None and coverage.without_vector == 0
    finally:
        delete_index(opensearch_url, name)


def test_which_writes_the_hash_guard_catches(opensearch_url) -> None:
    """What docs/clusters.md says the pipeline catches, checked write by write."""
    docs = [{"_id": f"d{i}", "body": f"text {i}", HASH_FIELD: "old"} for i in range(8)]
    # Mapped by itlr first (a hash written before would be mapped as text, which itlr
    # refuses), then written before the pipeline: the hashes are kept.
    plain = [{k: v for k, v in d.items() if k != HASH_FIELD} for d in docs]
    name = create_index(opensearch_url, "opensearch", plain)
    url = f"{opensearch_url}/{name}"
    try:
        from itlr.backfill import prepare_in_place
        from itlr.engines.connection import Connection
        from itlr.engines.layout import IndexLayout
        from itlr.engines.opensearch import OpenSearchBackend
        from itlr.hash_guard import install_hash_guard

        backend = OpenSearchBackend(
            Connection(opensearch_url).opensearch(),
            name,
            "m",
            4,
            IndexLayout("vec", "body"),
            url=opensearch_url,
        )
        prepare_in_place(backend, 4, "m")
        bulk(opensearch_url, name, docs)
        install_hash_guard(backend)
        settings = httpx.get(f"{url}/_settings", timeout=30).json()[name]["settings"]["index"]
        assert settings["final_pipeline"] == PIPELINE_ID

        rest("PUT", f"{url}/_doc/d0", {"body": "new", HASH_FIELD: "old"})
        bulk(opensearch_url, name, [{"_id": "d1", "body": "new", HASH_FIELD: "old"}])
        rest("POST", f"{url}/_update/d2", {"doc": {"body": "new"}})
        rest("POST", f"{url}/_update/d3", {"script": {"source": "ctx._source.body = 'new'"}})
        rest(
            "POST",
            f"{url}/_update_by_query",
            {
                "query": {"ids": {"values": ["d4"]}},
                "script": {"source": "ctx._source.body = 'new'"},
            },
        )
        lines = [
            json.dumps({"update": {"_index": name, "_id": "d5"}}),
            json.dumps({"doc": {"body": "new"}}),
        ]
        answer = httpx.post(
            f"{opensearch_url}/_bulk",
            content="\n".join(lines) + "\n",
            headers={"content-type": "application/x-ndjson"},
            timeout=30,
        )
        assert not answer.json()["errors"]
        sources = all_sources(opensearch_url, name)
        caught = {i for i, s in sources.items() if HASH_FIELD not in s}
        assert caught == {"d0", "d1", "d2", "d3", "d4"}
        assert all(sources[i][PREVIOUS_HASH_FIELD] == "old" for i in caught)
        # `_bulk` update actions run no pipeline: d5 keeps a stale hash (a full back-fill run
        # catches it), d6 and d7 were not written.
        assert {i for i, s in sources.items() if s.get(HASH_FIELD) == "old"} == {"d5", "d6", "d7"}
    finally:
        delete_index(opensearch_url, name)


def follow_command(url: str, name: str) -> list[str]:
    return [
        *(sys.executable, "-c", "from itlr.cli import app; app()"),
        *("backfill", "--url", url, "--index", name, "--follow", "--interval", "0.2"),
        *("--text-field", "body", "--vector-field", "vec", "--batch-size", "8"),
    ]


def test_sigterm_finishes_the_batch_and_exits_0(opensearch_url, corpus) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 10))
    try:
        process = subprocess.Popen(
            follow_command(opensearch_url, name),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        wait_for(lambda: hashed(opensearch_url, name) == 10)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        lines = stdout.strip().splitlines()
        assert lines[-1].startswith(f"followed {name} for ") and "10 embedded" in lines[-1]
        # A line at the start, then one per busy cycle, counts only.
        assert f"following {name!r} in place (10 documents)" in lines[0]
        assert all(" embedded, " in line for line in lines[1:-1])
    finally:
        delete_index(opensearch_url, name)


def test_a_killed_follower_resumes_with_nothing_lost_or_embedded_twice(
    opensearch_url, corpus, embedder
) -> None:
    count = min(len(corpus), 300)
    name = create_index(opensearch_url, "opensearch", documents(corpus, count))
    try:
        process = subprocess.Popen(
            follow_command(opensearch_url, name),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ),
        )
        deadline = time.monotonic() + 300
        done = 0
        while time.monotonic() < deadline and process.poll() is None:
            done = hashed(opensearch_url, name)
            if done >= 16:
                break
            time.sleep(0.1)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        done = hashed(opensearch_url, name)
        assert 16 <= done < count
        with Following(opensearch_url, name) as follower:
            wait_for(lambda: hashed(opensearch_url, name) == count, 600)
        report = follower.result
        # What the killed run wrote is not embedded again (a batch it sent just before the kill
        # may still have landed after the count).
        assert report is not None and count - done - 8 <= report.embedded <= count - done
        assert current(opensearch_url, name, embedder)
    finally:
        delete_index(opensearch_url, name)


def test_a_refused_request_is_retried_after_a_back_off_and_following_carries_on(
    opensearch_url, corpus, embedder
) -> None:
    from itlr.backfill import cluster_backend
    from itlr.engines.connection import Connection
    from itlr.engines.factory import EngineSpec
    from itlr.engines.layout import IndexLayout
    from itlr.follow import Follower

    docs = documents(corpus, 12)
    name = create_index(opensearch_url, "opensearch", docs[:6])
    spec = EngineSpec(
        engine="opensearch",
        index_name=name,
        connection=Connection(opensearch_url),
        layout=IndexLayout("vec", "body"),
    )
    errors: list[str] = []
    follower = Follower(
        cluster_backend(spec, embedder),
        embedder,
        "body",
        BackfillOptions(interval=0.2),
        on_error=errors.append,
    )
    follower.prepare(install_pipeline=False)
    thread = threading.Thread(target=follower.run, daemon=True)
    try:
        thread.start()
        wait_for(lambda: hashed(opensearch_url, name) == 6)
        rest("POST", f"{opensearch_url}/{name}/_close")  # every request now refused
        wait_for(lambda: bool(errors), 60)
        assert "trying again in" in errors[0] and "\n" not in errors[0]
        rest("POST", f"{opensearch_url}/{name}/_open")
        httpx.get(
            f"{opensearch_url}/_cluster/health/{name}?wait_for_status=yellow&timeout=60s",
            timeout=90,
        )
        bulk(opensearch_url, name, docs[6:])
        wait_for(lambda: hashed(opensearch_url, name) == 12)
    finally:
        follower.stop.set()
        thread.join(120)
        delete_index(opensearch_url, name)
    assert follower.report.embedded == 12 and follower.report.failed == {}


def test_install_pipeline_without_follow_guards_the_index_a_plain_rerun_then_embeds(
    opensearch_url, corpus
) -> None:
    from typer.testing import CliRunner

    from itlr.cli import app

    docs = documents(corpus, 8)
    name = create_index(opensearch_url, "opensearch", docs)
    url = f"{opensearch_url}/{name}"
    common = ["backfill", "--url", opensearch_url, "--index", name, "--text-field", "body"]
    try:
        first = CliRunner().invoke(app, [*common, "--vector-field", "vec", "--install-pipeline"])
        assert first.exit_code == 0, first.output
        assert "8 embedded" in first.output
        settings = httpx.get(f"{url}/_settings", timeout=30).json()[name]["settings"]["index"]
        assert settings["final_pipeline"] == PIPELINE_ID
        rest("POST", f"{url}/_update/{docs[0]['_id']}?refresh=true", {"doc": {"body": "Lava."}})
        again = CliRunner().invoke(app, [*common, "--vector-field", "vec"])
        assert "1 embedded, 7 already current" in again.output, again.output

        # An index with a final pipeline of its own is refused in one line, settings unchanged.
        other = create_index(opensearch_url, "opensearch", docs)
        try:
            rest("PUT", f"{opensearch_url}/_ingest/pipeline/teams-own", {"processors": []})
            rest(
                "PUT",
                f"{opensearch_url}/{other}/_settings",
                {"index": {"final_pipeline": "teams-own"}},
            )
            refused = CliRunner().invoke(
                app,
                [
                    "backfill",
                    "--url",
                    opensearch_url,
                    "--index",
                    other,
                    "--text-field",
                    "body",
                    "--vector-field",
                    "vec",
                    "--install-pipeline",
                ],
            )
            assert refused.exit_code != 0
            line = refused.output.strip()
            assert "\n" not in line and "already has the final pipeline 'teams-own'" in line
            kept = httpx.get(f"{opensearch_url}/{other}/_settings", timeout=30).json()
            assert kept[other]["settings"]["index"]["final_pipeline"] == "teams-own"
            mapping = httpx.get(f"{opensearch_url}/{other}/_mapping", timeout=30).json()
            assert set(mapping[other]["mappings"]["properties"]) == {"body", "year", "topic"}
        finally:
            delete_index(opensearch_url, other)
    finally:
        delete_index(opensearch_url, name)


def test_backfill_with_follow_true_still_follows_and_says_it_is_deprecated(
    opensearch_url, corpus
) -> None:
    """The old spelling keeps working: Index.backfill(follow=True) runs Index.follow (here
    until its first busy cycle) and warns once that Index.follow is the name now."""
    name = create_index(opensearch_url, "opensearch", documents(corpus, 5))
    stop = threading.Event()
    try:
        with pytest.warns(DeprecationWarning, match=r"Index\.follow"):
            report = itlr.Index.backfill(
                name,
                url=opensearch_url,
                text_field="body",
                vector_field="vec",
                follow=True,
                stop=stop,
                interval=0.2,
                on_cycle=lambda _cycle: stop.set(),
            )
        assert hashed(opensearch_url, name) == 5
        assert report.kind == "follow"
        assert report.embedded == 5
    finally:
        delete_index(opensearch_url, name)
