"""The writer lock of an embedded index folder (`write.lock`, `filelock`: an OS advisory lock,
released by the kernel when its process dies, even by SIGKILL): one writer at a time, and a
creation held from its first file to its commit, so no other process sees one half done."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from itlr.errors import IndexStateError

LOCK = "write.lock"
LOCK_WAIT_SECONDS = 5.0


def writer_lock(path: Path) -> FileLock:
    return FileLock(path / LOCK, thread_local=False)


@contextlib.contextmanager
def held(lock: FileLock, path: Path, timeout: float) -> Iterator[None]:
    """Hold an index's writer lock, or say clearly who holds it."""
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise IndexStateError(
            f"index at {path} is being written by another process (it holds "
            f"{path / LOCK}): wait until it finishes, then run again"
        ) from None
    try:
        yield
    finally:
        lock.release()


def wait_for_creation(path: Path, timeout: float = LOCK_WAIT_SECONDS) -> None:
    """Wait until no process holds the writer lock of the index folder `path`, which a
    creation holds from its first file to its commit: what it leaves then is an index or
    nothing half made. Only where the lock file exists already (never one more file in a
    folder that is not an index)."""
    if (path / LOCK).is_file():
        with held(writer_lock(path), path, timeout):
            pass
