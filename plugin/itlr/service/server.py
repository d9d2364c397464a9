"""Running the service or the proxy under uvicorn, under one set of rules (itlr.service.security).

`run_server` is the one way both servers start (`itlr serve`, `itlr serve --proxy`, `python -m
itlr.cli.proxy`): the token and the address checked, the Host allow-list of a loopback server
without a token around the whole app, the slow-client time-outs. `serving` runs an app
in-process on a free loopback port, in a background thread, under the same Host allow-list,
for benchmarks and tests, which talk to the service over real HTTP.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from itlr.extras import missing_extra

try:
    import uvicorn
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.service.security import (
    HostGuard,
    allowed_hosts,
    check_exposure,
    client_token,
    token_warnings,
)
from itlr.service.timeouts import ReadTimeouts

Refusal = Callable[[int, str], dict[str, Any]]


def guarded(app: Any, host: str, token: str | None, body: Refusal | None = None) -> Any:
    """`app` under the Host allow-list its address and token call for."""
    allowed = allowed_hosts(host, token)
    return app if allowed is None else HostGuard(app, allowed, body)


def checked_token(host: str, token: str | None) -> tuple[str | None, list[str]]:
    """The rules at start: the token as a server uses it (an empty one is none; a short one
    refused), refused beyond loopback without one; and the warnings to print."""
    token = client_token(token)
    check_exposure(host, token)
    return token, token_warnings(token)


def run_server(
    app: Any,
    host: str,
    port: int,
    token: str | None,
    timeouts: ReadTimeouts | None = None,
    body: Refusal | None = None,
    **uvicorn_options: Any,
) -> None:
    """Serve `app` (which checks `token` itself, on every route) until interrupted."""
    checked_token(host, token)
    guard = (timeouts or ReadTimeouts()).uvicorn_options()
    uvicorn.run(guarded(app, host, token, body), host=host, port=port, **guard, **uvicorn_options)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return cast(int, probe.getsockname()[1])


@contextmanager
def serving(
    app: Any, timeout: float = 30.0, read_timeouts: ReadTimeouts | None = None
) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 until the block ends; yields the base URL. The read time-outs
    are those of `itlr serve` (defaults unless given); requests must name loopback in `Host`
    (as a loopback server without a token wants)."""
    port = free_port()
    guard = (read_timeouts or ReadTimeouts()).uvicorn_options()
    server = uvicorn.Server(
        uvicorn.Config(
            guarded(app, "127.0.0.1", None),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            **guard,
        )
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
