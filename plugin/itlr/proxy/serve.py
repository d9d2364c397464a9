"""Serving the proxy with uvicorn, under the service's policy on where it may listen."""

from __future__ import annotations

from typing import Any

from itlr.extras import require
from itlr.service.security import check_exposure
from itlr.service.server import serving
from itlr.service.timeouts import ReadTimeouts

__all__ = ["check_exposure", "run_proxy", "serving"]


def run_proxy(
    app: Any, host: str = "127.0.0.1", port: int = 8000, timeouts: ReadTimeouts | None = None
) -> None:
    """Serve an app of `create_proxy_app` until interrupted. Uvicorn's access log stays off: it
    would log paths with query strings at info level; the proxy logs what it forwards itself."""
    (uvicorn,) = require("serve", "uvicorn")
    check_exposure(host, app.state.proxy.token)
    guard = (timeouts or ReadTimeouts()).uvicorn_options()
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="info", **guard)
