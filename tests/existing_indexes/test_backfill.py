"""`itlr backfill` / `Index.backfill` against a real OpenSearch, on indexes made through REST."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.cli import app
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import LEXICAL_FIELDS, TOKEN_KEYS_FIELD, lexical_fields

pytestmark = pytest.mark.opensearch


def check_every_vector_is_of_its_current_text(url, name, embedder, count) -> None:
    sources = all_sources(url, name)
    assert len(sources) == count
    ids = sorted(sources)
    texts = [sources[i]["body"] for i in ids]
    expected = embedder.encode(texts)
    stored = np.asarray([sources[i]["vec"] for i in ids], dtype=np.float32)
    assert np.allclose(stored, expected, atol=1e-5)
    assert [sources[i][HASH_FIELD] for i in ids] == [content_hash(t, embedder.name) for t in texts]
    # The token counts hybrid truth values read, of the same text.
    for doc_id, text in zip(ids, texts, strict=True):
        written = {k: sources[doc_id].get(k) for k in LEXICAL_FIELDS}
        assert written == lexical_fields(text)


def test_backfill_in_place_embeds_every_document_and_a_rerun_embeds_only_a_changed_text(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 40)
    name = create_index(opensearch_url, "opensearch", docs)
    try:
        report = itlr.Index.backfill(
            name, url=opensearch_url, text_field="body", vector_field="vec", engine="opensearch"
        )
        assert (report.seen, report.embedded, report.skipped, report.failed) == (40, 40, 0, {})
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, 40)

        again = itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        assert (again.embedded, again.skipped) == (0, 40)

        changed = {**docs[7], "body": "Penguins huddle together on the Antarctic ice in winter."}
        bulk(opensearch_url, name, [changed])  # a whole-document write drops the old vector
        third = itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        assert (third.embedded, third.skipped) == (1, 39)
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, 40)

        index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
        result = index.search('"penguins on ice"', k=1)
        assert [h.id for h in result.hits] == [docs[7]["_id"]]
        assert result.hits[0].text == changed["body"]
    finally:
        delete_index(opensearch_url, name)


@pytest.mark.parametrize(
    "missing", [LEXICAL_FIELDS, (TOKEN_KEYS_FIELD,)], ids=["all lexical fields", "token keys"]
)
def test_a_rerun_adds_the_token_counts_to_documents_back_filled_without_them(
    missing, opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 12)
    name = create_index(opensearch_url, "opensearch", docs)
    try:
        itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        # As a back-fill from before the lexical fields (or the token keys) left them.
        strip = {
            "script": {
                "source": "for (f in params.fields) { ctx._source.remove(f) }",
                "params": {"fields": list(missing)},
            },
            "query": {"match_all": {}},
        }
        httpx.post(
            f"{opensearch_url}/{name}/_update_by_query?refresh=true", json=strip, timeout=30
        ).raise_for_status()
        assert all(TOKEN_KEYS_FIELD not in s for s in all_sources(opensearch_url, name).values())
        again = itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        assert (again.embedded, again.skipped, again.failed) == (0, 12, {})
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, 12)
    finally:
        delete_index(opensearch_url, name)


def test_an_index_without_knn_setting_is_refused_in_one_line_and_backfills_into_a_new_index(
    opensearch_url, corpus, embedder
) -> None:
    docs = documents(corpus, 20)
    name = create_index(opensearch_url, "opensearch", docs, knn=False)
    into = f"{name}-vectors"
    alias = f"{name}-current"
    try:
        with pytest.raises(IndexStateError, match=r"index\.knn: true.*--into NEW_INDEX") as refused:
            itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        assert "\n" not in str(refused.value)

        common = ["--url", opensearch_url, "--index", name, "--text-field", "body"]
        result = CliRunner().invoke(
            app, ["backfill", *common, "--vector-field", "vec", "--into", into, "--alias", alias]
        )
        assert result.exit_code == 0, result.output
        assert "20 embedded" in result.output
        check_every_vector_is_of_its_current_text(opensearch_url, into, embedder, 20)
        assert all(s["topic"] for s in all_sources(opensearch_url, into).values())
        holders = httpx.get(f"{opensearch_url}/_alias/{alias}", timeout=30).json()
        assert list(holders) == [into]

        index = itlr.Index.open(alias, url=opensearch_url, vector_field="vec", text_field="body")
        assert len(index.search('"vitamin D"', k=3).hits) == 3
    finally:
        delete_index(opensearch_url, into)
        delete_index(opensearch_url, name)


def test_a_killed_backfill_resumes_with_no_document_lost_or_duplicated(
    opensearch_url, corpus, embedder
) -> None:
    count = min(len(corpus), 400)
    docs = documents(corpus, count)
    name = create_index(opensearch_url, "opensearch", docs)
    command = [
        *(sys.executable, "-c", "from itlr.cli import app; app()"),
        *("backfill", "--url", opensearch_url, "--index", name),
        *("--text-field", "body", "--vector-field", "vec", "--batch-size", "8"),
    ]
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ)
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            httpx.post(f"{opensearch_url}/{name}/_refresh", timeout=30)
            done = httpx.post(
                f"{opensearch_url}/{name}/_count",
                json={"query": {"exists": {"field": HASH_FIELD}}},
                timeout=30,
            ).json()["count"]
            if done >= 16:
                break
            time.sleep(0.2)
        assert process.poll() is None, "the back-fill finished before it could be killed"
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert 16 <= done < count

        result = CliRunner().invoke(app, command[3:])
        assert result.exit_code == 0, result.output
        report_line = result.output.strip().splitlines()[-1]
        assert f"of {count} documents" in report_line
        resumed = int(report_line.split(" embedded")[0].rsplit(" ", 1)[-1])
        assert resumed <= count - 16  # what the killed run wrote is not embedded again
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, count)
    finally:
        delete_index(opensearch_url, name)


def test_exact_only_backfills_an_index_without_knn_in_place_and_exact_search_reads_it(
    opensearch_url, corpus, embedder
) -> None:
    """OpenSearch's default index (no index.knn) keeps its name and its writers: the vector is
    mapped without an ANN method, exact searches read it, and a follower keeps it current."""
    import threading

    docs = documents(corpus, 12)
    name = create_index(opensearch_url, "opensearch", docs[:10], knn=False)
    try:
        common = ["--url", opensearch_url, "--index", name, "--text-field", "body"]
        result = CliRunner().invoke(
            app, ["backfill", *common, "--vector-field", "vec", "--exact-only"]
        )
        assert result.exit_code == 0, result.output
        assert "10 embedded" in result.output
        mapping = httpx.get(f"{opensearch_url}/{name}/_mapping", timeout=30).json()
        vector = mapping[name]["mappings"]["properties"]["vec"]
        assert vector["type"] == "knn_vector" and "method" not in vector
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, 10)

        stop = threading.Event()
        follower = threading.Thread(
            target=itlr.Index.follow,
            args=(name,),
            kwargs={
                "url": opensearch_url,
                "text_field": "body",
                "vector_field": "vec",
                "exact_only": True,
                "stop": stop,
                "interval": 0.2,
            },
            daemon=True,
        )
        follower.start()
        changed = {**docs[10], "body": "Penguins huddle together on the Antarctic ice in winter."}
        bulk(opensearch_url, name, [changed, docs[11]])
        deadline = time.monotonic() + 120
        while len([s for s in all_sources(opensearch_url, name).values() if HASH_FIELD in s]) < 12:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        stop.set()
        follower.join(60)
        check_every_vector_is_of_its_current_text(opensearch_url, name, embedder, 12)

        with pytest.warns(UserWarning, match=r"not built for ANN search .* only `mode=\"exact\"`"):
            index = itlr.Index.open(name, url=opensearch_url, vector_field="vec", text_field="body")
        found = index.search('"penguins on ice"', k=1, mode="exact")
        assert [h.id for h in found.hits] == [changed["_id"]] and found.exact is True
    finally:
        delete_index(opensearch_url, name)
