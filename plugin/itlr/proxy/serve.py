"""Serving the proxy with uvicorn, and the policy on where it may listen."""

from __future__ import annotations

import ipaddress
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
