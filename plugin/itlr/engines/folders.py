"""Where an embedded index lives, and which folders itlr may write one into: the same rule for
the CLI's `--index`, the library's `Index.open(name)`, the service and the engine itself."""

from __future__ import annotations

import re
from pathlib import Path

from itlr.engines import legacy, store
from itlr.engines.writer_lock import wait_for_creation
from itlr.errors import IndexStateError
from itlr.paths import is_folder_name, itlr_home

# What an embedded index writes into its folder (itlr.engines.store and .ann): a folder holding
# only these is an index, or one whose creation was cut short.
_INDEX_FILES = re.compile(
    r"index\.db(-wal|-shm|-journal)?|write\.lock|vectors(\.\d+)?\.f32|ann\.\d+\.usearch.*"
)


def index_path(name: str | Path) -> Path:
    """Where an embedded index lives: a bare name always under $ITLR_HOME/indexes/NAME (even
    when a folder of that name is in the working directory), a folder name as given.

    The same rule for the CLI's `--index`, the library's `Index.open(name)` and the service. The
    path is resolved first (symlinks, `..`, trailing slashes), so the check below sees the
    folder that would be written, however it is spelled. A file, or a folder holding anything
    but an itlr index's own files, is refused, so an index never writes beside a user's files
    nor into a file it did not create."""
    text = str(name)
    if not text.strip():
        raise IndexStateError("an index needs a name: give a bare name or a folder path")
    if "\x00" in text:
        raise IndexStateError(f"{text!r} is not a path: it holds a NUL character")
    path = Path(text) if is_folder_name(text) else itlr_home() / "indexes" / text
    try:
        resolved = path.expanduser().resolve()
    except (OSError, RuntimeError) as bad:  # a symlink loop
        raise IndexStateError(f"{text} cannot be resolved to a folder ({bad})") from None
    check_index_folder(resolved, text)
    return resolved


def check_index_folder(path: Path, shown: str) -> None:
    """Refuse `path` (resolved) unless it is missing, an empty folder, an itlr index, or what a
    cut-short creation of one left (only its own, empty, files)."""
    if path.exists() and not path.is_dir():
        raise IndexStateError(f"{shown} is a file, not an index folder: give another path")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise IndexStateError(f"{shown} lies inside {above}, a file: give a folder path")
    if not path.is_dir() or store.exists(path):
        return
    if legacy.present(path):
        # A `manifest.json` that is not a format 1 index's: the user's (issue 56, item 1).
        reason = legacy.refusal(path, store.leftover_of_creation) or "it changed meanwhile"
        raise IndexStateError(legacy.not_legacy_message(shown, reason))
    foreign = _foreign_files(path)
    if foreign and not any(p.is_dir() or not _INDEX_FILES.fullmatch(p.name) for p in foreign):
        # Only an index's own files, some not empty: perhaps another process creating it now.
        wait_for_creation(path)
        if store.exists(path):
            return
        foreign = _foreign_files(path)
    if foreign:
        raise IndexStateError(
            f"{shown} is a folder that is not an itlr index (it holds {foreign[0].name!r}"
            f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}): give a new "
            "or empty folder, or a bare name for an index under $ITLR_HOME/indexes"
        )


def _foreign_files(path: Path) -> list[Path]:
    """What in the folder `path` no itlr index nor its cut-short creation holds."""
    entries = sorted(path.iterdir())
    foreign = [p for p in entries if not _INDEX_FILES.fullmatch(p.name) or p.is_dir()]
    if foreign:
        return foreign
    # Only index file names: accept them only as a cut-short creation left them, so a user's
    # own `index.db` or `vectors.f32` is never taken over.
    return [p for p in entries if not store.leftover_of_creation(p)]


def writable_folder(path: str | Path) -> Path:
    """`path` resolved, if an index may be written there: whoever creates an index, the front
    door or code holding an engine, never writes beside someone else's files."""
    resolved = Path(path).expanduser().resolve()
    check_index_folder(resolved, str(path))
    return resolved
