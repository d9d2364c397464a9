"""Where itlr keeps what it writes: one home folder, `$ITLR_HOME` or ~/.local/share/itlr.

indexes/<name>/                 embedded indexes named without a path
cache/embeddings/<model>/       embeddings of evaluation corpora
calibration/<model>.json        what `itlr calibrate` saved
cache/rewrite/                  LLM rewrites (itlr.rewrite.llm)
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "ITLR_HOME"


def itlr_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".local" / "share" / "itlr")


def index_path(name: str | Path) -> Path:
    """Where an embedded index lives: a path as given, or a bare name under $ITLR_HOME/indexes.

    The same rule for the CLI's `--index` and the library's `Index.open(name)`."""
    text = str(name)
    if os.sep in text or text.startswith(".") or Path(text).is_dir():
        return Path(text)
    return itlr_home() / "indexes" / text
