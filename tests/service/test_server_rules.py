"""One way to start each server, under one set of rules (issue 57.4): `python -m itlr.cli.proxy`
is `itlr serve --proxy` (before, it skipped the token rules: on 0.0.0.0 an empty token passed
and a 1-character one was accepted; its `--help` printed a RuntimeWarning); both servers refuse
a short, empty or blank-edged token and a public address without one, in the same line; and a
server on loopback without a token answers only requests whose Host names loopback (a web page
re-pointed at 127.0.0.1 by DNS rebinding was answered before), on every route."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from itlr.service.server import free_port
from served_process import first_answer

TOKEN = "a-client-token-of-32-characters!"
PROXY_FORMS = {
    "module": [sys.executable, "-m", "itlr.cli.proxy"],
    "serve": [sys.executable, "-c", "from itlr.__main__ import main; main()", "serve", "--proxy"],
}


def run(command: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ITLR_TOKEN"}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, env={**clean, **env}
    )


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--host", "0.0.0.0"], {}, "exposes the cluster credentials"),
        (["--host", "0.0.0.0", "--token", ""], {}, "exposes the cluster credentials"),
        (["--host", "0.0.0.0"], {"ITLR_TOKEN": ""}, "exposes the cluster credentials"),
        (["--host", "0.0.0.0", "--token", "x"], {}, "at least 16"),
        (["--token", "x"], {}, "at least 16"),
        (["--token", f" {TOKEN} "], {}, "surrounding spaces"),
    ],
    ids=["no-token", "empty-token", "empty-env-token", "short-public", "short-loopback", "spaces"],
)
def test_both_ways_to_start_the_proxy_refuse_alike(args, env, said) -> None:
    answers = [
        run(form, "--url", "http://127.0.0.1:1", *args, **env) for form in PROXY_FORMS.values()
    ]
    for answer in answers:
        assert answer.returncode == 2, answer.stderr
        assert said in answer.stderr and "Traceback" not in answer.stderr
    assert answers[0].stderr == answers[1].stderr


def test_the_proxy_modules_help_is_serves_without_a_warning() -> None:
    module, serve = (run(form, "--help") for form in PROXY_FORMS.values())
    assert module.returncode == 0 and module.stderr == "", module.stderr
    assert "RuntimeWarning" not in module.stderr + module.stdout
    assert module.stdout == serve.stdout


@contextmanager
def started(command: list[str], port: int, path: str, **env: str) -> Iterator[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ITLR_TOKEN"}
    server = subprocess.Popen(
        command, env={**clean, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        first_answer(server, base + path, seconds=180, headers={"x-itlr-token": TOKEN})
        yield base
    finally:
        server.terminate()
        server.wait(30)


def host(base: str, path: str, name: str, **headers: str) -> httpx.Response:
    port = base.rsplit(":", 1)[1]
    return httpx.get(base + path, headers={"host": f"{name}:{port}", **headers}, timeout=60)


def test_itlr_serve_on_loopback_answers_loopback_host_names_only(embedded) -> None:
    port = free_port()
    command = [*PROXY_FORMS["serve"][:3], "serve", "--index", str(embedded.path)]
    command += ["--port", str(port), "--log-level", "warning"]
    with started(command, port, "/healthz") as base:
        for path in ("/healthz", "/docs", "/openapi.json", "/no-such-route"):
            refused = host(base, path, "rebound.example")
            assert refused.status_code == 403, (path, refused.text[:200])
            assert "localhost or 127.0.0.1" in refused.json()["error"]
        for name in ("127.0.0.1", "localhost", "LOCALHOST"):
            assert host(base, "/healthz", name).status_code == 200, name
    port = free_port()
    command[command.index("--port") + 1] = str(port)
    with started(command, port, "/healthz", ITLR_TOKEN=TOKEN) as base:
        # With a token, the token is the rule: any Host name, the token required.
        assert host(base, "/healthz", "rebound.example").status_code == 401
        token = {"x-itlr-token": TOKEN}
        assert host(base, "/healthz", "proxy.internal", **token).status_code == 200


@pytest.mark.opensearch
@pytest.mark.parametrize("form", PROXY_FORMS, ids=PROXY_FORMS.keys())
def test_the_proxy_on_loopback_answers_loopback_host_names_only(opensearch_url, form) -> None:
    port = free_port()
    command = [*PROXY_FORMS[form], "--url", opensearch_url, "--port", str(port)]
    with started(command, port, "/_itlr/healthz") as base:
        for path in ("/_itlr/healthz", "/_itlr/metrics", "/", "/_cat/indices"):
            refused = host(base, path, "rebound.example")
            assert refused.status_code == 403, (path, refused.text[:200])
            assert refused.json()["error"]["type"] == "itlr_forbidden"
        assert host(base, "/", "127.0.0.1").status_code == 200
        assert host(base, "/", "[::1]").status_code == 200
