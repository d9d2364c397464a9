"""Serving an app in-process: a real uvicorn on a free loopback port, in a background thread.

For benchmarks and tests, which talk to the service over real HTTP; `itlr serve` runs uvicorn
in the foreground instead.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from itlr.extras import missing_extra

try:
    import uvicorn
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.service.timeouts import ReadTimeouts


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return cast(int, probe.getsockname()[1])


@contextmanager
def serving(
    app: Any, timeout: float = 30.0, read_timeouts: ReadTimeouts | None = None
) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 until the block ends; yields the base URL. The read time-outs
    are those of `itlr serve` (defaults unless given)."""
    port = free_port()
    guard = (read_timeouts or ReadTimeouts()).uvicorn_options()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **guard)
    )
    thread = threading.Thread(target=server.run, name="itlr-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
