"""The JSON HTTP service (`itlr serve`): the front door `itlr.Index` over HTTP.

`create_app(index)` gives an ASGI app; `itlr.service.security` holds the loopback / client-token
policy that every itlr HTTP service applies. The app needs the `serve` extra and loads on first
use, so that `itlr.service.security` (which the command line reads) needs none.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from itlr.service.app import DEFAULT_MAX_BODY_BYTES, create_app

_LAZY = {"DEFAULT_MAX_BODY_BYTES": "itlr.service.app", "create_app": "itlr.service.app"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'itlr.service' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]
