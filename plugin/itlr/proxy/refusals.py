"""The proxy's refusals in the cluster's own error shape (`{"error": {"root_cause": [...],
"type", "reason"}, "status"}`), so a UI shows an itlr refusal as it shows the cluster's: one
answer per kind of failure (the request's fault, its size, the encoder's, the upstream's)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from itlr.engines.integrity import ScriptMismatch
from itlr.errors import EmbeddingError, EngineError, ItlrError, QuerySyntaxError
from itlr.limits import LimitError
from itlr.proxy.clause import ClauseError
from itlr.proxy.codec import BadBody, escape_surrogates
from itlr.proxy.upstream import UpstreamTimeout


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
