"""The embedded index after kill -9 and with concurrent writers: real processes, the real model."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.store import DATABASE
from itlr.lexical import LexicalCorpus

TOPICS = ["vitamin D", "electric cars", "espresso", "roman roads", "volcanoes", "chess openings"]
PLUGIN = str(Path(__file__).resolve().parents[2] / "plugin")


def write_corpus(path: Path, count: int) -> dict[str, str]:
    texts = {
        f"doc{i}": f"Passage {i} is about {TOPICS[i % len(TOPICS)]}, remark number {i * 7919 % 1000}."
        for i in range(count)
    }
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    return texts


def itlr(*args: str, env_extra: dict[str, str] | None = None, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": PLUGIN, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, "-c", "from itlr.cli import app; app()", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def committed_rows(index: Path) -> int:
    import sqlite3

    if not (index / DATABASE).exists():
        return 0
    try:
        with sqlite3.connect(index / DATABASE, timeout=5) as db:
            found = db.execute("SELECT value FROM meta WHERE key = 'committed'").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(found[0]) if found else 0


def assert_every_document_has_its_own_vector(index_dir: Path, texts: dict[str, str], embedder):
    index = EmbeddedBackend.open(index_dir)
    ids = index.ids()
    assert len(ids) == len(set(ids)) == index.committed_rows
    if ids:
        expected = embedder.encode([texts[i] for i in ids])
        stored = np.stack([index.vector(i) for i in ids])
        cosines = np.sum(expected * stored, axis=1)
        assert cosines.min() > 0.999, f"{int((cosines < 0.999).sum())} documents have another's"
    # The stored token counts and postings describe exactly the rows that survived.
    recount = LexicalCorpus([texts[i] for i in ids]).full_stats
    stored = index.term_statistics()
    assert (stored.documents, stored.total_length) == (recount.documents, recount.total_length)
    assert dict(stored.df) == dict(recount.df)
    index.close()
    return len(ids)


def test_kill_9_at_random_instants_of_an_ingestion_leaves_only_whole_batches(
    tmp_path, embedder
) -> None:
    """Killed while writing (several times, at random instants once batches are being committed),
    the index opens holding whole batches, each document with its own vector; a re-run adds the
    rest."""
    texts = write_corpus(tmp_path / "docs.jsonl", 480)
    index_dir = tmp_path / "idx"
    command = ("ingest", str(tmp_path / "docs.jsonl"), "--index", str(index_dir))
    chance = random.Random(13)
    kills_in_window = 0
    for _ in range(3):
        before = committed_rows(index_dir)
        process = itlr(*command, "--batch-size", "16")
        deadline = time.monotonic() + 120
        while committed_rows(index_dir) == before and process.poll() is None:
            assert time.monotonic() < deadline, "ingestion never committed a batch"
            time.sleep(0.01)
        time.sleep(chance.uniform(0.0, 0.4))
        vectors = index_dir / "vectors.f32"
        if vectors.stat().st_size > committed_rows(index_dir) * embedder.dims * 4:
            kills_in_window += 1
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        held = assert_every_document_has_its_own_vector(index_dir, texts, embedder)
        assert held % 16 == 0 and held < len(texts)
    finished = itlr(*command, "--batch-size", "16")
    stdout, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    assert f"index now holds {len(texts)} documents" in stdout
    assert assert_every_document_has_its_own_vector(index_dir, texts, embedder) == len(texts)
    print(f"{kills_in_window} of 3 kills landed between a batch's vectors and its commit")


def test_kill_9_between_the_vectors_and_the_commit_loses_only_that_batch(
    tmp_path, embedder
) -> None:
    """The write window made exact: the process SIGKILLs itself as the commit transaction of
    its second batch starts, after that batch's vectors are on disk."""
    texts = write_corpus(tmp_path / "docs.jsonl", 40)
    index_dir = tmp_path / "idx"
    script = textwrap.dedent(
        f"""
        import os, signal
        from itlr.documents import read_documents
        from itlr.embed import get_embedder
        from itlr.engines import store
        from itlr.engines.embedded import EmbeddedBackend
        from itlr.ingest import ingest

        commits = 0
        original = store.VectorStore._transaction

        def transaction(self):
            global commits
            commits += 1
            if commits == 3:  # create, first batch, then die inside the second batch's window
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self)

        store.VectorStore._transaction = transaction
        embedder = get_embedder()
        index = EmbeddedBackend.open_or_create({str(index_dir)!r}, embedder.name, embedder.dims)
        ingest(read_documents({str(tmp_path / "docs.jsonl")!r}).documents, index, embedder,
               batch_size=16)
        """
    )
    env = {**os.environ, "PYTHONPATH": PLUGIN, "HF_HUB_OFFLINE": "1"}
    died = subprocess.run([sys.executable, "-c", script], env=env, timeout=300)
    assert died.returncode == -signal.SIGKILL
    assert (index_dir / "vectors.f32").stat().st_size == 32 * embedder.dims * 4
    assert assert_every_document_has_its_own_vector(index_dir, texts, embedder) == 16
    finished = itlr("ingest", str(tmp_path / "docs.jsonl"), "--index", str(index_dir))
    stdout, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    assert "added 24, updated 0, unchanged 16" in stdout
    assert assert_every_document_has_its_own_vector(index_dir, texts, embedder) == 40


def test_two_ingestions_into_one_index_at_once_one_refused_no_duplicates(
    tmp_path, embedder
) -> None:
    texts = write_corpus(tmp_path / "docs.jsonl", 200)
    index_dir = tmp_path / "idx"
    command = ("ingest", str(tmp_path / "docs.jsonl"), "--index", str(index_dir))
    # Two ingestions of one file into one new index at once: both create it, then one writes
    # while the other waits (and writes nothing new) or is refused; never twice the rows.
    first, second = itlr(*command, "--batch-size", "8"), itlr(*command, "--batch-size", "8")
    outcomes = [(*p.communicate(timeout=300), p.returncode) for p in (first, second)]
    assert sorted(code for _, _, code in outcomes) in ([0, 0], [0, 2]), outcomes
    for _, stderr, code in outcomes:
        assert "Traceback" not in stderr
        if code == 2:
            assert "being written by another process" in stderr
    assert EmbeddedBackend.open(index_dir).committed_rows == len(texts)
    holder = EmbeddedBackend.open(index_dir)
    with holder.writing():
        # While this test holds the writer lock, a real ingestion waits, then gives up clearly.
        refused = itlr(*command)
        _, stderr = refused.communicate(timeout=300)
    assert refused.returncode == 2
    assert "being written by another process" in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert assert_every_document_has_its_own_vector(index_dir, texts, embedder) == len(texts)
    assert EmbeddedBackend.open(index_dir).committed_rows == len(texts)


def test_kill_9_during_an_ingestion_that_builds_the_ann_graph_leaves_it_usable(
    tmp_path, embedder
) -> None:
    """The HNSW graph is a cache: killed at random instants while ingestion builds and saves
    it, the index opens and knn mode's graph candidates give what a full scan gives."""
    from itlr.options import SearchOptions
    from itlr.query import parse

    texts = write_corpus(tmp_path / "docs.jsonl", 480)
    index_dir = tmp_path / "idx"
    command = ("ingest", str(tmp_path / "docs.jsonl"), "--index", str(index_dir))
    query = parse('"espresso" AND "remark number 7" AND NOT "volcanoes"')
    vectors = embedder.encode(list(query.terms))
    chance = random.Random(17)

    def assert_graph_agrees_with_a_scan() -> None:
        index = EmbeddedBackend.open(index_dir)
        index.ann_min_rows = 32
        through_graph = index.search(query, vectors, SearchOptions(k=10))
        index.ann_min_rows = 10**9
        scanned = index.search(query, vectors, SearchOptions(k=10))
        assert [h.id for h in through_graph] == [h.id for h in scanned]
        index.close()

    for _ in range(3):
        before = committed_rows(index_dir)
        process = itlr(*command, "--batch-size", "16", env_extra={"ITLR_ANN_MIN_ROWS": "32"})
        deadline = time.monotonic() + 120
        while committed_rows(index_dir) == before and process.poll() is None:
            assert time.monotonic() < deadline, "ingestion never committed a batch"
            time.sleep(0.01)
        time.sleep(chance.uniform(0.0, 0.6))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert_every_document_has_its_own_vector(index_dir, texts, embedder)
        if committed_rows(index_dir) >= 32:
            assert_graph_agrees_with_a_scan()
    finished = itlr(*command, "--batch-size", "16", env_extra={"ITLR_ANN_MIN_ROWS": "32"})
    _, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    assert [p.name for p in index_dir.glob("ann.*")] == ["ann.0.usearch"]
    assert_graph_agrees_with_a_scan()
