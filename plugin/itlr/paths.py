"""Where itlr keeps what it writes: one home folder, `$ITLR_HOME` or ~/.local/share/itlr
(where an embedded index may live: itlr.engines.folders).

indexes/<name>/                 embedded indexes named without a path
cache/embeddings/<model>/       embeddings of evaluation corpora
calibration/<model>.json        what `itlr calibrate` saved
cache/rewrite/                  LLM rewrites (itlr.rewrite.llm)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HOME_ENV = "ITLR_HOME"


def itlr_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".local" / "share" / "itlr")


def is_folder_name(name: str) -> bool:
    """Whether an index name means a folder: it holds a slash or starts with `.` (`./notes`,
    `../x`, `/data/x`); any other name is an index under $ITLR_HOME/indexes."""
    return "/" in name or os.sep in name or name.startswith(".")


def model_slug(model: str) -> str:
    """A file-name-safe form of a model name or path."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", model).strip("_") or "model"
