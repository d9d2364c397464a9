"""Servers a benchmark starts as processes of their own, as they are deployed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from itlr.errors import EngineError


@contextmanager
def local_server(
    arguments: Callable[[int], list[str]], health_path: str, what: str
) -> Iterator[str]:
    """`python ARGUMENTS(port)` on a free loopback port, its URL once `health_path` answers 200,
    until the block ends; `what` names it when it does not start."""
    import httpx

    from itlr.service.server import free_port

    port = free_port()
    command = [sys.executable, *arguments(port)]
    server = subprocess.Popen(command, env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}{health_path}", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                stderr = server.stderr.read() if server.stderr else ""
                raise EngineError(f"{what} did not start: {stderr[-500:]}")
            time.sleep(0.25)
        yield url
    finally:
        server.terminate()
        server.wait(30)
