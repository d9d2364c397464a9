"""The proxy's JSON and its errors: bodies decoded and encoded fast and exactly, refusals in the
cluster's own error shape (`{"error": {"root_cause": [...], "type", "reason"}, "status"}`), so a
UI shows an itlr refusal as it shows the cluster's."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import orjson
from starlette.responses import JSONResponse

from itlr.engines.integrity import ScriptMismatch
from itlr.errors import EmbeddingError, EngineError, ItlrError, QuerySyntaxError
from itlr.limits import LimitError
from itlr.proxy.clause import ClauseError
from itlr.proxy.upstream import UpstreamTimeout

LONG_NUMBER = re.compile(rb"\d{20}")
# A lone UTF-16 surrogate, as JSON writes it (`\ud800`): valid JSON, never valid UTF-8.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_DOUBLE = sys.float_info.max


class BadBody(ItlrError):
    """A body the proxy cannot read or pass on faithfully (400, or the subclass' `status`)."""

    status = 400
    kind = "itlr_bad_request"


def error_body(status: int, kind: str, reason: str, **extra: Any) -> dict[str, Any]:
    """An error in the cluster's own shape, so the UI shows `reason` as it shows the cluster's;
    request text quoted in it is made printable, so the answer itself cannot fail."""
    shown = {k: escape_surrogates(v) if isinstance(v, str) else v for k, v in extra.items()}
    cause = {"type": kind, "reason": escape_surrogates(reason), **shown}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def error_response(status: int, kind: str, reason: str, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(status, kind, reason, **extra), status_code=status)


def clause_error(bad: ClauseError | QuerySyntaxError) -> JSONResponse:
    if isinstance(bad, QuerySyntaxError):
        bad = ClauseError(bad.message, bad.position, bad.text)
    reason = f"itlr: {bad.message}"
    if bad.position is not None:
        reason = f"itlr: syntax error at position {bad.position}: {bad.message}"
    return error_response(
        400,
        "itlr_query_error",
        reason,
        **({"position": bad.position, "query": bad.text} if bad.position is not None else {}),
    )


def bad_body(bad: BadBody) -> JSONResponse:
    return error_response(bad.status, bad.kind, f"itlr: {bad}")


def _timed_out(failed: BaseException) -> bool:
    """Whether a failure came from a time-out (its own type, or what it was raised over)."""
    seen: BaseException | None = failed
    for _ in range(16):  # a chain of causes is short; never follow a cycle
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or "Timeout" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def encoder_failure(failed: EmbeddingError) -> JSONResponse:
    """The encoder (the model, or an embedding endpoint) failed a search's terms: not the
    request's fault, a 502 (504 when it did not answer in time), with its cause."""
    status = 504 if _timed_out(failed) else 502
    kind = "itlr_encoder_timeout" if status == 504 else "itlr_encoder_error"
    return error_response(status, kind, f"itlr proxy: cannot embed the query's terms: {failed}")


def script_mismatch(foreign: ScriptMismatch) -> JSONResponse:
    return error_response(502, "itlr_script_mismatch", f"itlr proxy: {foreign}")


def upstream_timeout(slow: UpstreamTimeout) -> JSONResponse:
    extra = {"timeout_seconds": slow.seconds} if slow.seconds is not None else {}
    return error_response(504, "itlr_upstream_timeout", f"itlr proxy: {slow}", **extra)


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


def refusal(failed: ItlrError) -> JSONResponse:
    """The answer to a search the proxy could not rewrite: 400 for the request's fault, 413 for
    its size, 502 / 504 for the upstream's."""
    if isinstance(failed, BadBody):
        return bad_body(failed)
    if isinstance(failed, EmbeddingError):
        return encoder_failure(failed)
    if isinstance(failed, LimitError):
        kind = "itlr_request_too_large" if failed.is_size else "itlr_limit_exceeded"
        return error_response(413 if failed.is_size else 400, kind, f"itlr: {failed}")
    if isinstance(failed, ClauseError | QuerySyntaxError):
        return clause_error(failed)
    if isinstance(failed, UpstreamTimeout):
        return upstream_timeout(failed)
    if isinstance(failed, ScriptMismatch):
        return script_mismatch(failed)
    if isinstance(failed, EngineError):
        return error_response(502, "itlr_upstream_error", f"itlr: {failed}")
    return error_response(400, "itlr_error", f"itlr: {failed}")
