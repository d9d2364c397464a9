"""`pip install itlr` with no extras: a fresh virtualenv holding only the wheel built from this
checkout and the core dependencies from the package index (as CI reaches it), in which
`itlr ingest` and `itlr search` run on the embedded engine without torch, and rank the demo
corpus as the torch encoder does.

The only reason to skip is a package index that cannot be reached (said in the skip); any other
failure to build or install is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from itlr.cli import app
from itlr.demo import showcases
from itlr.resources import data_file

ROOT = Path(__file__).resolve().parents[2]
QUERIES = [
    *(str(case.query) for case in showcases()),
    '"machine learning" OR "statistics"',
    '"renewable energy" AND NOT "solar panels"',
]
# What pip prints when it cannot reach the index: the one case that skips instead of failing.
UNREACHABLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
)
# Runs `itlr` commands (a JSON list of argument lists) in one process, each output to its own
# file, then records which top-level modules the process ever imported.
RUN_AND_LIST_MODULES = """
import contextlib, json, sys
from itlr.__main__ import main
folder, commands = sys.argv[1], json.loads(sys.argv[2])
for number, command in enumerate(commands):
    sys.argv = ["itlr", *command]
    with open(f"{folder}/out-{number}.txt", "w") as out, contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as stop:
            if stop.code:
                raise
with open(f"{folder}/modules.json", "w") as listing:
    json.dump(sorted({name.split(".")[0] for name in sys.modules}), listing)
"""


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if result.returncode != 0:
        said = result.stdout + result.stderr
        if any(sign in said for sign in UNREACHABLE):
            pytest.skip(f"the package index cannot be reached: pip {args[0]} said {said[-300:]!r}")
        raise AssertionError(f"pip {' '.join(args)} failed:\n{said[-3000:]}")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("core-install")
    wheels = scratch / "wheels"
    _pip(
        Path(sys.executable), "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)
    )
    (wheel,) = wheels.glob("itlr-*.whl")
    folder = scratch / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    _pip(folder / "bin" / "python", "install", "--quiet", str(wheel))
    return folder


def _core_itlr(folder: Path, home: Path, commands: list[list[str]]) -> list[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "ITLR_ENCODER", "VIRTUAL_ENV"}
    }
    env |= {"ITLR_HOME": str(home), "COLUMNS": "200"}
    result = subprocess.run(
        [
            str(folder / "bin" / "python"),
            "-c",
            RUN_AND_LIST_MODULES,
            str(home),
            json.dumps(commands),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads((home / "modules.json").read_text()))
    assert "itlr" in loaded and "onnxruntime" in loaded
    assert not loaded & {"torch", "sentence_transformers", "transformers"}
    return [(home / f"out-{number}.txt").read_text() for number in range(len(commands))]


def test_the_core_install_searches_without_torch_and_ranks_as_torch_does(
    core_venv, tmp_path, monkeypatch
) -> None:
    folder = core_venv
    home = tmp_path / "core-home"
    home.mkdir()
    corpus = str(data_file("demo", "corpus.jsonl"))
    python = folder / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == "True", "the core install brought torch"

    searches = [["search", query, "--index", "demo", "--json"] for query in QUERIES]
    outputs = _core_itlr(folder, home, [["ingest", corpus, "--index", "demo"], *searches])
    core_hits = [
        [(hit["id"], hit["score"]) for hit in json.loads(out)["hits"]] for out in outputs[1:]
    ]

    # The reference: the same corpus and queries with the torch encoder, in this process.
    monkeypatch.setenv("ITLR_ENCODER", "torch")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", corpus, "--index", "demo-torch"]).exit_code == 0
    for query, hits in zip(QUERIES, core_hits, strict=True):
        result = runner.invoke(app, ["search", query, "--index", "demo-torch", "--json"])
        assert result.exit_code == 0, result.output
        reference = [(hit["id"], hit["score"]) for hit in json.loads(result.stdout)["hits"]]
        assert len(reference) == 10
        assert [i for i, _ in hits] == [i for i, _ in reference], query
        gap = max(abs(a - b) for (_, a), (_, b) in zip(hits, reference, strict=True))
        assert gap <= 1e-4, (query, gap)


def test_the_wheel_carries_the_workbench_page_and_swagger_ui_with_its_licence(core_venv) -> None:
    """`itlr serve` shows / and /docs from files in the installed package: the wheel must carry
    them byte for byte (they are package data, not Python modules)."""
    python = core_venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    located = subprocess.run(
        [str(python), "-c", "import itlr, pathlib; print(pathlib.Path(itlr.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=core_venv,
    )
    installed = Path(located.stdout.strip())
    assert core_venv in installed.parents, installed  # the wheel's copy, not this checkout
    static = Path("service") / "static"
    names = [
        "workbench/index.html",
        "workbench/workbench.js",
        "workbench/workbench.css",
        "docs.html",
        "swagger-init.js",
        "swagger-ui/swagger-ui-bundle.js",
        "swagger-ui/swagger-ui.css",
        "swagger-ui/favicon-32x32.png",
        "swagger-ui/LICENSE",
        "swagger-ui/NOTICE",
        "swagger-ui/swagger-ui-bundle.js.LICENSE.txt",
    ]
    source = ROOT / "plugin" / "itlr"
    for name in names:
        shipped = installed / static / name
        assert shipped.is_file(), f"the wheel lacks itlr/{static / name}"
        assert shipped.read_bytes() == (source / static / name).read_bytes(), name
