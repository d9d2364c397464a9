"""One deadline for a whole cluster request of the official clients (opensearch-py,
elasticsearch-py), not one per read: the service's, the proxy's backends' and the follower's
(itlr.follow) one mechanism.

Both clients time a request per socket read: an answer that trickles in a byte at a time never
times out, and a service waiting on it waits for ever. `set_deadline(client, seconds)` puts every
urllib3 pool of a client under a watchdog: a request whose answer (headers and body) is not
whole `seconds` after it was sent has its socket shut down, which ends the blocked read at once,
and fails as urllib3's read time-out, which the client turns into its own ConnectionTimeout (and
itlr into one line). A timed-out request is not retried: the deadline is the caller's wait.

One watchdog thread serves every pool of the process: it sleeps until the earliest deadline.
Nothing is left waiting on a cut request (no thread is abandoned to finish it). A request that
carries more than a read (a follower's bulk write) gets a longer deadline within
`longer_deadline(seconds)`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ReadTimeoutError


class _Alarm:
    def __init__(self, when: float, action: Callable[[], None]) -> None:
        self.when = when
        self.action = action
        self.cancelled = False
        self.fired = False


class Watchdog:
    """Runs an action at its time unless cancelled first; one daemon thread."""

    def __init__(self) -> None:
        self._alarms: list[tuple[float, int, _Alarm]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, action: Callable[[], None]) -> _Alarm:
        alarm = _Alarm(time.monotonic() + seconds, action)
        with self._changed:
            heapq.heappush(self._alarms, (alarm.when, next(self._order), alarm))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="itlr-deadline", daemon=True)
                self._thread.start()
            self._changed.notify()
        return alarm

    def cancel(self, alarm: _Alarm) -> None:
        with self._changed:
            alarm.cancelled = True  # dropped when it comes up

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._alarms and self._alarms[0][2].cancelled:
                    heapq.heappop(self._alarms)
                if not self._alarms:
                    self._changed.wait()
                    continue
                wait = self._alarms[0][0] - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                _, _, alarm = heapq.heappop(self._alarms)
                alarm.fired = True
            with contextlib.suppress(Exception):  # the watchdog outlives any one action
                alarm.action()


WATCHDOG = Watchdog()

# The deadline a request made within `longer_deadline` gets (None: its client's).
_LONGER: ContextVar[float | None] = ContextVar("itlr_longer_deadline", default=None)


@contextlib.contextmanager
def longer_deadline(seconds: float) -> Iterator[None]:
    """Within the block, each request this thread makes gets `seconds` for its whole answer
    where its client's deadline is shorter (a bulk request carries more than a read)."""
    token = _LONGER.set(seconds)
    try:
        yield
    finally:
        _LONGER.reset(token)


def _cut(connection: Any) -> None:
    """End a blocked read on the connection's socket at once (the base class's shutdown: an
    SSL socket's own would drop its TLS state under the reading thread)."""
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _deadline_pool(base: type[HTTPConnectionPool], seconds: float) -> type[HTTPConnectionPool]:
    class DeadlinePool(base):  # type: ignore[misc,valid-type]
        deadline = seconds

        def _make_request(self, conn: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            # With the body preloaded (both clients'), the whole answer is read in here.
            seconds = max(self.deadline, _LONGER.get() or 0.0)
            alarm = WATCHDOG.arm(seconds, lambda: _cut(conn))
            try:
                answer = super()._make_request(conn, method, url, *args, **kwargs)
            except Exception:
                if not alarm.fired:
                    raise
                answer = None
            finally:
                WATCHDOG.cancel(alarm)
            if alarm.fired:
                # A cut socket reads as the end of the answer: whatever came is not all of it.
                conn.close()
                raise ReadTimeoutError(
                    self,
                    url,
                    f"no whole answer within {seconds:g} s (the overall deadline of a "
                    "cluster request)",
                )
            return answer

    DeadlinePool.__name__ = f"Deadline{base.__name__}"
    return DeadlinePool


def _pools(client: Any) -> list[Any]:
    """The objects of a client that hold a urllib3 pool (`.pool`): opensearch-py's connections,
    elastic-transport's nodes."""
    transport = client.transport
    if hasattr(transport, "node_pool"):  # elasticsearch-py 8 (elastic-transport)
        return list(transport.node_pool.all())
    return list(getattr(transport.connection_pool, "connections", ()))


def set_deadline(client: Any, seconds: float) -> None:
    """Give every request of `client` (an OpenSearch or Elasticsearch client) one deadline of
    `seconds` for its whole answer, and no retry after it."""
    for holder in _pools(client):
        pool = getattr(holder, "pool", None)
        if not isinstance(pool, HTTPConnectionPool):
            continue
        base = type(pool)
        if hasattr(base, "deadline"):
            base = base.__mro__[1]
        pool.__class__ = _deadline_pool(base, seconds)
    client.transport.retry_on_timeout = False


__all__ = ["WATCHDOG", "Watchdog", "longer_deadline", "set_deadline"]
