"""Read time-outs for the service and the proxy: a client gets `header` seconds to send a
request's headers and `body` seconds more for its body, else the connection is closed (with a
408 when no response has started).

uvicorn bounds only the idle time between requests (`timeout_keep_alive`): once a client has
sent a first byte it may dribble the rest for as long as it likes (slowloris), holding a
connection and a task each time. The guard is a subclass of uvicorn's httptools protocol (its
parser callbacks mark where a request is), handed to uvicorn as its `http` protocol class.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from itlr.extras import missing_extra

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.settings import env_seconds, seconds

log = logging.getLogger("itlr.server")

HEADER_TIMEOUT_ENV = "ITLR_HEADER_TIMEOUT"
BODY_TIMEOUT_ENV = "ITLR_BODY_TIMEOUT"


@dataclass(frozen=True)
class ReadTimeouts:
    """Seconds a client has to send a request's headers, then its body."""

    header: float = 10.0
    body: float = 30.0

    def __post_init__(self) -> None:
        for name, value in (("header", self.header), ("body", self.body)):
            seconds(
                value, f"the {name} read time-out (--{name}-timeout, ITLR_{name.upper()}_TIMEOUT)"
            )

    @classmethod
    def from_env(cls, header: float | None = None, body: float | None = None) -> ReadTimeouts:
        """The given values, else ITLR_HEADER_TIMEOUT / ITLR_BODY_TIMEOUT, else the defaults."""
        defaults = cls()
        return cls(
            header if header is not None else _env_seconds(HEADER_TIMEOUT_ENV, defaults.header),
            body if body is not None else _env_seconds(BODY_TIMEOUT_ENV, defaults.body),
        )

    def protocol(self) -> type[asyncio.Protocol]:
        """The uvicorn `http` protocol class that enforces these time-outs."""
        return type(
            "GuardedHttpToolsProtocol",
            (_GuardedProtocol,),
            {"header_timeout": self.header, "body_timeout": self.body},
        )

    def uvicorn_options(self) -> dict[str, Any]:
        return {"http": self.protocol()}


def _env_seconds(name: str, default: float) -> float:
    return env_seconds(name, default, "a read time-out")


TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)


class _GuardedProtocol(HttpToolsProtocol):
    header_timeout: ClassVar[float]
    body_timeout: ClassVar[float]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float, part: str) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(seconds, self._expired, seconds, part)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._read_deadline is None:  # a keep-alive connection's next request
            self._arm(self.header_timeout, "headers")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout, "body")

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _expired(self, seconds: float, part: str) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if part == "body" and self.flow.read_paused:
            # Reading stopped because the app has not consumed what came: not the client's delay.
            self._arm(seconds, part)
            return
        log.warning(
            "closing a connection from %s: the request %s did not arrive within %g s",
            self.client[0] if self.client else "?",
            part,
            seconds,
        )
        cycle = self.cycle
        if part == "headers" or (cycle is not None and not cycle.response_started):
            reason = (
                f"the request {part} did not arrive within {seconds:g} s: send the whole request "
                "at once"
            )
            body = (
                b'{"error":{"type":"request_timeout","reason":"%s"},"status":408}' % reason.encode()
            )
            self.transport.write(TIMEOUT_RESPONSE % (len(body), body))
        self.transport.close()
