"""Who may use a service that holds cluster credentials: loopback, or a client token. One set
of rules for both servers (`itlr serve` and `itlr serve --proxy`, however started):

- a client token, when given, has at least MIN_TOKEN_LENGTH characters and no surrounding
  space (an empty one is no token);
- binding anything but loopback needs a token (`check_exposure`);
- on loopback without a token, only requests whose `Host` names loopback are answered
  (`HostGuard`): a web page whose name an attacker re-points at 127.0.0.1 (DNS rebinding) would
  otherwise reach the server from the user's browser;
- docker-compose.yml's default token is accepted with a warning (`token_warnings`).

The JSON service and the query-bar proxy hold credentials for the cluster, so anyone who can
reach them can use those credentials. Bound to loopback only local processes can; bound to
anything else a client token of the service's own is required on every request. The guards are
ASGI middleware around the whole app, so every route has them, one added later too.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import replace
from typing import Any

from itlr import json_values
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS, LimitError

TOKEN_ENV = "ITLR_TOKEN"
TOKEN_HEADER = "x-itlr-token"  # the proxy forwards Authorization upstream, so it uses this one
MIN_TOKEN_LENGTH = 16
# docker-compose.yml's token when ITLR_PROXY_TOKEN is not set: public, so only for a try-out on
# this machine (compose publishes the proxy on 127.0.0.1 only).
COMPOSE_DEFAULT_TOKEN = "itlr-local-try-out-only"
# The Host names a loopback server without a token answers (any port).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the service reachable from this machine only."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def client_token(given: str | None) -> str | None:
    """The client token from the option or $ITLR_TOKEN (an empty one is none); a short one, or
    one with surrounding space or control characters (no header could carry it), is refused."""
    token = given or os.environ.get(TOKEN_ENV) or None
    if token is None:
        return None
    if token != token.strip() or not token.isprintable():
        raise ConfigurationError(
            "the client token has surrounding spaces or control characters, which no header "
            'carries: use e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"the client token is {len(token)} characters: use at least {MIN_TOKEN_LENGTH}, "
            'e.g. python -c "import secrets; print(secrets.token_urlsafe(32))"'
        )
    return token


def token_warnings(token: str | None) -> list[str]:
    """What a server says at start about a token that is valid but weak."""
    if token == COMPOSE_DEFAULT_TOKEN:
        return [
            "the client token is docker-compose.yml's public default: set ITLR_PROXY_TOKEN "
            "(or ITLR_TOKEN) to your own for anything but a try-out on this machine"
        ]
    return []


def allowed_hosts(host: str, token: str | None) -> frozenset[str] | None:
    """The Host names a server bound to `host` answers: loopback's when it is bound to
    loopback without a token, else any (None)."""
    return LOOPBACK_HOSTS if token is None and is_loopback(host) else None


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a client token."""
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"binding {host} exposes the cluster credentials to the network: set a client "
            f"token (`token`, or ${TOKEN_ENV}), or bind 127.0.0.1"
        )


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison; hashing first hides the token's length too."""
    if given is None:
        return False
    return hmac.compare_digest(
        hashlib.sha256(given.encode()).digest(), hashlib.sha256(token.encode()).digest()
    )


def presented_token(headers: list[tuple[bytes, bytes]], bearer: bool = True) -> str | None:
    """The token a request carries: X-Itlr-Token, or (with bearer) Authorization: Bearer."""
    for name, value in headers:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == TOKEN_HEADER:
            return text.strip()
        if bearer and key == "authorization" and text[:7].lower() == "bearer ":
            return text[7:].strip()
    return None


class TokenGuard:
    """ASGI middleware: every HTTP request must present the client token, else 401.

    `bearer=False` accepts X-Itlr-Token only, for a proxy whose Authorization header belongs to
    the upstream cluster. `public(method, path)` names the requests that need no token: files
    that hold no data and are the same for everyone (the workbench page, itlr.service.pages).
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        bearer: bool = True,
        public: Callable[[str, str], bool] | None = None,
        body: Callable[[int, str], dict[str, Any]] | None = None,
    ) -> None:
        if not token:
            raise ConfigurationError("an empty client token would let any request in")
        self.app = app
        self.token = token
        self.bearer = bearer
        self.public = public
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if token_matches(presented_token(scope.get("headers", []), self.bearer), self.token):
            await self.app(scope, receive, send)
            return
        if self.public is not None and self.public(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        how = "Authorization: Bearer TOKEN or " if self.bearer else ""
        said = f"missing or wrong client token: send {how}X-Itlr-Token: TOKEN"
        await send_json(
            send,
            401,
            self.body(401, said) if self.body else {"error": said},
            extra_headers=[(b"www-authenticate", b"Bearer")] if self.bearer else [],
        )


def host_name(value: str) -> str:
    """The name of a Host header's value, its port taken off (`[::1]:8000` -> `[::1]`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostGuard:
    """ASGI middleware: only requests whose Host header names one of `allowed` (any port) are
    answered, others get 403 (a loopback server without a token, against DNS rebinding)."""

    def __init__(
        self,
        app: ASGIApp,
        allowed: frozenset[str],
        body: Callable[[int, str], dict[str, Any]] | None = None,
    ) -> None:
        self.app = app
        self.allowed = allowed
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = next(
            (v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"),
            "",
        )
        if host_name(given) in self.allowed:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        said = (
            f"this server listens on loopback without a client token, so it answers requests for "
            f"localhost or 127.0.0.1 only (Host was {given[:100]!r}); start it with a token "
            f"(`token`, ${TOKEN_ENV}) to reach it under another name"
        )
        await send_json(send, 403, self.body(403, said) if self.body else {"error": said})


class BodyLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` with 413 and, with `max_depth`,
    JSON bodies nested deeper with 400, before they are parsed (json.loads recurses)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = {
            "error": f"the request body is over {self.max_bytes} bytes, the limit "
            "(max_body_bytes, raise it with ITLR_MAX_BODY_BYTES): send a smaller one",
            "limit": "max_body_bytes",
        }
        for name, value in scope.get("headers", []):
            declared = name.lower() == b"content-length" and value.isdigit()
            if declared and int(value) > self.max_bytes:
                await send_json(send, 413, too_big)
                return
        # Chunked bodies carry no length: read up to the limit, then replay what was read.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_json(send, 413, too_big)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        if self.max_depth is not None:
            try:
                replace(LIMITS, max_depth=self.max_depth).check_json_depth(raw)
            except LimitError as deep:
                await send_json(send, 400, {"error": str(deep), "limit": deep.name})
                return
        refusal = _bad_values(raw) if raw.strip() else None
        if refusal is not None:
            await send_json(send, 400, refusal)
            return
        body = {"type": "http.request", "body": raw, "more_body": False}
        await self.app(scope, _replay([body], receive), send)


def _bad_values(raw: bytes) -> dict[str, Any] | None:
    """The error body for JSON whose values no front end can take (itlr.json_values): a number
    outside the float range or a lone surrogate, with the field's path; bytes that are not
    UTF-8. Malformed JSON passes: the app's own parser reports it with the position."""
    try:
        json_values.loads(raw)
    except json_values.BadValue as bad:
        return {"error": str(bad), "path": bad.path}
    except UnicodeDecodeError as bad:
        return {"error": f"the body is not UTF-8 text (byte {bad.start}): send JSON in UTF-8"}
    except ValueError:
        return None
    return None


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


async def send_json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(payload).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra_headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
