"""Helpers of the follower tests (tests/existing_indexes): wait for a condition, check every
vector is of its document's current text, a REST write that must succeed, and a follower run in
a thread (`Index.follow` as `Following`, a prepared `Follower` as `Running`),
stopped at the end of its `with` block. The cluster is the real one the test passes in."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

import itlr
from foreign_index import all_sources
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.follow import Follower


def wait_for(condition: Callable[[], bool], seconds: float = 120.0, every: float = 0.2) -> None:
    """Poll `condition` until it holds; fail the test if it does not within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not in time ({seconds:g}s)"
        time.sleep(every)


def current(url: str, name: str, embedder: Any) -> bool:
    """Every document with a text has the vector and hash of its current text."""
    sources = [s for s in all_sources(url, name).values() if s.get("body")]
    if any(s.get(HASH_FIELD) != content_hash(s["body"], embedder.name) for s in sources):
        return False
    if any("vec" not in s for s in sources):
        return False
    stored = np.asarray([s["vec"] for s in sources], dtype=np.float32)
    return bool(np.allclose(stored, embedder.encode([s["body"] for s in sources]), atol=1e-5))


def hashed(url: str, name: str) -> int:
    """How many documents of the index carry itlr's content hash (after a refresh)."""
    httpx.post(f"{url}/{name}/_refresh", timeout=30)
    query = {"query": {"exists": {"field": HASH_FIELD}}}
    count: int = httpx.post(f"{url}/{name}/_count", json=query, timeout=30).json()["count"]
    return count


def rest(method: str, url: str, body: Any = None) -> None:
    """One REST call to the cluster that must succeed (200 or 201)."""
    answer = httpx.request(method, url, json=body, timeout=30)
    assert answer.status_code in (200, 201), answer.text


class Following:
    """`Index.follow` on the `body`/`vec` fields in a thread, its cycles and
    lines kept; stopped (and required to stop) at the end."""

    def __init__(self, url: str, name: str, **options: Any) -> None:
        self.stop = threading.Event()
        self.cycles: list[Any] = []
        self.lines: list[str] = []
        self.result: Any = None

        def run() -> None:
            self.result = itlr.Index.follow(
                name,
                url=url,
                text_field="body",
                vector_field="vec",
                stop=self.stop,
                interval=0.2,
                on_cycle=self.cycles.append,
                on_line=self.lines.append,
                **options,
            )

        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> Following:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive()


class Running:
    """A prepared follower's `run` in a thread; stopped (and its error kept) at the end."""

    def __init__(self, follower: Follower, install_pipeline: bool = False) -> None:
        self.follower = follower
        self.error: BaseException | None = None
        follower.prepare(install_pipeline)

        def run() -> None:
            try:
                follower.run()
            except BaseException as failed:
                self.error = failed

        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.follower.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
