"""Where itlr keeps what it writes: one home folder, `$ITLR_HOME` or ~/.local/share/itlr.

indexes/<name>/                 embedded indexes named without a path
cache/embeddings/<model>/       embeddings of evaluation corpora
calibration/<model>.json        what `itlr calibrate` saved
cache/rewrite/                  LLM rewrites (itlr.rewrite.llm)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from itlr.errors import IndexStateError

HOME_ENV = "ITLR_HOME"
# What an embedded index writes into its folder (itlr.engines.store and .ann): a folder holding
# only these is an index, or one whose creation was cut short.
_INDEX_FILES = re.compile(
    r"index\.db(-wal|-shm|-journal)?|write\.lock|vectors(\.\d+)?\.f32|ann\.\d+\.usearch.*"
)


def itlr_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".local" / "share" / "itlr")


def is_folder_name(name: str) -> bool:
    """Whether an index name means a folder: it holds a slash or starts with `.` (`./notes`,
    `../x`, `/data/x`); any other name is an index under $ITLR_HOME/indexes."""
    return "/" in name or os.sep in name or name.startswith(".")


def index_path(name: str | Path) -> Path:
    """Where an embedded index lives: a bare name always under $ITLR_HOME/indexes/NAME (even
    when a folder of that name is in the working directory), a folder name as given.

    The same rule for the CLI's `--index` and the library's `Index.open(name)`. A folder that
    exists and holds files that are not an index's is refused, so an index never writes its
    files beside a user's."""
    text = str(name)
    if not text.strip():
        raise IndexStateError("an index needs a name: give a bare name or a folder path")
    if not is_folder_name(text):
        return itlr_home() / "indexes" / text
    from itlr.engines import store  # numpy and SQLite, only for index paths

    path = Path(text)
    if path.exists() and not path.is_dir():
        raise IndexStateError(f"{text} is a file, not an index folder: give another path")
    if path.is_dir() and not store.exists(path):
        foreign = sorted(p.name for p in path.iterdir() if not _INDEX_FILES.fullmatch(p.name))
        if foreign:
            raise IndexStateError(
                f"{text} is a folder that is not an itlr index (it holds {foreign[0]!r}"
                f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}): give a new "
                "or empty folder, or a bare name for an index under $ITLR_HOME/indexes"
            )
    return path
