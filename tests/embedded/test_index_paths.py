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
from itlr.engines.folders import index_path
from itlr.errors import IndexStateError

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


# -- issue 42, item 1: however the path is spelled, the folder written is the folder checked --


@pytest.fixture
def users_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The probe's `proj/`: a SQLite `index.db` of the user's own and a `vectors.f32` of theirs,
    the very names an itlr index uses."""
    import sqlite3

    proj = tmp_path / "proj"
    proj.mkdir()
    with sqlite3.connect(proj / "index.db") as db:
        db.execute("CREATE TABLE invoices (n INTEGER, amount REAL)")
        db.executemany("INSERT INTO invoices VALUES (?, ?)", [(n, n * 1.5) for n in range(1000)])
    db.close()
    (proj / "vectors.f32").write_bytes(b"\x01" * 100_000)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "x").mkdir()
    (tmp_path / "link").symlink_to(proj, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return proj


def _untouched(proj: Path) -> None:
    import sqlite3

    assert sorted(p.name for p in proj.iterdir()) == ["index.db", "vectors.f32"]
    assert (proj / "vectors.f32").read_bytes() == b"\x01" * 100_000
    with sqlite3.connect(f"{(proj / 'index.db').as_uri()}?mode=ro", uri=True) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master")]
        assert tables == ["invoices"]
        assert db.execute("SELECT count(*) FROM invoices").fetchone() == (1000,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    db.close()


SPELLINGS = ["./proj", "x/../proj", "proj/", "./proj//", "link", "./link/", "x/../link/."]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_users_folder_is_refused_however_the_path_is_spelled_cli(
    users_project: Path, spelling: str
) -> None:
    name = spelling if spelling.startswith((".", "x")) or "/" in spelling else f"./{spelling}"
    result = runner.invoke(cli, ["ingest", "docs.jsonl", "--index", name])
    assert result.exit_code == 2, result.output
    assert "is a folder that is not an itlr index" in result.stderr
    assert "Traceback" not in result.output
    _untouched(users_project)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_users_folder_is_refused_however_the_path_is_spelled_library(
    users_project: Path, spelling: str
) -> None:
    for name in (spelling, users_project.parent / spelling):
        with pytest.raises(IndexStateError, match="not an itlr index"):
            itlr.Index.open(f"./{name}" if spelling in ("link",) and name == spelling else name)
    _untouched(users_project)


def test_the_service_refuses_a_users_folder_however_spelled(users_project: Path) -> None:
    for spelling in ("x/../proj", "./link/"):
        result = runner.invoke(cli, ["serve", "--index", spelling, "--port", "1"])
        assert result.exit_code == 2, result.output
        assert "is a folder that is not an itlr index" in result.stderr
    _untouched(users_project)


def test_a_file_is_refused_however_the_path_is_spelled(users_project: Path) -> None:
    (users_project.parent / "file-link").symlink_to(users_project.parent / "docs.jsonl")
    for spelling in ("./docs.jsonl", "x/../docs.jsonl", "./file-link", "./proj/index.db"):
        with pytest.raises(IndexStateError, match="is a file, not an index folder"):
            index_path(spelling)
    for spelling in ("./docs.jsonl/sub", "./proj/index.db/x/y"):
        with pytest.raises(IndexStateError, match="a file: give a folder path"):
            index_path(spelling)
    _untouched(users_project)


def test_a_bare_name_linked_to_a_users_folder_is_refused(
    users_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"  # its own: the run's shared home may hold `notes` already
    monkeypatch.setenv("ITLR_HOME", str(home))
    (home / "indexes").mkdir(parents=True)
    (home / "indexes" / "notes").symlink_to(users_project, target_is_directory=True)
    with pytest.raises(IndexStateError, match="not an itlr index"):
        itlr.Index.open("notes")
    _untouched(users_project)


def test_only_itlrs_own_empty_leftovers_count_as_a_cut_short_index(tmp_path: Path) -> None:
    from itlr.engines.store import VectorStore

    cut_short = tmp_path / "cut"
    cut_short.mkdir()
    for name in ("index.db", "write.lock", "vectors.f32"):
        (cut_short / name).write_bytes(b"")
    assert index_path(str(cut_short)) == cut_short
    VectorStore(cut_short).close()  # the schema written, killed before the first commit
    assert index_path(str(cut_short)) == cut_short

    (cut_short / "vectors.f32").write_bytes(b"\x00" * 16)
    with pytest.raises(IndexStateError, match=r"holds 'vectors\.f32'"):
        index_path(str(cut_short))


def test_an_index_reached_by_another_spelling_opens_as_itself(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "x").mkdir()
    assert runner.invoke(cli, ["ingest", "docs.jsonl", "--index", "./made"]).exit_code == 0
    (tmp_path / "made-link").symlink_to(tmp_path / "made", target_is_directory=True)
    for spelling in ("x/../made", "./made/", "./made-link"):
        assert itlr.Index.open(spelling, create=False).count() == 1


def test_the_engine_itself_refuses_a_users_folder(users_project: Path) -> None:
    from itlr.engines.embedded import EmbeddedBackend

    for spelling in ("x/../proj", "link/", str(users_project)):
        with pytest.raises(IndexStateError, match="not an itlr index"):
            EmbeddedBackend.create(spelling, "test-model", 8)
        with pytest.raises(IndexStateError, match="not an itlr index"):
            EmbeddedBackend.open_or_create(spelling, "test-model", 8)
    _untouched(users_project)
