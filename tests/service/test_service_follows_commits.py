"""A running embedded `itlr serve` sees what another process commits (issue 26, part 2): the
probe's reproduction with real processes, `itlr serve` and `itlr ingest` as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from itlr.resources import data_file
from itlr.service.server import free_port

# The `itlr` command of this checkout, whatever the venv's script points at.
ITLR = [sys.executable, "-c", "from itlr.cli import app; app(prog_name='itlr')"]
NEW_DOCUMENT = {
    "id": "fresh-1",
    "text": "Axolotls regrow whole limbs, spinal cord and parts of the heart after injury.",
    "topic": "regeneration",
}


def itlr(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ITLR, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def served(tmp_path: Path, itlr_home: Path) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    env = {**os.environ, "ITLR_HOME": str(itlr_home), "HF_HUB_OFFLINE": "1"}
    made = itlr("ingest", str(data_file("demo", "corpus.jsonl")), "--index", "svc", env=env)
    assert made.returncode == 0, made.stderr
    port = free_port()
    server = subprocess.Popen(
        [*ITLR, "serve", "--index", "svc", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 180
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"itlr serve did not start: {server.stderr.read()}")
                time.sleep(0.2)
            yield client, env
    finally:
        server.terminate()
        server.wait(30)


def test_a_document_ingested_by_another_process_is_found_by_the_next_request(
    served, tmp_path: Path
) -> None:
    client, env = served
    before = client.get("/healthz").json()
    query = {"query": '"limb regeneration in salamanders"', "k": 3}
    assert "fresh-1" not in [h["id"] for h in client.post("/search", json=query).json()["hits"]]

    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text(json.dumps(NEW_DOCUMENT) + "\n")
    added = itlr("ingest", str(fresh), "--index", "svc", env=env)
    assert added.returncode == 0, added.stderr

    hits = client.post("/search", json=query).json()["hits"]
    assert hits[0]["id"] == "fresh-1"
    after = client.get("/healthz").json()
    assert after["count"] == before["count"] + 1
    assert after["commit"]["committed_rows"] == before["commit"]["committed_rows"] + 1
    # What the CLI finds, the service finds: the same hits, the same scores.
    cli = itlr("search", query["query"], "--index", "svc", "-k", "3", "--json", env=env)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["hits"] == hits


def test_a_deletion_by_another_process_disappears_from_the_next_request(served) -> None:
    client, env = served
    query = {"query": '"vitamin D" AND "calcium absorption"', "k": 1}
    assert client.post("/search", json=query).json()["hits"][0]["id"] == "d001"
    count = client.get("/healthz").json()["count"]

    deleted = itlr("delete", "d001", "--index", "svc", env=env)
    if deleted.returncode == 2 and "No such command" in deleted.stderr:
        pytest.skip("`itlr delete` is not on this branch yet (the lifecycle branch adds it)")
    assert deleted.returncode == 0, deleted.stderr

    assert client.post("/search", json=query).json()["hits"][0]["id"] != "d001"
    assert client.get("/healthz").json()["count"] == count - 1
