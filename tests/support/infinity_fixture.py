"""pytest plugin: a real OpenAI-compatible embedding server, Infinity (`infinity-emb` from PyPI),
serving the bundled all-MiniLM-L6-v2 from its local folder, offline, on 127.0.0.1.

Session fixture ``infinity_url`` -> the server's `/v1` base URL, obtained in this order:

1. ``ITLR_INFINITY_URL`` if set (a server already running, serving ``all-MiniLM-L6-v2``);
2. a server started from a virtualenv cached in ``~/.cache/itlr/infinity/<key>/`` and built on
   first use: ``pip install --no-deps -r tests/support/infinity_requirements.txt`` (the versions pip
   resolved for ``infinity-emb[server,torch]==0.0.78``, without torch and its CUDA wheels:
   about 260 MB instead of 5.9 GB), then a ``.pth`` that lends it the test interpreter's
   site-packages, where torch already is. Infinity pins numpy < 2, transformers < 5 and
   sentence-transformers < 4, so it cannot share the project's virtualenv itself.

If neither works the tests are skipped with the reason, or fail when ``ITLR_REQUIRE_INFINITY=1``
(scripts/test.sh sets it). Nothing is downloaded at run time: HF_HUB_OFFLINE=1, no telemetry.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).with_name("infinity_requirements.txt")
URL_ENV = "ITLR_INFINITY_URL"
REQUIRE_ENV = "ITLR_REQUIRE_INFINITY"
SERVED_NAME = "all-MiniLM-L6-v2"
INSTALL_SECONDS = 1200
START_SECONDS = 300


def unavailable(reason: str) -> None:
    message = f"no Infinity embedding server available: {reason}"
    if os.environ.get(REQUIRE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        pytest.fail(f"{message} ({REQUIRE_ENV} is set)", pytrace=False)
    pytest.skip(f"{message} (set {URL_ENV}, or {REQUIRE_ENV}=1 to fail instead)")


def cache_root() -> Path:
    base = os.environ.get("ITLR_ENGINES_CACHE") or (
        Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "itlr"
    )
    return Path(base) / "infinity"


def _suite_paths() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def _venv_key() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(sys.version.encode())
    digest.update("\n".join(_suite_paths()).encode())
    return digest.hexdigest()[:12]


def _run(command: list[str], timeout: float) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(command[:4])} ... failed: {' | '.join(tail)}")


def ensure_venv() -> Path:
    """The cached virtualenv with Infinity, built (in a staging folder, renamed when complete)
    on first use."""
    target = cache_root() / _venv_key()
    python = target / "bin" / "python"
    if (target / "complete").exists():
        return python
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "complete").exists():
            return python
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _run([sys.executable, "-m", "venv", str(staging)], 300)
            pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "-q"]
            if importlib.util.find_spec("torch") is None:
                # A suite without torch to lend: the venv gets its own (and its CUDA wheels).
                _run([*pip, "torch>=2.2,<3"], INSTALL_SECONDS)
            _run([*pip, "--no-deps", "-r", str(REQUIREMENTS)], INSTALL_SECONDS)
            # After the install, so pip never sees (or touches) the suite's packages.
            purelib = Path(
                subprocess.check_output(
                    [
                        str(staging / "bin" / "python"),
                        "-c",
                        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    ],
                    text=True,
                ).strip()
            )
            (purelib / "itlr-suite.pth").write_text("\n".join(_suite_paths()) + "\n")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
            (target / "complete").write_text("ok\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return python


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
            served = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return any(model.get("id") == SERVED_NAME for model in served.get("data", []))


@contextlib.contextmanager
def running_server(python: Path, model_path: str, log: Path) -> Iterator[str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
        "INFINITY_ANONYMOUS_USAGE_STATS": "0",
    }
    command = [
        str(python),
        "-c",
        "from infinity_emb.cli import cli; cli()",
        "v2",
        "--model-id",
        model_path,
        "--served-model-name",
        SERVED_NAME,
        "--engine",
        "torch",
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--url-prefix",
        "/v1",
        "--no-vector-disk-cache",
        "--no-model-warmup",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=environment
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not _answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"Infinity did not start: {' | '.join(tail)}")
            time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def infinity_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get(URL_ENV, "").strip().rstrip("/")
    if given:
        if not _answers(given):
            unavailable(f"{URL_ENV}={given} does not serve {SERVED_NAME!r}")
        yield given
        return
    from itlr.embed import resolve_model

    try:
        python = ensure_venv()
    except (RuntimeError, OSError, subprocess.SubprocessError) as failure:
        unavailable(f"cannot install infinity-emb into {cache_root()}: {failure}")
        return
    log = tmp_path_factory.mktemp("infinity") / "server.log"
    try:
        server = running_server(python, resolve_model(None)[1], log)
        url = server.__enter__()
    except RuntimeError as failure:
        unavailable(str(failure))
        return
    try:
        yield url
    finally:
        server.__exit__(None, None, None)
