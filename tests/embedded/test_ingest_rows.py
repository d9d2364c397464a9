"""Ingestion never drops a good row (issue 56, item 2): a malformed CSV row (an unbalanced
quote, extra cells, a cell over csv's field limit), a damaged `_bulk` action line, a JSON array
element too large, each cost themselves only and are reported with their line; files are read
as streams, in batches, so memory does not grow with the file; `_bulk` updates merge into the
documents the index holds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import itlr
from itlr.changes import Patch, Update
from itlr.cli import app
from itlr.documents import BadLine, DocumentStream, read_documents
from itlr.records import Document

runner = CliRunner()


def rows(found) -> list[str]:
    return [d.id for d in found.documents]


def bad(found) -> dict[int, str]:
    return {b.line: b.reason for b in found.bad_lines}


# -- CSV ---------------------------------------------------------------------------------------


def test_an_unbalanced_quote_costs_its_row_and_the_later_rows_are_kept(tmp_path: Path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text(
        "id,text,year\n"
        "1,first row,2020\n"
        '2,"an unbalanced quote,2021\n'
        "3,third row,2022\n"
        "4,fourth row,2023\n"
    )
    found = read_documents(source)
    assert rows(found) == ["1", "3", "4"]
    assert list(bad(found)) == [3] and "never closed" in bad(found)[3]
    assert found.documents[1].text == "third row" and found.documents[1].fields == {"year": 2022}


def test_an_unbalanced_quote_closed_by_a_later_quote_still_costs_one_row(tmp_path: Path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text(
        "id,text,note\n"
        '1,"opened and never closed,x\n'
        "2,second,y\n"
        '3,"quoted, properly",z\n'
        '4,"a cell\nover two lines",w\n'
    )
    found = read_documents(source)
    assert rows(found) == ["2", "3", "4"]
    assert list(bad(found)) == [2]
    assert found.documents[1].text == "quoted, properly"
    assert found.documents[2].text == "a cell\nover two lines"  # a real multi-line cell


def test_a_row_with_more_cells_than_the_header_is_a_bad_line(tmp_path: Path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text("id,text\n1,one\n2,two,extra,cells\n3,three\n4\n")
    found = read_documents(source)
    assert rows(found) == ["1", "3"]
    assert "4 cells, the header has 2" in bad(found)[3]
    assert "no text" in bad(found)[5]  # a short row: its missing cells are no value


def test_a_cell_over_the_csv_field_limit_is_a_bad_line_not_a_crash(
    tmp_path: Path, monkeypatch
) -> None:
    source = tmp_path / "docs.csv"
    big = "x" * 200_000  # over csv's default field limit (131,072), under max_document_bytes
    huge = "y" * 1_100_000  # over max_document_bytes (1 MiB)
    source.write_text(f'id,text\n1,{big}\n2,{huge}\n3,"{huge}"\n4,fine\n')
    found = read_documents(source)
    assert rows(found) == ["1", "4"]
    assert len(found.documents[0].text) == 200_000
    assert sorted(bad(found)) == [3, 4]
    assert all("max_document_bytes" in reason for reason in bad(found).values())


def test_a_quote_where_a_comma_belongs_is_a_bad_line(tmp_path: Path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text('id,text\n1,"quoted"then more\n2,five\n3,5" screen\n')
    found = read_documents(source)
    assert rows(found) == ["2", "3"]  # a quote inside an unquoted cell is a character
    assert "malformed row" in bad(found)[2]
    assert found.documents[1].text == '5" screen'


def test_the_cli_lists_malformed_csv_rows_and_ingests_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text(
        'id,text\n1,vitamin D\n2,"unbalanced\n3,two,cells too many\n4,bone health\n5,"x""y"\n'
    )
    result = runner.invoke(app, ["ingest", str(source), "--index", str(tmp_path / "idx")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"{source}:3:" in result.stderr and f"{source}:4:" in result.stderr
    assert "added 3, updated 0, unchanged 0, deleted 0" in result.stdout
    assert "2 bad lines" in result.stdout
    index = itlr.Index.open(str(tmp_path / "idx"), create=False)
    assert sorted(index.backend.ids()) == ["1", "4", "5"]
    assert index.backend.get("5")["text"] == 'x"y'


# -- _bulk and JSON arrays ---------------------------------------------------------------------


def test_a_damaged_first_action_line_costs_its_document_only(tmp_path: Path) -> None:
    source = tmp_path / "export.ndjson"
    lines = [
        '{"index": {"_id": "1"',  # damaged
        json.dumps({"text": "first, whose id is lost"}),
        json.dumps({"index": {"_id": "2"}}),
        json.dumps({"text": "second"}),
        json.dumps({"create": {"_id": "3"}}),
        json.dumps({"text": "third"}),
    ]
    source.write_text("\n".join(lines) + "\n")
    found = read_documents(source)
    assert rows(found) == ["2", "3"]
    assert sorted(bad(found)) == [1, 2]
    assert "action line 1 is damaged" in bad(found)[2]


def test_an_action_without_its_document_costs_itself_only(tmp_path: Path) -> None:
    source = tmp_path / "export.ndjson"
    lines = [
        {"index": {"_id": "1"}},
        {"index": {"_id": "2"}},
        {"text": "second"},
        {"index": {"_id": "3"}},
        {"text": "third"},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = read_documents(source)
    assert rows(found) == ["2", "3"]
    assert list(bad(found)) == [1] and "not followed by a document" in bad(found)[1]


def test_a_json_array_element_too_large_or_an_unclosed_array_costs_itself(tmp_path: Path) -> None:
    source = tmp_path / "docs.json"
    elements = [
        json.dumps({"id": "a", "text": "brackets ] and , in [ text {"}),
        json.dumps({"id": "huge", "text": "z" * 1_200_000}),
        json.dumps({"id": "b", "text": "after the huge one"}),
    ]
    source.write_text("[\n" + ",\n".join(elements) + ",\n" + '{"id": "c", "text": "cut')
    found = read_documents(source)
    assert rows(found) == ["a", "b"]
    assert "max_document_bytes" in bad(found)[3]
    assert "not closed" in bad(found)[5]
    assert found.documents[0].text == "brackets ] and , in [ text {"


# -- streaming ---------------------------------------------------------------------------------


def test_a_file_is_read_as_a_stream_not_held_whole(tmp_path: Path) -> None:
    for suffix, write in (
        (".jsonl", lambda i: json.dumps({"id": i, "text": f"document {i} " * 20}) + "\n"),
        (".csv", lambda i: f"{i},document {i}\n"),
    ):
        source = tmp_path / f"big{suffix}"
        with open(source, "w") as handle:
            handle.write("id,text\n" if suffix == ".csv" else "")
            for i in range(60_000):
                handle.write(write(i))
        stream = DocumentStream(source)
        entries = iter(stream)
        first = next(entries)
        assert isinstance(first, Document) and first.id == "0"
        # One buffer's worth read, not the file (several MB).
        assert 0 < stream.position < stream.size / 4, (suffix, stream.position, stream.size)
        assert sum(1 for _ in entries) == 59_999
        assert stream.duplicates == 0


def test_ingestion_writes_batches_while_the_input_is_still_being_read(
    tmp_path: Path, embedder
) -> None:
    index = itlr.Index.open(str(tmp_path / "idx"))
    seen_while_reading: list[int] = []

    def documents():
        for i in range(12):
            if i == 10:
                seen_while_reading.append(index.backend.count())
            yield Document(f"d{i}", f"text number {i}")

    report = index.add(documents(), batch_size=3)
    assert report.added == 12
    assert seen_while_reading[0] >= 6  # the first batches were written before the tenth was read


def test_bulk_updates_merge_into_the_stored_documents_and_deletes_apply_in_order(
    tmp_path: Path, embedder
) -> None:
    first = tmp_path / "first.ndjson"
    first.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in (
                {"index": {"_id": "1"}},
                {"text": "vitamin D from sunlight", "year": 2021, "topic": "sun"},
                {"index": {"_id": "2"}},
                {"text": "bone health", "year": 2020},
            )
        )
    )
    second = tmp_path / "second.ndjson"
    second.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in (
                {"update": {"_id": "1"}},
                {"doc": {"year": 2022}},  # a patch: fields only
                {"update": {"_id": "2"}},
                {"doc": {"text": "bone health and calcium"}},  # an update with a text
                {"update": {"_id": "missing"}},
                {"doc": {"year": 1}},
                {"delete": {"_id": "2"}},
                {"index": {"_id": "2"}},
                {"text": "back again", "year": 1999},
            )
        )
    )
    index_dir = str(tmp_path / "idx")
    assert runner.invoke(app, ["ingest", str(first), "--index", index_dir]).exit_code == 0
    result = runner.invoke(app, ["ingest", str(second), "--index", index_dir, "--batch-size", "2"])
    assert result.exit_code == 1, result.output  # the update of a missing document failed
    assert "missing: an update without a text" in result.stderr
    index = itlr.Index.open(index_dir, create=False)
    assert index.backend.get("1") == {
        "id": "1",
        "text": "vitamin D from sunlight",
        "fields": {"year": 2022, "topic": "sun"},
    }
    assert index.backend.get("2") == {"id": "2", "text": "back again", "fields": {"year": 1999}}


def test_a_stream_gives_updates_and_patches_for_the_index_to_merge(tmp_path: Path) -> None:
    source = tmp_path / "export.ndjson"
    source.write_text(
        json.dumps({"update": {"_id": "u"}})
        + "\n"
        + json.dumps({"doc": {"text": "new text"}})
        + "\n"
        + json.dumps({"update": {"_id": "p"}})
        + "\n"
        + json.dumps({"doc": {"tag": "x"}})
        + "\n"
    )
    entries = list(DocumentStream(source))
    assert isinstance(entries[0], Update) and entries[0].document.text == "new text"
    assert isinstance(entries[1], Patch) and entries[1].fields == {"tag": "x"}
    assert not any(isinstance(e, BadLine) for e in entries)


def test_an_id_over_512_bytes_is_stored_by_the_embedded_engine(tmp_path: Path, embedder) -> None:
    index = itlr.Index.open(str(tmp_path / "idx"))
    long_id = "é" * 400  # 800 bytes
    report = index.add([{"id": long_id, "text": "long id"}, {"id": "short", "text": "short"}])
    assert (report.added, report.failed) == (2, {})
    assert index.backend.get(long_id)["text"] == "long id"


def test_index_add_takes_a_stream_warning_of_its_bad_lines(tmp_path: Path, embedder) -> None:
    import pytest

    source = tmp_path / "docs.csv"
    source.write_text('id,text,lang\n1,vitamin D,en\n2,"unbalanced,en\n3,bone health,en\n')
    index = itlr.Index.open(str(tmp_path / "idx"))
    with pytest.warns(UserWarning, match=r"docs\.csv:3: a quoted cell opened here"):
        report = index.add(DocumentStream(source))
    assert report.added == 2 and sorted(index.backend.ids()) == ["1", "3"]
    patch = tmp_path / "patch.csv"
    patch.write_text("id,lang\n1,de\n")
    report = index.add(DocumentStream(patch, merge=True))
    assert (report.updated, report.added) == (1, 0)
    assert index.backend.get("1") == {"id": "1", "text": "vitamin D", "fields": {"lang": "de"}}


def test_a_streams_repeated_ids_are_counted_in_8_bytes_each(tmp_path: Path) -> None:
    from itlr.seen_ids import SeenIds

    seen = SeenIds()
    seen._MERGE_EVERY = 1000  # the merged array and the recent set both answer
    found = [seen.add(f"id-{i % 2500}") for i in range(10_000)]
    assert found.count(True) == 7_500 and not any(found[:2500])
    source = tmp_path / "docs.csv"
    source.write_text("id,text\n" + "".join(f"{i % 700},text {i}\n" for i in range(1000)))
    stream = DocumentStream(source)
    assert sum(1 for _ in stream) == 1000 and stream.duplicates == 300
