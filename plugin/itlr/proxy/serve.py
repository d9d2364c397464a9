"""Serving the proxy with uvicorn, under the rules every itlr server starts under."""

from __future__ import annotations

from typing import Any

from itlr.extras import require
from itlr.proxy.app import refusal_body
from itlr.service.security import check_exposure
from itlr.service.server import run_server, serving
from itlr.service.timeouts import ReadTimeouts

__all__ = ["check_exposure", "run_proxy", "serving"]


def run_proxy(
    app: Any, host: str = "127.0.0.1", port: int = 8000, timeouts: ReadTimeouts | None = None
) -> None:
    """Serve an app of `create_proxy_app` until interrupted (itlr.service.server.run_server).
    Uvicorn's access log stays off: it would log paths with query strings at info level; the
    proxy logs what it forwards itself."""
    require("serve", "uvicorn")
    run_server(
        app,
        host,
        port,
        app.state.proxy.token,
        timeouts,
        body=refusal_body,
        access_log=False,
        log_level="info",
    )
