"""An overall deadline for a blocking cluster request made by a long-running loop (the
follower, itlr.follow).

The clients' time-outs apply to each socket read, so a cluster (or a proxy in front of it)
that trickles one byte a second never times out, and their retries multiply what remains. Here
the request runs in a daemon thread and the caller waits at most `seconds` for it: past that it
is abandoned (it finishes or fails on its own; its answer is dropped) and the caller gets a
one-line EngineError, which the follower treats as any failed request (back off, try again).
At most `MAX_ABANDONED` abandoned requests may still be waiting: beyond that no new one is
started, so an unresponsive cluster costs a bounded number of threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from itlr.errors import EngineError

P = ParamSpec("P")
T = TypeVar("T")

MAX_ABANDONED = 3


class Deadline:
    """Runs calls with an overall time limit each; `what` names the cluster in messages."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self._abandoned: list[threading.Thread] = []

    def __call__(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return self.within(self.seconds, call, *args, **kwargs)

    def within(self, seconds: float, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        if len(self._abandoned) >= MAX_ABANDONED:
            raise EngineError(
                f"{self.what} has not answered {len(self._abandoned)} earlier requests (each "
                f"abandoned after {self.seconds:.0f}s): waiting before asking again"
            )
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = call(*args, **kwargs)
            except BaseException as failed:  # handed to the caller's thread
                outcome["error"] = failed

        thread = threading.Thread(target=run, name="itlr-request", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            self._abandoned.append(thread)
            raise EngineError(
                f"{self.what} did not answer within {seconds:.0f}s (the overall deadline of "
                "one request, however slowly the answer trickles in): abandoned"
            )
        if "error" in outcome:
            raise outcome["error"]
        value: T = outcome["value"]
        return value
