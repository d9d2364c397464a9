"""Optional parts behind pip extras: a missing extra is one line naming it (exit 2 on the command
line, MissingExtra in Python), and the core never imports what an extra brings.

Each command runs as a real `itlr` process in which the extra's modules cannot be imported
(sys.modules[name] = None makes `import name` raise ImportError, as a missing package does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from itlr.errors import ConfigurationError, ItlrError
from itlr.extras import EXTRAS, MissingExtra, require

PLUGIN = Path(__file__).resolve().parents[2] / "plugin"
RUN_BLOCKED = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["itlr", *sys.argv[2:]]
from itlr.__main__ import main
main()
"""


def itlr_without(modules: list[str], *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PLUGIN), os.environ.get("PYTHONPATH", "")]),
        "ITLR_HOME": str(home),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-c", RUN_BLOCKED, ",".join(modules), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def assert_names_extra(result: subprocess.CompletedProcess[str], extra: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"pip install 'itlr[{extra}]'" in lines[0] and "Traceback" not in result.stderr


# One real command per extra, each needing that extra and nothing it would fail on before.
COMMANDS = {
    "serve": (["fastapi"], ["serve", "--index", "anything"]),
    "llm": (
        ["openai"],
        [
            "rewrite",
            "vitamin D, not bone health",
            "--llm-model",
            "m",
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
        ],
    ),
    "eval": (["ir_measures"], ["bench", "synthetic", "--queries-per-template", "1"]),
    "torch": (
        ["sentence_transformers"],
        ["search", "a AND b", "--index", "x", "--encoder", "torch"],
    ),
}


@pytest.mark.parametrize("extra", sorted(COMMANDS))
def test_a_command_without_its_extra_says_in_one_line_which_to_install(extra, tmp_path) -> None:
    blocked, args = COMMANDS[extra]
    assert_names_extra(itlr_without(blocked, *args, home=tmp_path), extra)


def test_every_extra_has_a_command_test() -> None:
    assert set(COMMANDS) == set(EXTRAS)


def test_the_proxy_without_the_serve_extra_names_it(tmp_path) -> None:
    result = itlr_without(
        ["starlette", "httpx"], "serve", "--proxy", "--url", "http://127.0.0.1:9", home=tmp_path
    )
    assert_names_extra(result, "serve")


def test_the_python_api_raises_missing_extra_with_the_same_line(monkeypatch) -> None:
    from itlr.embed import Embedder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtra, match=r"pip install 'itlr\[torch\]'") as raised:
        Embedder(encoder="torch")
    assert isinstance(raised.value, ConfigurationError) and isinstance(raised.value, ItlrError)
    assert raised.value.extra == "torch" and "\n" not in str(raised.value)
    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.delitem(sys.modules, "itlr.service.app", raising=False)
    import itlr.service

    monkeypatch.delitem(itlr.service.__dict__, "create_app", raising=False)
    with pytest.raises(MissingExtra, match=r"itlr\[serve\]"):
        itlr.service.create_app  # noqa: B018  (the attribute loads the app)
    with pytest.raises(ValueError, match="known extra"):
        require("gpu", "cupy")


def test_importing_itlr_and_its_core_loads_no_optional_package() -> None:
    optional = {name for _, modules in EXTRAS.values() for name in modules}
    script = (
        "import sys, json, itlr, itlr.index, itlr.cli, itlr.engines.embedded, itlr.onnx_encoder\n"
        "from itlr import Index, parse\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(optional)!r}))))"
    )
    env = {**os.environ, "PYTHONPATH": str(PLUGIN)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(result.stdout) == []


def test_a_search_of_the_embedded_engine_runs_with_every_extra_blocked(tmp_path) -> None:
    """The core's own work (ingest, search with the default encoder) needs no extra at all."""
    blocked = sorted({name for _, modules in EXTRAS.values() for name in modules})
    corpus = tmp_path / "docs.jsonl"
    rows = [
        {"id": "imm", "text": "Vitamin D supports the immune system against infections."},
        {"id": "bone", "text": "Vitamin D helps calcium absorption for strong bones."},
    ]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ingest = itlr_without(blocked, "ingest", str(corpus), "--index", "lean", home=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    search = itlr_without(
        blocked,
        "search",
        '"vitamin D" AND NOT "bone health"',
        "--index",
        "lean",
        "--json",
        home=tmp_path,
    )
    assert search.returncode == 0, search.stderr
    hits = json.loads(search.stdout)["hits"]
    assert hits[0]["id"] == "imm" and np.isfinite(hits[0]["score"])
