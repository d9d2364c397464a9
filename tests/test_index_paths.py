"""Index names vs folders (issue 26, part 7): a bare name always means the index home; only a
name with a slash or a leading `.` is a folder, and a folder of someone else's files is refused
before anything is written into it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.errors import IndexStateError
from itlr.paths import index_path

runner = CliRunner()
DOCS = [{"id": "n1", "text": "Notes on sleep and memory consolidation."}]


@pytest.fixture
def in_folder_with_notes(tmp_path: Path, monkeypatch) -> Path:
    """A working directory holding the user's own `notes/` folder."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("buy milk\n")
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    monkeypatch.chdir(tmp_path)
    return notes


def test_the_probes_ingest_into_notes_goes_to_the_index_home_not_the_folder(
    in_folder_with_notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A home of its own: other tests of the session may have an index called notes.
    itlr_home = tmp_path / "home"
    monkeypatch.setenv("ITLR_HOME", str(itlr_home))
    result = runner.invoke(cli, ["ingest", "docs.jsonl", "--index", "notes"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in in_folder_with_notes.iterdir()) == ["todo.txt"]
    assert (itlr_home / "indexes" / "notes" / "index.db").exists()
    assert itlr.Index.open("notes", create=False).count() == 1


def test_a_folder_path_that_is_not_an_index_is_refused_in_one_line(
    in_folder_with_notes: Path,
) -> None:
    result = runner.invoke(cli, ["ingest", "docs.jsonl", "--index", "./notes"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "./notes is a folder that is not an itlr index (it holds 'todo.txt')" in lines[0]
    assert sorted(p.name for p in in_folder_with_notes.iterdir()) == ["todo.txt"]
    with pytest.raises(IndexStateError, match="not an itlr index"):
        itlr.Index.open(str(in_folder_with_notes))


def test_a_new_or_empty_folder_path_becomes_an_index_and_opens_again(
    in_folder_with_notes: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    for name in ("./fresh", "./empty", str(tmp_path / "absolute")):
        result = runner.invoke(cli, ["ingest", "docs.jsonl", "--index", name])
        assert result.exit_code == 0, result.output
        assert (Path(name) / "index.db").exists()
        assert itlr.Index.open(name, create=False).count() == 1  # its own files are fine


@pytest.mark.parametrize(
    ("name", "home_relative"),
    [("notes", "indexes/notes"), ("notes.v2", "indexes/notes.v2"), ("demo", "indexes/demo")],
)
def test_a_bare_name_is_always_under_the_index_home(
    in_folder_with_notes: Path, itlr_home: Path, name: str, home_relative: str
) -> None:
    assert index_path(name) == itlr_home / home_relative


def test_a_file_is_not_an_index_folder(in_folder_with_notes: Path) -> None:
    with pytest.raises(IndexStateError, match="is a file, not an index folder"):
        index_path("./docs.jsonl")
