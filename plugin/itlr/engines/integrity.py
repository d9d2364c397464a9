"""Is the stored script under an itlr id really ours? A script id names its source's digest, but
anyone with cluster rights can store other source under it; the cluster backends and the proxy
compare the stored source with the packaged Painless file before trusting it. Likewise itlr's
ingest pipeline (itlr.hash_guard): an emptied one would make `--follow` miss rewritten texts.
"""

from __future__ import annotations

from typing import Any

from itlr.engines.painless import StoredScript
from itlr.errors import ConfigurationError, EngineError, IndexStateError

# Every id itlr stores scripts under starts so (see StoredScript.id).
SCRIPT_ID_PREFIX = "itlr-"
# How often the stored scripts (and itlr's ingest pipeline) are compared with the packaged ones
# by a running proxy, service or follower (`--script-check-interval`), and the largest it may
# be set to; each also compares them again after an error that names a script.
SCRIPT_CHECK_SECONDS = 30.0
MAX_SCRIPT_CHECK_SECONDS = 3600.0


def check_interval(seconds: float) -> float:
    """A script check interval within its bounds (ConfigurationError naming the flag)."""
    if not 0 < seconds <= MAX_SCRIPT_CHECK_SECONDS:
        raise ConfigurationError(
            "the script check interval (--script-check-interval, ITLR_SCRIPT_CHECK_INTERVAL) "
            f"must be a number of seconds above 0 and at most {MAX_SCRIPT_CHECK_SECONDS:g}, "
            f"not {seconds}"
        )
    return seconds


def reinstall_command(url: str) -> str:
    return f"itlr install --url {url}"


class ScriptMismatch(EngineError):
    """The stored script under an itlr id holds other source than the packaged file."""

    def __init__(self, script_id: str, url: str) -> None:
        self.script_id = script_id
        super().__init__(
            f"the stored script {script_id} on {url} is not itlr's (its source differs from the "
            f"packaged file): reinstall it with `{reinstall_command(url)}`"
        )


def stored_source(found: Any) -> str | None:
    """The source in a `GET _scripts/<id>` answer (None when it holds none)."""
    script = dict(found).get("script") if found is not None else None
    source = script.get("source") if isinstance(script, dict) else None
    return source if isinstance(source, str) else None


def check_stored(script: StoredScript, found: Any, url: str) -> None:
    """Refuse a stored script whose source is not the packaged one."""
    if stored_source(found) != script.source:
        raise ScriptMismatch(script.id, url)


class PipelineMismatch(IndexStateError):
    """The ingest pipeline under itlr's hash-guard id does other work than itlr's."""

    def __init__(self, pipeline_id: str, url: str) -> None:
        self.pipeline_id = pipeline_id
        super().__init__(
            f"the ingest pipeline {pipeline_id} on {url} is not itlr's (its processors differ "
            "from itlr's hash guard): `itlr backfill --follow` would miss rewritten texts; put "
            "it back with `itlr backfill --index INDEX --install-pipeline --url ...`"
        )


def stored_pipeline(found: Any, pipeline_id: str) -> dict[str, Any] | None:
    """The pipeline in a `GET _ingest/pipeline/<id>` answer (None when it holds none)."""
    try:
        body = dict(found).get(pipeline_id)
    except (TypeError, ValueError):
        return None
    return dict(body) if isinstance(body, dict) else None


def check_stored_pipeline(pipeline_id: str, expected: dict[str, Any], found: Any, url: str) -> None:
    """Refuse a stored pipeline whose processors are not the expected ones (the description
    is a note, not work)."""
    stored = stored_pipeline(found, pipeline_id)
    if stored is None or stored.get("processors") != expected["processors"]:
        raise PipelineMismatch(pipeline_id, url)


def is_script_error(message: str) -> bool:
    """Whether an engine's refusal of a search points at the script (compile or runtime)."""
    text = message.lower()
    return "script" in text
