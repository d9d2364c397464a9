"""Waiting for a server started as a process of its own (`itlr serve`, the proxy, the image's
command) to answer: one loop for every test that starts one."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping

import httpx


def first_answer(
    process: subprocess.Popen[str],
    url: str,
    *,
    seconds: float = 120.0,
    headers: Mapping[str, str] | None = None,
    output: Callable[[], str] | None = None,
) -> httpx.Response:
    """GET `url` until the process answers at all, and return that answer. Fail the test, with
    the process's `output` (its stderr unless given), if it exits first or has not answered
    within `seconds`."""

    def said() -> str:
        if output is not None:
            return output()
        return process.stderr.read() if process.stderr else ""

    deadline = time.monotonic() + seconds
    while True:
        try:
            return httpx.get(url, headers=headers, timeout=5)
        except httpx.TransportError:
            assert process.poll() is None, said()
            assert time.monotonic() < deadline, f"{url} did not answer in {seconds:g} s"
            time.sleep(0.5)
