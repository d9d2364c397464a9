"""On a cluster, a document the engine refuses costs itself only (issue 56, item 2): an id
over 512 bytes made OpenSearch refuse its whole `_bulk` request, and every document of the
batch was reported failed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foreign_index import all_sources, delete_index
from itlr.cli import app

pytestmark = pytest.mark.opensearch


def test_an_id_over_512_bytes_fails_alone_and_its_batch_is_written(
    opensearch_url: str, tmp_path: Path
) -> None:
    name = f"itlr-refusals-{uuid.uuid4().hex[:8]}"
    long_id = "ü" * 300  # 600 bytes
    docs = [{"id": f"d{i}", "text": f"a short note number {i} about sleep"} for i in range(10)]
    docs.insert(4, {"id": long_id, "text": "a document whose id is too long"})
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs))
    try:
        result = CliRunner().invoke(
            app, ["ingest", str(source), "--url", opensearch_url, "--index", name]
        )
        assert result.exit_code == 1, result.output
        assert "added 10, updated 0, unchanged 0" in result.stdout
        assert "failed 1" in result.stdout
        failures = [line for line in result.stderr.splitlines() if "failed" in line]
        assert len(failures) == 1 and "512" in failures[0]
        assert set(all_sources(opensearch_url, name)) == {f"d{i}" for i in range(10)}
    finally:
        delete_index(opensearch_url, name)
