"""Numbers read from environment variables (limits, cache sizes, thresholds, time-outs).

Every one is read the same way: unset or blank gives the default; anything else must be a
number of the right kind, at least its least value, or it is refused in one line naming the
variable. A typo in a deployment's settings must not quietly become the default.
"""

from __future__ import annotations

import math
import os
from typing import TypeVar

from itlr.errors import ConfigurationError

Number = TypeVar("Number", int, float)


def env_number(name: str, default: Number, *, least: Number, meaning: str) -> Number:
    """The environment variable `name` as a number of `default`'s type (int or float), or
    `default` when it is unset or blank. `meaning` says what the number counts, for the error
    ("the terms of one query")."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "an integer" if isinstance(default, int) else "a number"
    try:
        value = type(default)(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < least:
        raise ConfigurationError(f"{name}={raw!r}: give {meaning}, {kind} >= {least}")
    return value


# The longest time-out itlr takes: an hour. A time-out that is infinite, NaN or a year long
# is no time-out: a stalled peer would hold a connection and a worker for good.
MAX_SECONDS = 3_600.0


def seconds(value: float, what: str) -> float:
    """A time-out in seconds, finite, above 0 and at most MAX_SECONDS; else a one-line error
    naming `what` (the flag and the environment variable that set it)."""
    number = float(value)
    if not (math.isfinite(number) and 0 < number <= MAX_SECONDS):
        raise ConfigurationError(
            f"{what} must be a positive number of seconds, at most {MAX_SECONDS:g}, not {value}"
        )
    return number


def env_seconds(name: str, default: float, what: str) -> float:
    """A time-out from the environment variable `name` (unset or blank: `default`)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: {what} is a number of seconds") from None
    return seconds(value, f"{what} ({name}={raw!r})")


__all__ = ["MAX_SECONDS", "env_number", "env_seconds", "seconds"]
