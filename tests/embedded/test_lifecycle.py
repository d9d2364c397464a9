"""Document lifecycle: upserts (changed text re-embedded, fields-only changes keep the vector,
unchanged skipped), deletes, a kill -9 during an update, and the same on a real OpenSearch."""

from __future__ import annotations

import json
import random
import signal
import time
import uuid
from pathlib import Path

import numpy as np

from itlr.engines.embedded import EmbeddedBackend
from itlr.index import Index
from test_crash import committed_rows, itlr

TOPICS = ["vitamin D", "electric cars", "espresso", "roman roads", "volcanoes", "chess openings"]


def corpus(count: int, version: str) -> dict[str, str]:
    return {
        f"doc{i}": f"{version}: passage {i} is about {TOPICS[(i + len(version)) % len(TOPICS)]}."
        for i in range(count)
    }


def write(path: Path, texts: dict[str, str], **fields: object) -> Path:
    path.write_text(
        "".join(json.dumps({"id": k, "text": v, **fields}) + "\n" for k, v in texts.items())
    )
    return path


def test_add_is_an_upsert_counting_added_updated_and_unchanged(tmp_path) -> None:
    index = Index.open(tmp_path / "idx")
    first = index.add([{"id": "a", "text": "espresso brewing"}, {"id": "b", "text": "volcanoes"}])
    assert (first.added, first.updated, first.unchanged) == (2, 0, 0)
    again = index.add(
        [
            {"id": "a", "text": "espresso brewing"},  # unchanged
            {"id": "b", "text": "roman roads and bridges"},  # text changed
            {"id": "c", "text": "chess openings"},  # new
        ]
    )
    assert (again.added, again.updated, again.unchanged) == (1, 1, 1)
    assert index.count() == 3
    top = index.search('"roman roads"', k=1).hits[0]
    assert (top.id, top.text) == ("b", "roman roads and bridges")
    fresh = index.embedder.encode(["roman roads and bridges"])[0]
    assert float(fresh @ index.backend.vector("b")) > 0.999  # the vector of the new text


def test_a_fields_only_change_replaces_the_document_without_calling_the_encoder(tmp_path) -> None:
    index = Index.open(tmp_path / "idx")
    index.add([{"id": "a", "text": "espresso brewing", "year": 2020}])
    before = index.backend.vector("a")
    calls = []
    encode = index.embedder.encode
    index.embedder.encode = lambda texts: calls.append(list(texts)) or encode(texts)  # type: ignore[method-assign]
    try:
        report = index.add([{"id": "a", "text": "espresso brewing", "year": 2021}])
    finally:
        del index.embedder.encode
    assert (report.updated, report.unchanged, calls) == (1, 0, [])
    assert index.backend.get("a")["fields"] == {"year": 2021}
    assert np.array_equal(index.backend.vector("a"), before)


def test_delete_removes_documents_and_counts_those_that_existed(tmp_path) -> None:
    index = Index.open(tmp_path / "idx")
    index.add([{"id": str(i), "text": t} for i, t in enumerate(TOPICS)])
    report = index.delete(["0", "1", "missing", "0"])
    assert report.deleted == 2
    assert index.count() == len(TOPICS) - 2
    assert {h.id for h in index.search('"vitamin D"', k=10).hits}.isdisjoint({"0", "1"})
    again = index.add([{"id": "0", "text": TOPICS[0]}])
    assert again.added == 1  # a deleted id comes back as new


def test_cli_upsert_and_delete_summaries(tmp_path) -> None:
    index_dir = str(tmp_path / "idx")
    docs = write(tmp_path / "docs.jsonl", corpus(6, "v1"))
    run = itlr("ingest", str(docs), "--index", index_dir)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "added 6, updated 0, unchanged 0" in stdout
    changed = corpus(6, "v1")
    changed["doc2"] = "a changed passage about espresso"
    write(docs, changed)
    run = itlr("ingest", str(docs), "--index", index_dir)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "added 0, updated 1, unchanged 5" in stdout
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("doc3\n\ndoc4\n")
    run = itlr("delete", "doc1", "nope", "--ids-file", str(ids_file), "--index", index_dir)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "deleted 3, 1 not found; index now holds 3 documents" in stdout
    run = itlr("delete", "--index", index_dir)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 2 and "itlr delete ID..." in stderr


def test_kill_9_during_an_update_leaves_each_document_old_or_new_never_a_mix(
    tmp_path, embedder
) -> None:
    """Every text changes; the updating ingestion is SIGKILLed at several instants once batches
    commit. After each kill every document holds its old or its new text, each with the vector
    of the text it holds; the re-run finishes the update."""
    old, new = corpus(240, "old"), corpus(240, "new")
    index_dir = tmp_path / "idx"
    index = Index.open(index_dir)
    index.add([{"id": k, "text": v} for k, v in old.items()])
    index.backend.close()
    docs = write(tmp_path / "docs.jsonl", new)
    command = ("ingest", str(docs), "--index", str(index_dir), "--batch-size", "16")
    chance = random.Random(7)
    for _ in range(3):
        before = committed_rows(index_dir)
        process = itlr(*command)
        deadline = time.monotonic() + 120
        while committed_rows(index_dir) == before and process.poll() is None:
            assert time.monotonic() < deadline, "the update never committed a batch"
            time.sleep(0.01)
        time.sleep(chance.uniform(0.0, 0.3))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        state = EmbeddedBackend.open(index_dir)
        ids = state.ids()
        assert sorted(ids) == sorted(old)  # none lost, none duplicated
        texts = [state.get(i)["text"] for i in ids]
        assert all(t in (old[i], new[i]) for i, t in zip(ids, texts, strict=True))
        stored = np.stack([state.vector(i) for i in ids])
        assert np.sum(embedder.encode(texts) * stored, axis=1).min() > 0.999
        state.close()
    finished = itlr(*command)
    stdout, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    assert "index now holds 240 documents" in stdout
    state = EmbeddedBackend.open(index_dir)
    assert all(state.get(i)["text"] == new[i] for i in new)
    state.close()


def test_cluster_upsert_and_delete_on_opensearch(opensearch_url) -> None:
    name = f"itlr-lifecycle-{uuid.uuid4().hex[:8]}"
    index = Index.open(name, url=opensearch_url, create=True)
    first = index.add(
        [
            {"id": "a", "text": "espresso brewing", "year": 2020},
            {"id": "b", "text": "volcanoes erupting", "year": 2020},
            {"id": "c", "text": "chess openings", "year": 2020},
        ]
    )
    assert (first.added, first.updated, first.unchanged) == (3, 0, 0)
    again = index.add(
        [
            {"id": "a", "text": "espresso brewing", "year": 2020},
            {"id": "b", "text": "roman roads and bridges", "year": 2020},
            {"id": "c", "text": "chess openings", "year": 2021},
        ]
    )
    assert (again.added, again.updated, again.unchanged) == (0, 2, 1)
    top = index.search('"roman roads"', k=1).hits[0]
    assert (top.id, top.text) == ("b", "roman roads and bridges")
    assert index.backend.fingerprints(["c"])["c"][1] == {"year": 2021}
    assert index.delete(["a", "zzz"]).deleted == 1
    assert index.count() == 2
    assert "a" not in {h.id for h in index.search('"espresso"', k=5).hits}
