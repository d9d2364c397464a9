"""A long-running service over an embedded index sees what other processes commit.

`itlr ingest` in another process appends rows and raises the store's commit point; the service
checks that point before each request (one small SQLite read) and loads the new rows when it
moved. Loading swaps the index's row tables, so it waits until no request is reading them, and
requests wait while it runs: a readers-writer lock, with writers first so a steady stream of
searches cannot starve a reload.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class ReadersWriterLock:
    """Many readers or one writer; a waiting writer holds new readers back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class CommitFollower:
    """Wraps each request on `backend`: reload first when another process committed.

    A backend without `follow_commits` (a cluster index: the cluster is the shared state) is
    used as it is."""

    def __init__(self, backend: Any) -> None:
        # Any: `_moved` tells whether it is None, which mypy cannot follow into `current`.
        self._backend: Any = backend if hasattr(backend, "follow_commits") else None
        self._lock = ReadersWriterLock()

    @property
    def generation(self) -> dict[str, int] | None:
        """What /healthz reports: the loaded commit point of an embedded index."""
        if self._backend is None:
            return None
        generation, rows = self._backend.commit_point()
        return {"generation": generation, "committed_rows": rows}

    def _moved(self) -> bool:
        backend = self._backend
        return backend is not None and backend.store.commit_point() != backend.commit_point()

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The block runs on the newest commit, with no reload under it."""
        if self._moved():
            with self._lock.writing():
                self._backend.follow_commits()  # checks again: another request may have loaded
        with self._lock.reading():
            yield
