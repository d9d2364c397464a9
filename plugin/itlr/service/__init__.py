"""The JSON HTTP service (`itlr serve`): the front door `itlr.Index` over HTTP.

`create_app(index)` gives an ASGI app; `itlr.service.security` holds the loopback / client-token
policy that every itlr HTTP service applies.
"""

from itlr.service.app import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]
