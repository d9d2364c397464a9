"""Processes creating one embedded index at once: each sees an index or nothing half made."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest

from itlr.engines import folders, store
from itlr.errors import IndexStateError

PLUGIN = str(Path(__file__).parents[2] / "plugin")


def _create(path: Path, barrier: multiprocessing.synchronize.Barrier, errors) -> None:
    try:
        barrier.wait()
        store.VectorStore.create(folders.index_path(str(path)), "model", 4, exist_ok=True)
    except Exception as error:  # reported to the test, whatever it is
        errors.put(f"{type(error).__name__}: {error}")


def test_three_processes_creating_one_index_at_once_all_open_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    for attempt in range(8):
        path = tmp_path / f"index{attempt}"
        barrier = context.Barrier(3)
        workers = [context.Process(target=_create, args=(path, barrier, errors)) for _ in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert errors.empty(), errors.get()
        assert store.exists(path)


def test_a_folder_another_process_is_creating_is_waited_for_not_refused(
    tmp_path: Path,
) -> None:
    # Another process holds the writer lock while its creation has written a file that is
    # not an index yet (here a bare write-ahead log); it finishes a moment later.
    path = tmp_path / "index"
    path.mkdir()
    creator = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from itlr.engines import writer_lock\n"
            "path = Path(sys.argv[1]); lock = writer_lock.writer_lock(path); lock.acquire()\n"
            "(path / 'index.db-wal').write_bytes(b'half a creation')\n"
            "print('holding', flush=True); time.sleep(1.5)\n"
            "(path / 'index.db-wal').unlink(); lock.release()\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": PLUGIN},
    )
    assert creator.stdout is not None and creator.stdout.readline().strip() == "holding"
    started = time.monotonic()
    assert folders.index_path(str(path)) == path.resolve()
    assert time.monotonic() - started > 0.5  # it waited for the creation
    creator.wait(timeout=30)


def test_a_folder_of_index_file_names_holding_other_data_is_still_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index"
    path.mkdir()
    (path / "index.db-wal").write_bytes(b"someone's data")
    (path / "write.lock").touch()
    with pytest.raises(IndexStateError, match="not an itlr index"):
        folders.index_path(str(path))
