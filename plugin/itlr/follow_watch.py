"""What the follower (itlr.follow) checks again while it runs: the index it follows may be
deleted and recreated, an alias it follows may be moved to another index, its mapping may
change, and the hash guard (itlr.hash_guard) may be removed or replaced. A `Snapshot` of the
index is taken at the start and again every few seconds (and after a write the engine refused
for another reason than a conflict); `changes` says, one line each, what moved between two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from itlr.engines.operations import IndexState
from itlr.errors import IndexStateError
from itlr.hash_guard import PIPELINE_ID

# Seconds between two checks of the followed index (a refused write checks at once).
RECHECK_SECONDS = 10.0


@dataclass(frozen=True)
class Snapshot:
    """One concrete index as the follower last saw it."""

    name: str
    uuid: str
    properties: dict[str, Any]
    final_pipeline: str | None

    @classmethod
    def of(cls, given: str, states: list[IndexState]) -> Snapshot:
        if len(states) != 1:
            names = ", ".join(s.name for s in states[:5]) or "none"
            raise IndexStateError(
                f"{given!r} now names {len(states)} indexes ({names}), not one: the follower "
                "stops (follow one index)"
            )
        (state,) = states
        pipeline = state.settings.get("final_pipeline")
        return cls(
            state.name,
            state.uuid,
            dict(state.mappings.get("properties") or {}),
            None if pipeline in (None, "_none") else str(pipeline),
        )


@dataclass(frozen=True)
class Changes:
    """What moved between two snapshots of the followed index."""

    # Another index now: deleted and recreated (a new uuid) or an alias moved (a new name).
    replaced: str | None = None
    # Fields whose mapping is new or different (the copy takes them: itlr.follow).
    remapped: tuple[str, ...] = ()
    # Itlr's fields no longer mapped as itlr maps them.
    unmapped: str | None = None
    # The hash guard is not the final pipeline any more: None, or the pipeline there now.
    guard_gone: bool = False
    guard_replaced_by: str | None = None

    @property
    def any(self) -> bool:
        return bool(self.replaced or self.remapped or self.unmapped or self.guard_gone)


def changes(
    before: Snapshot,
    after: Snapshot,
    given: str,
    itlr_fields: dict[str, dict[str, Any]],
    guarded: bool,
) -> Changes:
    """What changed from `before` to `after` for a follower of `given` that writes
    `itlr_fields` (name: mapping) and, `guarded`, relies on the hash guard."""
    replaced = None
    if after.uuid != before.uuid:
        replaced = (
            f"{given!r} now names index {after.name!r} (was {before.name!r})"
            if after.name != before.name
            else f"index {after.name!r} was deleted and created again"
        )
    remapped = tuple(
        sorted(
            name
            for name, spec in after.properties.items()
            if before.properties.get(name) != spec and name not in itlr_fields
        )
    )
    missing = [
        name
        for name, spec in itlr_fields.items()
        if after.properties.get(name, {}).get("type") != spec.get("type")
    ]
    unmapped = (
        f"index {after.name!r} no longer maps {', '.join(repr(m) for m in missing[:5])} as itlr "
        "writes them"
        if missing
        else None
    )
    guard_gone = guarded and after.final_pipeline != PIPELINE_ID
    return Changes(
        replaced,
        remapped,
        unmapped,
        guard_gone,
        after.final_pipeline if guard_gone else None,
    )
