"""Is the stored script under an itlr id really ours? A script id names its source's digest, but
anyone with cluster rights can store other source under it; the cluster backends and the proxy
compare the stored source with the packaged Painless file before trusting it.
"""

from __future__ import annotations

from typing import Any

from itlr.engines.painless import StoredScript
from itlr.errors import EngineError

# Every id itlr stores scripts under starts so (see StoredScript.id).
SCRIPT_ID_PREFIX = "itlr-"
# How old the query-bar proxy's last comparison of the stored scripts may be when a logical
# search runs (`--script-check-interval`), and the largest it may be set to.
SCRIPT_CHECK_SECONDS = 30.0
MAX_SCRIPT_CHECK_SECONDS = 3600.0


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


def is_script_error(message: str) -> bool:
    """Whether an engine's refusal of a search points at the script (compile or runtime)."""
    text = message.lower()
    return "script" in text
