"""The proxy's forwarding hop: a UI's request on to the upstream and its answer back, over aiohttp.

The hop is on every request's path, so it runs on aiohttp (a C HTTP parser, one layer), which
spends about half the CPU per request that httpx over httpcore and h11 spends; the proxy's own
questions to the upstream (itlr.proxy.upstream) stay on httpx. What goes out is what came in:
the UI's headers (hop-by-hop ones taken out by the caller), the path and query string byte for
byte, no default headers added, no cookie kept from one user's answer for the next, no redirect
followed; what comes back is the upstream's bytes as sent (still compressed if they were).

Time-outs: `timeout` seconds for a free connection and for each write of the body; then, from
the end of the body, `timeout` seconds for the whole answer, its headers and its body together
(an upstream that trickles its answer a byte at a time is cut off like a silent one);
`connect` seconds to open a connection. A write the upstream stops taking, a connection that
never frees and an answer that does not come whole in time are 504s (`ForwardTimeout`); an
unreachable or broken-off upstream is `ForwardFailed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import zlib
from collections.abc import AsyncIterable, AsyncIterator

from itlr.extras import missing_extra

try:
    import aiohttp
    from yarl import URL
except ImportError as absent:
    raise missing_extra("serve", absent) from None

# The upstream's answer headers: h11 (which the proxy used before) took a header block up to
# 16 KiB in all, so one long header (a deprecation warning, a cookie) may take as much here.
MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 1024
# Headers aiohttp would add of its own accord: the UI sends them itself if it wants them.
NOT_ADDED = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class ForwardTimeout(Exception):
    """The upstream took longer than the proxy's time-out (for a connection, a write, a read)."""


class ForwardFailed(Exception):
    """The upstream could not be reached, or broke off; `cause` is aiohttp's error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Forwarded:
    """The upstream's answer: status and headers at once, the body read whole or streamed."""

    def __init__(self, response: aiohttp.ClientResponse, deadline: float) -> None:
        self._response = response
        # The loop time by which the whole answer must be in.
        self.deadline = deadline
        self.status_code = response.status
        self.content: bytes | None = None  # once read whole
        # Lower-case names; a repeated header's values joined by ", " (RFC 9110 5.3). Latin-1
        # both ways, so the bytes go back to the UI exactly as the upstream sent them.
        headers: dict[str, str] = {}
        for raw_name, raw_value in response.raw_headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.headers = headers

    async def read(self) -> bytes:
        """The whole body; ForwardTimeout / ForwardFailed when the upstream stalls or breaks
        off. The connection goes back to the pool."""
        try:
            async with asyncio.timeout_at(self.deadline):
                self.content = await self._response.read()
        except TimeoutError:  # aiohttp's read time-out is one too
            raise ForwardTimeout() from None
        except aiohttp.ClientError as cut:
            raise ForwardFailed(cut) from None
        finally:
            self._response.release()
        return self.content

    @property
    def text(self) -> str:
        """The body read, as text (decompressed when it came gzip- or deflate-encoded)."""
        assert self.content is not None, "read() first"
        content = self.content
        if self.headers.get("content-encoding", "").strip().lower() in ("gzip", "deflate"):
            with contextlib.suppress(zlib.error):  # wbits 47: gzip or zlib, whichever it is
                content = zlib.decompress(content, 47)
        return content.decode("utf-8", errors="replace")

    async def stream(self) -> AsyncIterator[bytes]:
        """The body as it comes, until the deadline (ForwardTimeout beyond: the relay breaks
        off, as the upstream's own would)."""
        chunks = self._response.content.iter_any()
        while True:
            try:
                async with asyncio.timeout_at(self.deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise ForwardTimeout() from None
            yield chunk

    async def aclose(self) -> None:
        """After streaming: the connection back to the pool when the body was read to its end,
        else closed."""
        self._response.release()


def _as_sent(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The UI's headers (bytes read as Latin-1) as aiohttp writes them out (as UTF-8): a
    non-ASCII value that was UTF-8 goes out as the very bytes that came in."""
    if all(value.isascii() for _, value in headers):
        return headers
    sent = []
    for name, value in headers:
        if not value.isascii():
            with contextlib.suppress(UnicodeDecodeError):
                value = value.encode("latin-1").decode("utf-8")
        sent.append((name, value))
    return sent


class _WriteDeadline:
    """Moves the guard on the send around each write of the body: `seconds` for every chunk
    the upstream takes. Off while the next chunk is awaited from the UI (its own read
    time-outs bound that); once the whole body is written, `seconds` for the whole answer."""

    def __init__(self, guard: asyncio.Timeout, seconds: float) -> None:
        self.guard = guard
        self.seconds = seconds
        self.active = True  # False once the send is over (the upstream may answer early)

    def _move(self, when: float | None) -> None:
        if self.active:
            self.guard.reschedule(when)

    async def paced(self, chunks: AsyncIterable[bytes] | tuple[bytes]) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        self._move(None)  # connected: from here on only the writes are timed
        if isinstance(chunks, tuple):
            for chunk in chunks:
                self._move(loop.time() + self.seconds)
                yield chunk
                self._move(None)
        else:
            async for chunk in chunks:
                self._move(loop.time() + self.seconds)
                yield chunk
                self._move(None)
        # Written whole: the answer has `seconds` from now, all of it (Forwarded.deadline).
        self._move(loop.time() + self.seconds)


class Forwarder:
    """A keep-alive pool to the upstream and the send of one forwarded request."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext,
        timeout: float,
        connect: float,
        max_connections: int,
        keepalive_seconds: float,
    ) -> None:
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.connect = connect
        self.max_connections = max_connections
        self.keepalive_seconds = keepalive_seconds
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_here(self) -> aiohttp.ClientSession:
        """The pool of the running event loop (a pool's connections belong to one loop)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections,
                keepalive_timeout=self.keepalive_seconds,
                ssl=self.ssl_context,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # The pool's wait and every write: the guard in `send`.
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=None, sock_connect=self.connect, sock_read=self.timeout
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                skip_auto_headers=NOT_ADDED,
                max_line_size=MAX_HEADER_BYTES,
                max_field_size=MAX_HEADER_BYTES,
                max_headers=MAX_HEADERS,
            )
            self._loop = loop
        return self._session

    async def send(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
    ) -> Forwarded:
        """Send the request; the answer once its headers are in. `url`: already escaped as
        the UI sent it (kept byte for byte)."""
        session = self._session_here()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + self.timeout) as guard:
                deadline = _WriteDeadline(guard, self.timeout)
                data: AsyncIterator[bytes] | None = None
                if isinstance(body, bytes):
                    # Sent as one chunk under the write time-out, with its exact length.
                    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                    headers.append(("content-length", str(len(body))))
                    data = deadline.paced((body,))
                elif body is not None:
                    data = deadline.paced(body)
                try:
                    response = await session.request(
                        method,
                        URL(url, encoded=True),
                        headers=_as_sent(headers),
                        data=data,
                        allow_redirects=False,
                    )
                finally:
                    deadline.active = False
                answered_by = guard.when() or loop.time() + self.timeout
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as down:
            raise ForwardFailed(down) from None
        except TimeoutError:  # the guard's, or aiohttp's read time-out
            raise ForwardTimeout() from None
        except aiohttp.ClientError as down:
            raise ForwardFailed(down) from None
        return Forwarded(response, answered_by)

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
