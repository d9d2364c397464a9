"""A user's folder that holds a `manifest.json` (issue 56, item 1): itlr took it for an index of
its first format and migrated it, deleting the user's `manifest.json` and `docs.jsonl` and
writing `index.db` / `write.lock` beside them (a `KeyError` traceback for `{"tool":"other"}`).
Now only a folder proved to be format 1's, file by file and line by line, is migrated; any
other is refused in one line, from every entry point and however it is spelled, and not one
byte of it changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.folders import index_path
from itlr.engines.store import VectorStore
from itlr.errors import IndexStateError

runner = CliRunner()
DIMS = 8
FORMAT_1 = {"format": 1, "model": "m", "dims": DIMS, "similarity": "cosine", "count": 2}


def _unit(n: int) -> np.ndarray:
    vectors = np.random.default_rng(0).normal(size=(n, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: b"<folder>" if p.is_dir() else p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def users_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The probe's `u2/`: a tool's own manifest and its documents, in the working directory and
    reachable as `~/u2`; and a `docs.jsonl` to ingest beside it."""
    u2 = tmp_path / "u2"
    u2.mkdir()
    (u2 / "manifest.json").write_text(json.dumps({"tool": "other"}))
    (u2 / "docs.jsonl").write_text(json.dumps({"id": "mine", "text": "my notes"}) + "\n")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "n1", "text": "sleep and memory"}) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return u2


def _spellings(u2: Path) -> list[str]:
    return ["./u2", "u2/", "./u2//", str(u2), str(u2) + "/", "~/u2", "~/u2/", "./x/../u2"]


ENTRY_POINTS = [
    ["search", "sleep", "--index"],
    ["ingest", "in.jsonl", "--index"],
    ["delete", "mine", "--index"],
    ["compact", "--index"],
    ["serve", "--port", "1", "--index"],
]


@pytest.mark.parametrize("command", ENTRY_POINTS, ids=lambda c: c[0])
def test_a_users_manifest_folder_is_refused_in_one_line_by_every_command_however_spelled(
    users_folder: Path, command: list[str]
) -> None:
    (users_folder.parent / "x").mkdir(exist_ok=True)
    before = _snapshot(users_folder)
    for spelling in _spellings(users_folder):
        result = runner.invoke(cli, [*command, spelling])
        assert result.exit_code == 2, (spelling, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        assert "holds a manifest.json that is not an old itlr index's" in lines[0]
        assert _snapshot(users_folder) == before, spelling


def test_a_bare_name_whose_home_folder_holds_a_users_manifest_is_refused(
    users_folder: Path, itlr_home: Path
) -> None:
    indexes = itlr_home / "indexes"
    indexes.mkdir(parents=True, exist_ok=True)
    link = indexes / "u2-users"
    link.symlink_to(users_folder, target_is_directory=True)
    try:
        before = _snapshot(users_folder)
        result = runner.invoke(cli, ["search", "sleep", "--index", "u2-users"])
        assert result.exit_code == 2 and "not an old itlr index's" in result.stderr
        with pytest.raises(IndexStateError, match="not an old itlr index's"):
            itlr.Index.open("u2-users")
        assert _snapshot(users_folder) == before
    finally:
        link.unlink()


def test_the_library_and_the_engine_refuse_a_users_manifest_folder(users_folder: Path) -> None:
    before = _snapshot(users_folder)
    for spelling in _spellings(users_folder)[:6]:
        for create in (True, False):
            with pytest.raises(IndexStateError, match=r"not an old itlr index's \(its manifest"):
                itlr.Index.open(spelling, create=create)
        with pytest.raises(IndexStateError, match="not an old itlr index's"):
            EmbeddedBackend.open_or_create(Path(spelling).expanduser(), "m", DIMS)
        with pytest.raises(IndexStateError, match="not an old itlr index's"):
            EmbeddedBackend.create(Path(spelling).expanduser(), "m", DIMS)
        with pytest.raises(IndexStateError, match="not an old itlr index's"):
            EmbeddedBackend.open(Path(spelling).expanduser())
        with pytest.raises(IndexStateError, match="not an old itlr index's"):
            VectorStore.open(Path(spelling).expanduser())
    assert _snapshot(users_folder) == before


def test_backfill_refuses_an_embedded_folder_without_touching_it(users_folder: Path) -> None:
    before = _snapshot(users_folder)
    result = runner.invoke(cli, ["backfill", "--index", "./u2"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert _snapshot(users_folder) == before


def _format_1(folder: Path, lines: list[str], vectors: int = 2) -> None:
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(FORMAT_1))
    (folder / "vectors.f32").write_bytes(_unit(vectors).tobytes())
    (folder / "docs.jsonl").write_text("".join(line + "\n" for line in lines))


ROWS = [
    json.dumps({"id": "a", "text": "A", "fields": {}}),
    json.dumps({"id": "b", "text": "B", "fields": {"x": 1}}),
]


@pytest.mark.parametrize(
    ("why", "change", "reason"),
    [
        (
            "a user's file beside format 1's files",
            lambda f: (f / "thesis.tex").write_text("\\begin{document}"),
            "it also holds 'thesis.tex'",
        ),
        (
            "a manifest with one more key",
            lambda f: (f / "manifest.json").write_text(json.dumps({**FORMAT_1, "tool": "x"})),
            "keys are not itlr's",
        ),
        (
            "another format number",
            lambda f: (f / "manifest.json").write_text(json.dumps({**FORMAT_1, "format": 2})),
            "is not format 1's",
        ),
        (
            "no vectors",
            lambda f: (f / "vectors.f32").unlink(),
            "it has no vectors.f32",
        ),
        (
            "a manifest that is not JSON",
            lambda f: (f / "manifest.json").write_text("format: 1\n"),
            "is not JSON",
        ),
        (
            "a subfolder",
            lambda f: (f / "photos").mkdir(),
            "it also holds 'photos'",
        ),
    ],
)
def test_a_folder_only_resembling_format_1_is_refused_untouched(
    tmp_path: Path, why: str, change, reason: str
) -> None:
    folder = tmp_path / "look-alike"
    _format_1(folder, ROWS)
    change(folder)
    before = _snapshot(folder)
    with pytest.raises(IndexStateError, match=rf"not an old itlr index's \(.*{reason}"):
        index_path(str(folder))
    with pytest.raises(IndexStateError):
        EmbeddedBackend.open(folder)
    assert _snapshot(folder) == before, why


def test_a_format_1_folder_whose_rows_are_not_itlrs_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "rows"
    _format_1(folder, [ROWS[0], json.dumps({"name": "not a row"}), ROWS[1]])
    before = _snapshot(folder)
    for open_it in (
        lambda: EmbeddedBackend.open(folder),
        lambda: itlr.Index.open(str(folder), create=False),
    ):
        with pytest.raises(IndexStateError, match=r"line 2 of its docs\.jsonl is no itlr row"):
            open_it()
    assert _snapshot(folder) == before


def test_a_proved_format_1_index_still_migrates_and_a_cut_short_migration_resumes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "old"
    _format_1(folder, [*ROWS, '{"id": "c", "te'])
    # What a migration killed before its commit leaves: the new store's empty files.
    VectorStore(folder).close()
    (folder / "write.lock").write_bytes(b"")
    migrated = EmbeddedBackend.open(folder)
    assert migrated.ids() == ["a", "b"]
    assert migrated.get("b") == {"id": "b", "text": "B", "fields": {"x": 1}}
    assert not (folder / "manifest.json").exists() and not (folder / "docs.jsonl").exists()
    assert index_path(str(folder)) == folder
