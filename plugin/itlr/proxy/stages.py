"""Where a proxied request spends its time, for `itlr bench proxy`.

Off unless a `StageTimes` is attached to the proxy (`QueryBarProxy.stages`): a served proxy pays
one context-variable read per span and keeps nothing. When on, every request gets a dict of
milliseconds per stage, kept in arrival order for the benchmark to summarise.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from types import TracebackType

# The proxy's path, in order (the benchmark prints them so).
STAGES = (
    "read body",
    "parse JSON",
    "find + parse clause",
    "index lookup (cached)",
    "thread hand-off",
    "encode (cache + model)",
    "count token statistics",
    "build upstream body",
    "serialise upstream body",
    "upstream round trip (to headers)",
    "relay response body",
    "fix answer",
)

_current: ContextVar[dict[str, float] | None] = ContextVar("itlr_proxy_stages", default=None)


class StageTimes:
    """The stage times of every request the proxy served while attached."""

    def __init__(self) -> None:
        self.requests: list[dict[str, float]] = []

    def start_request(self) -> None:
        """Record the current request's stages (called by the proxy in its request's task)."""
        marks: dict[str, float] = {}
        self.requests.append(marks)
        _current.set(marks)

    def clear(self) -> None:
        self.requests.clear()


class span:
    """Adds the time its block takes to the current request's `name` stage, if recording."""

    __slots__ = ("marks", "name", "started")

    def __init__(self, name: str) -> None:
        self.name = name
        self.marks = _current.get()

    def __enter__(self) -> None:
        if self.marks is not None:
            self.started = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.marks is not None:
            elapsed = (time.perf_counter() - self.started) * 1000
            self.marks[self.name] = self.marks.get(self.name, 0.0) + elapsed


def recording() -> bool:
    return _current.get() is not None


def add(name: str, milliseconds: float) -> None:
    """Add a time measured elsewhere (e.g. in a worker thread) to the current request."""
    marks = _current.get()
    if marks is not None:
        marks[name] = marks.get(name, 0.0) + milliseconds


def get(name: str) -> float:
    """The current request's `name` stage so far (0 when not recording)."""
    marks = _current.get()
    return 0.0 if marks is None else marks.get(name, 0.0)
