"""The embedded store compacts (issue 42, item 7): updates in place no longer grow the committed
rows without bound (the probe: 5,522 rows for 400 live documents), `itlr compact` does it on
demand, and a kill -9 inside a compaction's write window leaves the index whole, old or new."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.engines.embedded import EmbeddedBackend

DIMS = 8
PLUGIN = str(Path(__file__).resolve().parents[2] / "plugin")
runner = CliRunner()


def vector(doc_id: str, version: int) -> np.ndarray:
    """A unit vector of its own for each (document, version), so a row carrying another's
    vector is caught."""
    rng = np.random.default_rng(zlib.crc32(f"{doc_id}/{version}".encode()))
    raw = rng.normal(size=DIMS)
    return (raw / np.linalg.norm(raw)).astype(np.float32)


def write_version(index: EmbeddedBackend, ids: list[str], version: int) -> None:
    index.add(
        ids,
        [f"{i} version {version}" for i in ids],
        np.stack([vector(i, version) for i in ids]),
        [{"version": version} for _ in ids],
    )


def assert_whole(path: Path, ids: list[str], versions: set[int]) -> EmbeddedBackend:
    """Every document present once, with the text, field and vector of one version."""
    index = EmbeddedBackend.open(path)
    assert sorted(index.ids()) == sorted(ids)
    for doc_id in ids:
        row = index.get(doc_id)
        assert row is not None
        version = row["fields"]["version"]
        assert version in versions and row["text"] == f"{doc_id} version {version}"
        assert np.allclose(index.vector(doc_id), vector(doc_id, version), atol=1e-6)
    return index


IDS = [f"doc{i:03d}" for i in range(400)]


def test_updates_in_place_keep_the_committed_rows_near_the_live_ones(tmp_path: Path) -> None:
    index = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    largest = 0
    for version in range(14):  # the probe's 5,522 rows for 400 documents
        for start in range(0, len(IDS), 64):
            write_version(index, IDS[start : start + 64], version)
            largest = max(largest, index.committed_rows)
    assert largest <= 1_000 + 64
    assert index.committed_rows < 1_000 and index.count() == 400
    index.close()
    assert_whole(tmp_path / "idx", IDS, {13}).close()
    files = sorted(p.name for p in (tmp_path / "idx").iterdir() if p.name.endswith(".f32"))
    assert len(files) == 1  # the old generations' vector files are gone


def test_a_write_session_compacts_once_at_its_end(tmp_path: Path) -> None:
    index = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    with index.writing():
        for version in range(5):
            write_version(index, IDS, version)
        assert index.committed_rows == 2_000  # not in the middle of someone's ingestion
    assert index.committed_rows == 400
    index.close()


def test_the_dead_ratio_comes_from_its_environment_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ITLR_COMPACT_DEAD_RATIO", "2")  # above 1: never by itself
    index = EmbeddedBackend.create(tmp_path / "idx", "test-model", DIMS)
    for version in range(4):
        write_version(index, IDS, version)
    assert index.committed_rows == 1_600
    assert index.compact() == (1_600, 400)
    index.close()
    monkeypatch.setenv("ITLR_COMPACT_DEAD_RATIO", "-1")
    with pytest.raises(itlr.ConfigurationError, match="ITLR_COMPACT_DEAD_RATIO"):
        EmbeddedBackend.open(tmp_path / "idx")


def test_itlr_compact_drops_the_dead_rows_and_keeps_every_answer(
    tmp_path: Path, monkeypatch, embedder
) -> None:
    monkeypatch.setenv("ITLR_COMPACT_MIN_ROWS", "1000000")  # only on demand here
    docs = tmp_path / "docs.jsonl"
    for version in range(3):
        docs.write_text(
            "".join(
                json.dumps({"id": f"d{n}", "text": f"note {n} on sleep, draft {version}"}) + "\n"
                for n in range(30)
            )
        )
        result = runner.invoke(cli, ["ingest", str(docs), "--index", str(tmp_path / "idx")])
        assert result.exit_code == 0, result.output
    before = itlr.Index.open(str(tmp_path / "idx"), create=False).search("sleep", k=30)
    result = runner.invoke(cli, ["compact", "--index", str(tmp_path / "idx")])
    assert result.exit_code == 0, result.output
    assert "compacted: 90 committed rows, now 30 (30 documents)" in result.stdout
    after = itlr.Index.open(str(tmp_path / "idx"), create=False).search("sleep", k=30)
    assert [(h.id, h.text) for h in after.hits] == [(h.id, h.text) for h in before.hits]
    assert [h.score for h in after.hits] == pytest.approx([h.score for h in before.hits])


def test_itlr_compact_of_a_missing_index_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["compact", "--index", str(tmp_path / "none")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


# -- kill -9 inside a compaction ---------------------------------------------------------------

KILL_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from itlr.engines import store
from itlr.engines.embedded import EmbeddedBackend

original_rewrite = store.VectorStore.rewrite
original_transaction = store.VectorStore._transaction
rewriting = False

def rewrite(self, rows, vectors):
    global rewriting
    rewriting = True
    return original_rewrite(self, rows, vectors)

class transaction:
    def __init__(self, store):
        self.inner = original_transaction(store)
    def __enter__(self):
        if rewriting and {when!r} == "before":
            os.kill(os.getpid(), signal.SIGKILL)  # the new vector file written, rows not swapped
        return self.inner.__enter__()
    def __exit__(self, *exc):
        done = self.inner.__exit__(*exc)
        if rewriting and {when!r} == "after":
            os.kill(os.getpid(), signal.SIGKILL)  # swapped, the old vector file not yet deleted
        return done

store.VectorStore.rewrite = rewrite
store.VectorStore._transaction = lambda self: transaction(self)
index = EmbeddedBackend.open({path!r})
index.compact()
"""


@pytest.mark.parametrize(("when", "versions"), [("before", {2}), ("after", {2})])
def test_kill_9_inside_a_compaction_leaves_the_index_whole(
    tmp_path: Path, monkeypatch, when: str, versions: set[int]
) -> None:
    monkeypatch.setenv("ITLR_COMPACT_MIN_ROWS", "1000000")
    path = tmp_path / "idx"
    index = EmbeddedBackend.create(path, "test-model", DIMS)
    for version in range(3):
        write_version(index, IDS[:100], version)
    index.close()
    script = textwrap.dedent(KILL_SCRIPT).format(
        tests=str(Path(__file__).parent), when=when, path=str(path)
    )
    env = {**os.environ, "PYTHONPATH": PLUGIN, "ITLR_COMPACT_MIN_ROWS": "1000000"}
    died = subprocess.run([sys.executable, "-c", script], env=env, timeout=300)
    assert died.returncode == -signal.SIGKILL
    reopened = assert_whole(path, IDS[:100], versions)
    assert reopened.committed_rows == (300 if when == "before" else 100)
    assert len(list(path.glob("vectors*.f32"))) == 2  # the cut-short compaction's leftover
    # The next writer removes the leftover; compacting again (or not) keeps every document.
    write_version(reopened, IDS[:1], 3)
    assert len(list(path.glob("vectors*.f32"))) == 1
    reopened.compact()
    reopened.close()
    final = assert_whole(path, IDS[:100], {2, 3})
    assert final.committed_rows == 100
    final.close()
