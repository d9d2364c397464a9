"""The Dockerfile and docker-compose.yml work as written (issue 57.4). No Docker engine runs
here, so the test reads both files and does what they say: the wheel is built from exactly the
files the Dockerfile copies (minus .dockerignore's), installed on its own, and the image's entry
point runs with the compose file's proxy command and environment (its default token included)
against a real OpenSearch. Before, the Dockerfile did not copy hatch_build.py, which the wheel
build needs, and the proxy refused compose's 15-character default token: `docker compose up`
could not start the proxy as the README says."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from demo_backend import demo_backend
from itlr.service.security import COMPOSE_DEFAULT_TOKEN, MIN_TOKEN_LENGTH
from itlr.service.server import free_port
from served_process import first_answer

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = ("Failed to establish a new connection", "Temporary failure in name resolution")
QUERY = '"vitamin D" AND NOT "bone health"'


def dockerfile() -> tuple[list[tuple[list[str], str]], dict[str, str], list[str]]:
    """(COPY sources and destination, ENV, ENTRYPOINT) of the Dockerfile."""
    copies, env, entrypoint = [], {}, []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        instruction, rest = words[0].upper(), words[1] if len(words) > 1 else ""
        if instruction == "COPY":
            *sources, destination = shlex.split(rest)
            copies.append((sources, destination))
        elif instruction == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))
        elif instruction == "ENTRYPOINT":
            entrypoint = json.loads(rest)
    return copies, env, entrypoint


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns leave this path out of the build context."""
    parts = relative.split("/")
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts):
                return True
        elif relative == pattern or relative.startswith(pattern + "/"):
            return True
    return False


def build_context(target: Path) -> Path:
    """The image's /app: what each COPY brings from the build context."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies, _, _ = dockerfile()
    for sources, destination in copies:
        for source in sources:
            origin = ROOT / source
            assert origin.exists(), f"the Dockerfile copies {source}, which does not exist"
            place = target / (source if destination.endswith("/") else destination)
            if origin.is_dir():
                for path in origin.rglob("*"):
                    relative = path.relative_to(ROOT).as_posix()
                    if path.is_file() and not ignored(relative, patterns):
                        copied = place / path.relative_to(origin)
                        copied.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, copied)
            else:
                place.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, place)
    return target


def interpolated(value: str) -> str:
    """Compose's `${VAR:-default}` as compose resolves it when VAR is not set."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1]) or m[2], value)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from the image's files, installed alone into a folder of its own."""
    scratch = tmp_path_factory.mktemp("image")
    context = build_context(scratch / "app")
    wheels, site = scratch / "wheels", scratch / "site"
    for args in (
        ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(context)],
        ["install", "--quiet", "--no-deps", "--target", str(site), "--find-links", str(wheels)],
    ):
        if args[0] == "install":
            args.extend(str(wheel) for wheel in wheels.glob("*.whl"))
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        said = done.stdout + done.stderr
        if done.returncode and any(sign in said for sign in UNREACHABLE):
            pytest.skip(f"the package index cannot be reached: {said[-300:]}")
        assert done.returncode == 0, said[-3000:]
    return site


def test_the_compose_default_token_meets_the_servers_rules() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("itlr-proxy", "itlr-proxy-elastic"):
        token = interpolated(compose["services"][name]["environment"]["ITLR_TOKEN"])
        assert token == COMPOSE_DEFAULT_TOKEN and len(token) >= MIN_TOKEN_LENGTH
    for ui in ("opensearch-dashboards", "kibana"):
        environment = compose["services"][ui]["environment"]
        (headers,) = [v for k, v in environment.items() if k.endswith("CUSTOMHEADERS")]
        assert json.loads(interpolated(headers)) == {"X-Itlr-Token": COMPOSE_DEFAULT_TOKEN}


@pytest.fixture(scope="module")
def demo(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    with demo_backend(
        opensearch_url, "itlr-image", embedder, corpus[:30], corpus_vectors[:30]
    ) as backend:
        yield backend.index_name


@pytest.mark.opensearch
def test_the_image_runs_the_compose_proxy_command_against_opensearch(
    installed, opensearch_url, demo, tmp_path
) -> None:
    _, image_env, entrypoint = dockerfile()
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["itlr-proxy"]
    command = [interpolated(word) for word in service["command"]]
    port = free_port()
    # The compose network's names and the container's port, as this machine has them.
    command[command.index("--url") + 1] = opensearch_url
    command[command.index("--port") + 1] = str(port)
    environment = {k: interpolated(str(v)) for k, v in service["environment"].items()}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ITLR_")},
        **image_env,
        **environment,
        "PYTHONPATH": str(installed),
        "ITLR_HOME": str(tmp_path / "home"),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import itlr; print(itlr.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(installed)), where.stdout
    assert entrypoint[0] == "itlr"  # the console script: itlr.__main__:main
    run = [sys.executable, "-c", "from itlr.__main__ import main; main()", *entrypoint[1:]]
    log = tmp_path / "proxy.log"
    with log.open("w") as out:
        proxy = subprocess.Popen([*run, *command], env=env, stdout=out, stderr=out)
    token = {"x-itlr-token": environment["ITLR_TOKEN"]}
    try:
        health = first_answer(
            proxy,
            f"http://127.0.0.1:{port}/_itlr/healthz",
            seconds=180,
            headers=token,
            output=lambda: log.read_text()[-3000:],
        )
        assert health.status_code == 200, health.text
        body = {"size": 3, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
        searched = httpx.post(
            f"http://127.0.0.1:{port}/{demo}/_search", json=body, headers=token, timeout=120
        )
        assert searched.status_code == 200, searched.text[:300]
        assert searched.json()["hits"]["hits"]
        refused = httpx.get(f"http://127.0.0.1:{port}/_itlr/healthz")
        assert refused.status_code == 401
    finally:
        proxy.terminate()
        proxy.wait(30)
    said = log.read_text()
    assert "docker-compose.yml's public default" in said, said[-2000:]
