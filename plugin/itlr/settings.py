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


__all__ = ["env_number"]
