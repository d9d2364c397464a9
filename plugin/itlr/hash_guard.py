"""itlr's ingest pipeline: on every write that runs pipelines it moves `itlr_hash` aside to
`itlr_hash_was`, so that `itlr backfill --follow` (itlr.follow) sees the document again and
compares its text with the hash it was embedded from. Installed as the index's `final_pipeline`
(a request's own `pipeline` cannot skip it) by `itlr backfill --install-pipeline`."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

from itlr.engines.cluster_client import ClusterAnswer, ClusterRead, ClusterRefused
from itlr.engines.integrity import check_stored_pipeline
from itlr.engines.operations import ClusterOperations
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD


class GuardedIndex(Protocol):
    """The index the guard is put on or checked (a ClusterBackend, itlr.engines.cluster, which
    checks it before its searches): named here, so that the backend imports this module and
    not the other way round."""

    index_name: str
    url: str

    @property
    def operations(self) -> ClusterOperations: ...


PIPELINE_ID = "itlr-hash-guard-v1"
# Fixed source, no user text: a write by anyone moves the hash aside for the follower to check.
PIPELINE = {
    "description": (
        "itlr: a write that runs pipelines moves itlr_hash to itlr_hash_was, so that "
        "`itlr backfill --follow` compares the text with it and embeds it again if it changed"
    ),
    "processors": [
        {
            "script": {
                "lang": "painless",
                "source": (
                    f"if (ctx.containsKey('{HASH_FIELD}')) "
                    f"{{ ctx['{PREVIOUS_HASH_FIELD}'] = ctx.remove('{HASH_FIELD}'); }}"
                ),
            }
        }
    ],
}


def install_hash_guard(backend: GuardedIndex) -> None:
    """Put itlr's ingest pipeline and make it the index's `final_pipeline` (a pipeline the
    request cannot skip); refuse in one line an index that already has another one."""
    check_hash_guard(backend)
    operations = backend.operations
    operations.put_pipeline(PIPELINE_ID, PIPELINE, backend.index_name)
    operations.put_settings(backend.index_name, {"index": {"final_pipeline": PIPELINE_ID}})


def verify_hash_guard(backend: GuardedIndex) -> bool:
    """When the index's final pipeline is itlr's: refuse a stored pipeline that is not itlr's
    (PipelineMismatch, naming how to put it back) and store it again when it was deleted.
    True when the index uses it."""
    if backend.operations.settings(backend.index_name).get("final_pipeline") != PIPELINE_ID:
        return False
    backend.operations.run(stored_guard(backend.url, restore=True), backend.index_name)
    return True


@dataclass(frozen=True)
class StoredGuard:
    """What `stored_guard` found under itlr's pipeline id: itlr's pipeline (`present`), or
    nothing, then stored again when it was asked to (`restored`)."""

    present: bool
    restored: bool = False


class GuardNotRestored(ClusterRefused):
    """The pipeline was missing and the cluster refused to store it again."""


def stored_guard(url: str, restore: bool) -> Generator[ClusterRead, ClusterAnswer, StoredGuard]:
    """The check of itlr's pipeline the backends and the proxy's watch both make, as one
    operation of the cluster client layer (itlr.engines.cluster_client): PipelineMismatch when
    another pipeline is stored under its id, a missing one stored again when `restore`
    (GuardNotRestored when that is refused), ClusterRefused when it cannot be read."""
    found = yield ClusterRead("GET", f"/_ingest/pipeline/{PIPELINE_ID}")
    if found.status == 404:
        if not restore:
            return StoredGuard(present=False)
        put = yield ClusterRead("PUT", f"/_ingest/pipeline/{PIPELINE_ID}", PIPELINE)
        if not put.ok:
            raise GuardNotRestored(
                f"itlr's ingest pipeline {PIPELINE_ID} was deleted and storing it again was "
                f"refused ({put.status}): `itlr backfill --follow` misses rewritten texts",
                put,
            )
        return StoredGuard(present=False, restored=True)
    if not found.ok or not isinstance(found.body, dict):
        raise ClusterRefused(
            f"cannot read itlr's ingest pipeline {PIPELINE_ID} on {url}: the cluster answered "
            f"{found.status}",
            found,
        )
    check_stored_pipeline(PIPELINE_ID, PIPELINE, found.body, url)
    return StoredGuard(present=True)


def check_hash_guard(backend: GuardedIndex) -> None:
    """Refuse, before anything changes, an index whose final pipeline is another one."""
    current = backend.operations.settings(backend.index_name).get("final_pipeline")
    if current not in (None, "_none", PIPELINE_ID):
        raise IndexStateError(
            f"index {backend.index_name!r} already has the final pipeline {current!r}: add itlr's "
            "hash-guard processor (docs/follow.md) to it instead of --install-pipeline"
        )
