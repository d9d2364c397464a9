"""The embedded engine's persisted lexical data: each row's token count and postings, written in
the commit that writes the row. Statistics and lexical truths read from them must equal a
recount from the live rows' texts, in the writing process, in a fresh one, after every kind of
write and after a kill -9 in the middle of one."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import itlr
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.store import DATABASE, FORMAT_VERSION
from itlr.lexical import LexicalCorpus, query_tokens
from itlr.options import SearchOptions

PLUGIN = str(Path(__file__).resolve().parents[2] / "plugin")
DIMS = 8
WORDS = [
    "zebra",
    "lion",
    "tiger",
    "eagle",
    "whale",
    "otter",
    "heron",
    "bison",
    "lynx",
    "crane",
    "the",
    "and",
    "of",
]
TERMS = ("zebra", "lion tiger", "eagle whale", "the otter", "nothing here")
QUERY = '"zebra" AND ("lion tiger" OR "eagle whale") AND NOT "the otter" AND NOT "nothing here"'


def texts(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=rng.integers(0, 12))) for _ in range(count)]


def unit(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = rng.normal(size=(count, DIMS))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def assert_equals_a_recount(index: EmbeddedBackend) -> None:
    """Statistics (every token, and the query's tokens) and lexical truths of every live row as
    counted from scratch over the live rows' texts."""
    live = index._live_rows()
    recount = LexicalCorpus([index._rows[r].text for r in live])  # type: ignore[union-attr]
    fresh = recount.full_stats
    counted = index.term_statistics()
    assert (counted.documents, counted.total_length) == (fresh.documents, fresh.total_length)
    assert dict(counted.df) == dict(fresh.df)
    asked = index.term_statistics(query_tokens(TERMS))
    assert dict(asked.df) == {t: fresh.df[t] for t in query_tokens(TERMS) if fresh.df.get(t)}
    expected = recount.matrix(np.arange(len(live)), TERMS, fresh)
    np.testing.assert_allclose(index.lexical_truths(live, TERMS), expected, rtol=0, atol=1e-12)
    shuffled = live[::-1].copy()  # rows in any order take the other path of the matrix
    np.testing.assert_allclose(
        index.lexical_truths(shuffled, TERMS), expected[::-1], rtol=0, atol=1e-12
    )


def test_statistics_follow_inserts_updates_deletes_and_compaction_as_a_recount(tmp_path) -> None:
    rng = np.random.default_rng(3)
    index = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    index.compact_min_rows = 10**9  # compaction only when the test asks
    index.add([f"d{i}" for i in range(60)], texts(rng, 60), unit(rng, 60))
    assert_equals_a_recount(index)  # keeps the query tokens' postings: extended below
    index.add([f"d{i}" for i in range(60, 80)], texts(rng, 20), unit(rng, 20))
    index.add([f"d{i}" for i in range(0, 30, 3)], texts(rng, 10), unit(rng, 10))  # updates
    index.add(["d5", "d5"], texts(rng, 2), unit(rng, 2))  # one id twice in a batch
    index.delete([f"d{i}" for i in range(1, 40, 4)])
    assert index.dead_rows() > 0
    assert_equals_a_recount(index)
    assert_equals_a_recount(EmbeddedBackend.open(index.path))
    index.compact()
    assert index.dead_rows() == 0
    assert_equals_a_recount(index)
    index.add(["late"], ["zebra lion lion"], unit(rng, 1))
    assert_equals_a_recount(index)
    assert_equals_a_recount(EmbeddedBackend.open(index.path))


def test_lexical_stats_the_old_name_of_term_statistics_warns_and_answers_the_same(tmp_path) -> None:
    rng = np.random.default_rng(5)
    index = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    index.add([f"d{i}" for i in range(20)], texts(rng, 20), unit(rng, 20))
    with pytest.warns(DeprecationWarning, match="call EmbeddedBackend.term_statistics"):
        old = index.lexical_stats(["zebra"])
    assert old == index.term_statistics(["zebra"])


def test_a_reader_keeps_its_snapshot_while_another_process_writes_and_compacts(tmp_path) -> None:
    rng = np.random.default_rng(4)
    writer = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    writer.compact_min_rows = 10**9
    writer.add([f"d{i}" for i in range(40)], texts(rng, 40), unit(rng, 40))
    reader = EmbeddedBackend.open(writer.path)
    before = reader.lexical_truths(reader._live_rows(), TERMS)
    writer.add([f"d{i}" for i in range(40, 50)], texts(rng, 10), unit(rng, 10))
    # Postings of rows past the reader's commit point are not the reader's.
    assert_equals_a_recount(reader)
    writer.delete([f"d{i}" for i in range(0, 40, 2)])
    writer.compact()
    # The stored rows are renumbered: the reader counts from its own rows' texts meanwhile.
    np.testing.assert_allclose(reader.lexical_truths(reader._live_rows(), TERMS), before)
    assert_equals_a_recount(reader)
    assert reader.follow_commits()
    assert_equals_a_recount(reader)


FRESH_SCORES = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import itlr
    from itlr.engines.embedded import EmbeddedBackend
    from itlr.options import SearchOptions
    index = EmbeddedBackend.open(sys.argv[1])
    vectors = np.array(json.loads(sys.argv[2]), dtype=np.float32)
    out = []
    for mode in ("exact", "knn"):
        hits = index.search(itlr.parse(sys.argv[3]), vectors, SearchOptions(k=20, mode=mode))
        out.append([[h.id, h.score, h.truths] for h in hits])
    print(json.dumps(out))
    """
)


def test_a_fresh_process_scores_as_a_count_from_the_texts(tmp_path) -> None:
    rng = np.random.default_rng(5)
    index = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    index.add([f"d{i}" for i in range(300)], texts(rng, 300), unit(rng, 300))
    index.add([f"d{i}" for i in range(0, 300, 7)], texts(rng, 43), unit(rng, 43))
    index.delete([f"d{i}" for i in range(1, 300, 11)])
    query = itlr.parse(QUERY)
    vectors = unit(rng, len(query.terms))
    env = {**os.environ, "PYTHONPATH": PLUGIN}
    done = subprocess.run(
        [sys.executable, "-c", FRESH_SCORES, str(index.path), json.dumps(vectors.tolist()), QUERY],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # The in-memory computation: the lexical truths of a corpus counted from the live texts.
    live = index._live_rows()
    corpus = LexicalCorpus([index._rows[r].text for r in live])  # type: ignore[union-attr]
    index.lexical_truths = lambda rows, terms: corpus.matrix(  # type: ignore[method-assign]
        np.searchsorted(live, rows), terms, corpus.full_stats
    )
    for mode, fresh in zip(("exact", "knn"), json.loads(done.stdout), strict=True):
        expected = index.search(query, vectors, SearchOptions(k=20, mode=mode))
        assert [h.id for h in expected] == [hit[0] for hit in fresh]
        for hit, (_, score, truths) in zip(expected, fresh, strict=True):
            assert abs(hit.score - score) <= 1e-9
            assert all(abs(hit.truths[t] - truths[t]) <= 1e-9 for t in truths)


def as_format_2(path: Path) -> None:
    """What itlr wrote before the postings: no token counts, no postings, format 2."""
    with sqlite3.connect(path / DATABASE) as db:
        db.execute("DROP TABLE postings")
        db.execute("ALTER TABLE rows DROP COLUMN length")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'format'")


def test_an_index_of_format_2_gets_its_postings_on_open(tmp_path) -> None:
    rng = np.random.default_rng(6)
    index = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    index.add([f"d{i}" for i in range(50)], texts(rng, 50), unit(rng, 50))
    index.add(["d3"], ["zebra zebra"], unit(rng, 1))
    index.delete(["d4"])
    index.close()
    as_format_2(tmp_path / "idx")
    upgraded = EmbeddedBackend.open(tmp_path / "idx")
    assert upgraded.manifest()["format"] == FORMAT_VERSION == 3
    assert_equals_a_recount(upgraded)
    assert_equals_a_recount(EmbeddedBackend.open(tmp_path / "idx"))


KILLED_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from itlr.engines import store
    from itlr.engines.embedded import EmbeddedBackend

    path, when = sys.argv[1], sys.argv[2]
    original = store.VectorStore._insert_postings
    calls = 0

    def insert_postings(self, start, counts):
        # Inside the commit transaction: the rows (or the token counts) are written already.
        global calls
        calls += 1
        if calls == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, start, counts)

    store.VectorStore._insert_postings = insert_postings
    index = EmbeddedBackend.open(path)
    rng = np.random.default_rng(9)
    words = "zebra lion tiger eagle whale otter".split()
    vectors = rng.normal(size=(10, 8)).astype(np.float32)
    if when == "write":
        for batch in range(3):
            ids = [f"d{i}" for i in range(batch * 5, batch * 5 + 10)]
            index.add(ids, [" ".join(rng.choice(words, 4)) for _ in ids], vectors)
    elif when == "compaction":
        index.compact()
    """
)


@pytest.mark.parametrize("when", ["write", "compaction", "upgrade"])
def test_kill_9_inside_a_commit_leaves_statistics_equal_to_a_recount(tmp_path, when) -> None:
    """The process SIGKILLs itself inside a commit transaction, after its rows are written and
    before their postings are (an append, a compaction's swap, a format 2 index's upgrade):
    the index opens with statistics that equal a recount of the rows that survived."""
    rng = np.random.default_rng(7)
    index = EmbeddedBackend.create(tmp_path / "idx", "m", DIMS)
    index.compact_min_rows = 10**9
    for batch in range(3):  # the upgrade tokenises 4,096 rows a transaction step
        ids = [f"d{i}" for i in range(batch * 2000, batch * 2000 + 2000)]
        index.add(ids, texts(rng, len(ids)), unit(rng, len(ids)))
    index.delete([f"d{i}" for i in range(0, 6000, 3)])
    before = (index.committed_rows, index.count())
    index.close()
    if when == "upgrade":
        as_format_2(tmp_path / "idx")
    # The second append's commit (the first is whole), a compaction's only one, an upgrade's
    # second step.
    kill_at = 1 if when == "compaction" else 2
    env = {**os.environ, "PYTHONPATH": PLUGIN}
    died = subprocess.run(
        [sys.executable, "-c", KILLED_WRITE, str(tmp_path / "idx"), when, str(kill_at)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    survived = EmbeddedBackend.open(tmp_path / "idx")
    # The killed commit left nothing; an upgrade is one transaction, redone by this open.
    expected = {
        "write": (before[0] + 10, before[1] + 4),  # d0 .. d9: d0, d3, d6, d9 were deleted
        "compaction": before,
        "upgrade": before,
    }[when]
    assert (survived.committed_rows, survived.count()) == expected
    assert_equals_a_recount(survived)


def test_the_first_search_benchmark_times_fresh_processes_on_a_kept_index(tmp_path) -> None:
    from itlr.benchmarks.first_search import first_search_report

    lines = first_search_report(1500, 1, tmp_path)
    assert lines[-1].startswith("| 1,500 |") and len(lines[-1].split("|")) == 7
    kept = EmbeddedBackend.open(tmp_path / "first-search-1500")
    assert kept.count() == 1500 and kept.term_statistics(["vitamin"]).df["vitamin"] > 0
    kept.close()
    assert first_search_report(1500, 1, tmp_path)[-1].startswith("| 1,500 |")  # reused
