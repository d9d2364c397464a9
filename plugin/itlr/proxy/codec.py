"""The proxy's JSON: bodies decoded and encoded fast and exactly, and the error a body the proxy
cannot read or pass on faithfully raises (its answer: itlr.proxy.refusals)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import orjson

from itlr.errors import ItlrError

LONG_NUMBER = re.compile(rb"\d{20}")
# A lone UTF-16 surrogate, as JSON writes it (`\ud800`): valid JSON, never valid UTF-8.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_DOUBLE = sys.float_info.max


class BadBody(ItlrError):
    """A body the proxy cannot read or pass on faithfully (400, or the subclass' `status`)."""

    status = 400
    kind = "itlr_bad_request"


def encode_json(body: Any) -> bytes:
    """A rewritten body carries every term's vector: orjson encodes it in a twentieth of the
    standard library's time; what orjson refuses (an integer past 64 bits) goes the slow way."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


def escape_surrogates(text: str) -> str:
    """`text` with any lone surrogate written as its escape, so it can be sent as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def _first_unusable(value: Any, path: str = "") -> tuple[str, str] | None:
    """(where, what) of the first value no engine can take: a string holding a lone surrogate
    (keys included), or a number beyond a double's range; None when there is none."""
    if isinstance(value, str):
        return (path or "the body", "a lone UTF-16 surrogate") if _has_surrogate(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_DOUBLE:
            return (path or "the body", f"a {len(str(abs(value)))}-digit number")
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if _has_surrogate(str(key)):
                return escape_surrogates(here), "a lone UTF-16 surrogate"
            found = _first_unusable(item, here)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_unusable(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def decode_json(raw: bytes) -> Any:
    """orjson first (a tenth of the standard library's time); what it refuses and the standard
    library takes (NaN, UTF-16) still parses as before. orjson reads an integer past 64 bits as
    a float: a body with 20 digits in a row goes the standard library's way, exact.

    What orjson refuses may hold values that are valid JSON but that no engine can take: a lone
    surrogate (`"\\ud800"`, no text: nothing built from it can be embedded or sent on as
    UTF-8) or an integer beyond a double's range. Those are refused here (BadBody, naming
    where they sit)."""
    long_number = LONG_NUMBER.search(raw) is not None
    if not long_number:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    decoded = json.loads(raw)
    if long_number or SURROGATE_ESCAPE.search(raw):
        found = _first_unusable(decoded)
        if found is not None:
            place, what = found
            raise BadBody(
                f"{escape_surrogates(place)} holds {what}, which no engine can take: send valid Unicode "
                "text and numbers within a double's range"
            )
    return decoded
