"""The proxy's own requests: keeping itlr's stored scripts and its hash-guard ingest pipeline
whole on the cluster, on the proxy's own schedule, with the proxy's own credentials.

A background task compares the stored scripts with the packaged Painless files and the pipeline
with itlr's (itlr.hash_guard) every `interval` seconds, and again soon after a logical search
failed on a script error or a write to `_scripts` went through (at most once a second, whoever
asks: what it sends is fixed, never shaped by a caller). A script that is missing is stored
again; a foreign one (other source under itlr's id) makes every logical search a 502 naming
`itlr install` until the packaged one is back, never repaired behind the operator's back. The
pipeline is put back when it was seen before and is gone; a foreign one is logged (it changes
no score, but `--follow` would miss rewritten texts). While a script is foreign the check runs
every second, so searches resume as soon as the packaged script is back.

Searches wait for the first verdict only. When the cluster refuses the proxy's own check (the
proxy runs without credentials in front of a secured cluster), each caller's logical search
checks the scripts as that caller (and stores a missing one as that caller), a verdict kept per
caller for `interval` seconds: the proxy's credentials never serve a caller's request.

`write_refusal` keeps callers from writing to the scripts' ids and the pipeline's id through the
proxy (wildcard and comma-separated ids included).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import time
from dataclasses import dataclass, field

from itlr.extras import missing_extra

try:
    import httpx
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.engines.cluster_client import AsyncTransport, ClusterRefused, run_async
from itlr.engines.cluster_reads import check_scripts, engine_of, stored_scripts
from itlr.engines.connection import Connection
from itlr.engines.dialect import Dialect
from itlr.engines.factory import dialect_for
from itlr.engines.integrity import (
    SCRIPT_ID_PREFIX,
    PipelineMismatch,
    ScriptMismatch,
    reinstall_command,
)
from itlr.engines.layout import IndexLayout
from itlr.errors import EngineError
from itlr.hash_guard import PIPELINE_ID, GuardNotRestored, stored_guard
from itlr.proxy.caller import (
    Caller,
    CallerReads,
    HttpxTransport,
    TimedLRU,
    UpstreamTimeout,
)

log = logging.getLogger("itlr.proxy")

# However often searches fail on a script error, the proxy's own check runs at most this often.
MIN_CHECK_GAP = 1.0
# Callers whose own check is remembered when the proxy cannot check with its own credentials.
CALLER_VERDICTS = 1024


@dataclass
class Verdict:
    """What one check found: the scripts compared (by id) and the first foreign one; `refused`
    when the cluster would not let this check run (then nothing is known)."""

    checked: set[str] = field(default_factory=set)
    foreign: ScriptMismatch | None = None
    refused: str | None = None
    engine: tuple[str, str] | None = None

    def raise_for(self, dialect: Dialect) -> bool:
        """Raise the foreign script's mismatch; True when the verdict covers the dialect's
        scripts (False: check again)."""
        if self.foreign is not None:
            raise self.foreign
        return {dialect.score_script.id, dialect.exclude_script.id} <= self.checked


def _ids(dialect: Dialect) -> tuple[str, str]:
    return dialect.score_script.id, dialect.exclude_script.id


def _known_script_ids() -> frozenset[str]:
    ids: set[str] = set()
    for engine in ("opensearch", "elasticsearch"):
        ids.update(script.id for script in stored_scripts(dialect_for(engine, IndexLayout())))
    return frozenset(ids)


def _names_ours(ids: str, ours: frozenset[str], prefix: str) -> bool:
    """Whether a comma-separated list of ids (wildcards allowed) names one of `ours` (exact
    ids) or, literally, an id starting with `prefix`."""
    for part in (p.strip() for p in ids.split(",")):
        if part.startswith(prefix) or any(fnmatch.fnmatchcase(one, part) for one in ours):
            return True
    return False


def write_refusal(method: str, path: str, url: str) -> str | None:
    """Why a write the proxy would relay must be refused (it reaches itlr's stored scripts or
    its ingest pipeline), None when it may go. `path`: normalised (no dot segments)."""
    if method in ("GET", "HEAD"):
        return None
    segments = path.strip("/").split("/")
    if (
        len(segments) >= 2
        and segments[0] == "_scripts"
        and _names_ours(segments[1], _known_script_ids(), SCRIPT_ID_PREFIX)
    ):
        return (
            "writes to itlr's stored scripts are refused (start the proxy with "
            f"--allow-script-writes to permit them); `{reinstall_command(url)}` installs the "
            "packaged ones"
        )
    if (
        len(segments) >= 3
        and segments[:2] == ["_ingest", "pipeline"]
        and _names_ours(segments[2], frozenset({PIPELINE_ID}), PIPELINE_ID)
    ):
        return (
            f"writes to itlr's ingest pipeline {PIPELINE_ID} are refused (start the proxy "
            "with --allow-script-writes to permit them); `itlr backfill --install-pipeline` "
            "puts itlr's back"
        )
    return None


class OwnRequests:
    """The proxy's own requests, with its configured credentials: only the checks here."""

    def __init__(self, client: httpx.AsyncClient, connection: Connection, deadline: float) -> None:
        self.client = client
        self.connection = connection
        self.deadline = deadline

    @property
    def has_credentials(self) -> bool:
        return bool(self.connection.auth_headers())

    @property
    def transport(self) -> HttpxTransport:
        """The cluster client layer's async face with the proxy's own credentials."""
        headers = self.connection.auth_headers()
        return HttpxTransport(self.client, self.connection.url, self.deadline, headers)


async def check_scripts_into(
    transport: AsyncTransport, dialect: Dialect, url: str, verdict: Verdict
) -> None:
    """The stored-script check (itlr.engines.cluster_reads.check_scripts: a missing script is
    stored again, a foreign one kept) through `transport`, into `verdict`; a refusal sets
    `refused`."""
    try:
        check = await run_async(check_scripts(dialect, url), transport)
    except ClusterRefused as refused:
        verdict.refused = str(refused)
        return
    for script_id in check.stored:
        log.warning("itlr's stored script %s was missing: stored it again", script_id)
    verdict.checked.update(check.checked)
    verdict.foreign = verdict.foreign or check.foreign


class IntegrityWatch:
    """The background check of itlr's scripts and pipeline, and the verdict searches consult."""

    def __init__(
        self, own: OwnRequests, reads: CallerReads, interval: float, deadline: float
    ) -> None:
        self.own = own
        self.reads = reads
        self.interval = interval
        self.deadline = deadline
        self.url = own.connection.url
        self._verdict: Verdict | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._published: asyncio.Event | None = None
        self._nudged: asyncio.Event | None = None
        self._pipeline_seen = False
        self._pipeline_foreign = False
        self._last_refusal: str | None = None
        self._callers: TimedLRU[bytes, Verdict] = TimedLRU(CALLER_VERDICTS, interval)
        # Dialects searches used whose scripts the cluster's root did not name (another
        # version's): checked too, by their pair of script ids.
        self._wanted: dict[tuple[str, str], Dialect] = {}

    # -- the schedule --------------------------------------------------------------------

    def start(self) -> None:
        """Start the background task on the running loop (at the app's start; again on a loop
        that has none: a loop's tasks and events are its own)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        self._loop = loop
        self._published = asyncio.Event()
        self._nudged = asyncio.Event()
        self._verdict = None
        self._task = loop.create_task(self._run(), name="itlr-integrity-watch")

    async def _run(self) -> None:
        assert self._nudged is not None
        while True:
            started = time.monotonic()
            verdict = await self._check_own()
            self._publish(verdict)
            # A foreign script is looked at again every second: searches resume as soon as
            # `itlr install` has put the packaged one back.
            wait = MIN_CHECK_GAP if verdict.foreign is not None else self.interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), wait)
            self._nudged.clear()
            await asyncio.sleep(max(0.0, started + MIN_CHECK_GAP - time.monotonic()))

    def _publish(self, verdict: Verdict) -> None:
        assert self._published is not None
        self._verdict = verdict
        self._published.set()
        if verdict.refused != self._last_refusal and verdict.refused is not None:
            log.warning(
                "cannot check itlr's stored scripts with the proxy's own credentials (%s): "
                "each caller's logical search checks them as that caller",
                verdict.refused,
            )
        self._last_refusal = verdict.refused

    def nudge(self) -> None:
        """Check again soon, and let searches wait for that verdict (a relayed write to
        `_scripts`, a search failed on a script error)."""
        self.start()
        assert self._published is not None and self._nudged is not None
        self._verdict = None
        self._published.clear()
        self._nudged.set()
        self._callers.clear()

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _current(self) -> Verdict:
        self.start()
        assert self._published is not None
        if self._verdict is None:
            try:
                async with asyncio.timeout(self.deadline):
                    await self._published.wait()
            except TimeoutError:
                raise UpstreamTimeout(self.url, self.deadline) from None
        assert self._verdict is not None
        return self._verdict

    # -- the checks ----------------------------------------------------------------------

    async def _check_own(self) -> Verdict:
        verdict = Verdict()
        try:
            try:
                verdict.engine = await run_async(engine_of(self.url), self.own.transport)
            except ClusterRefused as refused:
                answer = refused.answer
                verdict.refused = str(refused) if answer.ok else f"GET / answered {answer.status}"
                return verdict
            engine, version = verdict.engine
            dialect = dialect_for(engine, IndexLayout(), server_version=version or None)
            for each in {_ids(dialect): dialect, **self._wanted}.values():
                await check_scripts_into(self.own.transport, each, self.url, verdict)
                if verdict.refused is not None:
                    return verdict
            if verdict.refused is None:
                await self._check_pipeline()
        except (EngineError, ValueError) as failed:
            verdict.refused = str(failed)
        except Exception as failed:  # the watch must outlive any one failure
            log.exception("itlr proxy: the check of itlr's scripts failed")
            verdict.refused = type(failed).__name__
        return verdict

    async def _check_pipeline(self) -> None:
        # A missing pipeline is stored again only once this watch has seen it: a cluster that
        # never had it (nobody ran --install-pipeline) is left as it is.
        try:
            stored = await run_async(
                stored_guard(self.url, restore=self._pipeline_seen), self.own.transport
            )
        except GuardNotRestored as refused:
            log.warning("%s", refused)
            return
        except ClusterRefused:
            return  # not the proxy's to read: nothing is known
        except PipelineMismatch as foreign:
            self._pipeline_seen = True
            if not self._pipeline_foreign:
                log.warning("%s", foreign)
            self._pipeline_foreign = True
            return
        if stored.restored:
            log.warning("itlr's ingest pipeline %s was deleted: stored it again", PIPELINE_ID)
        elif stored.present:
            self._pipeline_seen, self._pipeline_foreign = True, False

    async def verified(self, caller: Caller, dialect: Dialect) -> None:
        """Before a logical search: raise ScriptMismatch when a stored script is foreign."""
        verdict = await self._current()
        if verdict.refused is None and not verdict.raise_for(dialect):
            # Another version's scripts than the cluster's root named: checked from now on.
            if len(self._wanted) < 8:
                self._wanted[_ids(dialect)] = dialect
            self.nudge()
            verdict = await self._current()
            if verdict.refused is None and not verdict.raise_for(dialect):
                raise EngineError(f"cannot check itlr's stored scripts on {self.url}")
        if verdict.refused is not None:
            await self._verified_as(caller, dialect)

    async def _verified_as(self, caller: Caller, dialect: Dialect) -> None:
        """The check as the caller, when the proxy's own cannot run."""
        verdict = self._callers.get(caller.digest)
        if verdict is None or not verdict.raise_for(dialect):
            verdict = Verdict()
            await check_scripts_into(self.reads.as_caller(caller), dialect, self.url, verdict)
            if verdict.refused is not None:
                raise EngineError(
                    f"cannot check itlr's stored scripts on {self.url}: {verdict.refused}; "
                    "give the proxy credentials allowed to read them (ITLR_USER / "
                    "ITLR_PASSWORD or ITLR_API_KEY), or have an administrator run "
                    f"`{reinstall_command(self.url)}`"
                )
            self._callers.put(caller.digest, verdict)
            verdict.raise_for(dialect)

    async def after_error(self, caller: Caller, dialect: Dialect | None) -> None:
        """A logical search failed on a script error: check again now (raises ScriptMismatch
        for a foreign script; a missing one is stored again). `dialect`: the search's, None
        when it is not known (an `_msearch` naming its indexes per search)."""
        self.nudge()
        if dialect is not None:
            await self.verified(caller, dialect)
            return
        verdict = await self._current()
        if verdict.foreign is not None:
            raise verdict.foreign


__all__ = ["IntegrityWatch", "OwnRequests", "Verdict", "check_scripts_into", "write_refusal"]
