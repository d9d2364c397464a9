"""Strict JSON out of every front end: no bare NaN / Infinity, and no value whose nesting breaks
an encoder.

A stored document can hold what strict JSON parsers reject (a NaN field value) or what
recursive encoders cannot walk (a field nested hundreds of levels). Ingestion refuses both now,
but an index written before keeps them, and one such document must not turn every later search
that returns it into an error. So output goes through `plain`, which walks the value with an
explicit stack (no recursion): non-finite numbers become null, and anything nested deeper than
MAX_OUTPUT_DEPTH is replaced by a short note.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

# Far above any real output (a hit's fields sit 4 levels down), far below the encoders' limits.
MAX_OUTPUT_DEPTH = 200
TOO_DEEP = f"[itlr: nested deeper than {MAX_OUTPUT_DEPTH} levels, not shown]"


def plain(value: Any, max_depth: int = MAX_OUTPUT_DEPTH) -> Any:
    """`value` with NaN/Infinity as None and containers below `max_depth` replaced by a note;
    tuples become lists. Iterative, so any depth of input is safe."""
    root: list[Any] = [None]
    # (container the copy goes into, key or index there, value to copy, its depth)
    stack: list[tuple[Any, Any, Any, int]] = [(root, 0, value, 0)]
    while stack:
        into, key, item, depth = stack.pop()
        if isinstance(item, float):
            into[key] = item if math.isfinite(item) else None
        elif isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                into[key] = TOO_DEEP
            elif isinstance(item, Mapping):
                copy: dict[str, Any] = {}
                into[key] = copy
                for name, inner in item.items():
                    copy[str(name)] = None  # keeps the keys' order
                    stack.append((copy, str(name), inner, depth + 1))
            else:
                items: list[Any] = [None] * len(item)
                into[key] = items
                stack.extend((items, n, inner, depth + 1) for n, inner in enumerate(item))
        else:
            into[key] = item
    return root[0]


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON text of `value` (see `plain`); non-ASCII characters kept as they are, a lone
    surrogate (stored before ingestion refused them) as U+FFFD, so the text encodes as UTF-8."""
    text = json.dumps(plain(value), indent=indent, ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _LONE_SURROGATE.sub("\ufffd", text)
    return text


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
