"""Serving the proxy with uvicorn, and the policy on where it may listen."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from itlr.errors import ConfigurationError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a client token: the proxy reaches the cluster."""
    if not is_loopback(host) and not token:
        raise ConfigurationError(
            f"--host {host} lets other machines reach the cluster through the proxy: give a "
            "client token with --token or ITLR_TOKEN (clients send it as X-Itlr-Token), "
            "or bind 127.0.0.1"
        )


def run_proxy(app: Any, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve an app of `create_proxy_app` until interrupted. Uvicorn's access log stays off: it
    would log paths with query strings at info level; the proxy logs what it forwards itself."""
    import uvicorn

    check_exposure(host, app.state.proxy.token)
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="info")


@contextlib.contextmanager
def serving(app: Any, host: str = "127.0.0.1", timeout: float = 60.0) -> Iterator[str]:
    """The app served by uvicorn on a free port of `host` in a background thread, for tests and
    benchmarks that must reach it over real HTTP; yields its base URL."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="itlr-proxy", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ConfigurationError(f"the proxy did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
