"""What itlr takes in as a JSON value, checked at every edge (service bodies, CLI options,
`Index.search` options, documents to ingest) before any of it is used.

Two kinds of value parse as JSON yet break what comes after:
  - numbers outside the float range: a 400-digit integer is a Python int that every comparison
    with a float turns into OverflowError, and one of over 4,300 digits makes even `int()` and
    `json.dumps` raise ValueError; `1e999` parses as infinity. Engines store doubles, so a
    number that is not a finite double is refused, with the path of the field that holds it;
  - strings with a lone surrogate (`"\\ud800"`): valid JSON escapes, but not Unicode text, so no
    store can keep them and no answer can be encoded as UTF-8.

`loads` parses with hooks that turn such numbers into markers (so the error can name where they
sit); `problem` walks a parsed value with an explicit stack, so depth costs no recursion.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

# The longest integer text that can be a finite double: 309 digits and a sign.
_MAX_INT_TEXT = len(str(int(sys.float_info.max))) + 1


class BadValue(ConfigurationError):
    """A JSON value itlr cannot take: the message names the field's path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path or 'the value'}: {reason}")
        self.path = path
        self.reason = reason


class _OutOfRange:
    """A number of the input that is no finite double, kept as its text until reported."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _integer(text: str) -> int | _OutOfRange:
    if len(text) > _MAX_INT_TEXT:
        return _OutOfRange(text)
    value = int(text)
    return value if abs(value) <= sys.float_info.max else _OutOfRange(text)


def _decimal(text: str) -> float | _OutOfRange:
    value = float(text)
    return value if math.isfinite(value) else _OutOfRange(text)


def loads(text: str | bytes, where: str = "") -> Any:
    """Parse JSON text and check it (`check`); malformed JSON raises json.JSONDecodeError and
    bytes that are not UTF-8 UnicodeDecodeError, as json.loads does. Nesting deeper than
    LIMITS.max_depth is a LimitError before parsing (json.loads recurses: no RecursionError)."""
    LIMITS.check_json_depth(text, where or "the JSON text")
    value = json.loads(text, parse_int=_integer, parse_float=_decimal, parse_constant=_OutOfRange)
    check(value, where)
    return value


def check(value: Any, where: str = "") -> None:
    """Raise BadValue naming the first field (`where` + its path) that holds a number outside the
    float range or a string that is not Unicode text."""
    found = problem(value)
    if found is not None:
        path, reason = found
        raise BadValue(".".join(part for part in (where, path) if part), reason)


def problem(value: Any) -> tuple[str, str] | None:
    """(path, reason) of the first bad part of `value`, or None."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                return path, f"{_surrogate(item)!a} is a lone surrogate, not Unicode text"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > sys.float_info.max:
                return path, _out_of_range(f"an integer of {_digits(item)} digits")
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, _out_of_range(repr(item))
        elif isinstance(item, _OutOfRange):
            shown = item.text if len(item.text) <= 24 else f"a number of {len(item.text)} digits"
            return path, _out_of_range(shown)
        elif isinstance(item, Mapping):
            for key, inner in reversed(list(item.items())):
                name = str(key)
                if not _is_text(name):
                    return path, f"a key holds {_surrogate(name)!a}, a lone surrogate"
                stack.append((f"{path}.{name}" if path else name, inner))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{n}]", inner) for n, inner in reversed(list(enumerate(item))))
    return None


def _out_of_range(shown: str) -> str:
    return (
        f"{shown} is no finite double, which JSON cannot carry as a number: give one within "
        "±1.8e308"
    )


def _digits(value: int) -> int:
    # int -> str is refused past 4,300 digits; the bit length gives the count without it.
    return max(1, int(abs(value).bit_length() * math.log10(2)) + 1)


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(text: str) -> str:
    return next(c for c in text if "\ud800" <= c <= "\udfff")
