"""Input formats for ingestion scripts (_bulk NDJSON, JSON array, JSONL, CSV), field choice,
typed CSV, and the per-line refusals of bad input (issue 22 part 4, issue 26 part 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from itlr.documents import parse_types, read_documents
from itlr.errors import ConfigurationError
from itlr.index import Index
from test_crash import itlr


def lines(path: Path, *records: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_bulk_ndjson_takes_ids_from_action_lines_with_update_and_delete(tmp_path) -> None:
    source = lines(
        tmp_path / "export.ndjson",
        {"index": {"_index": "articles", "_id": "1"}},
        {"title": "Sun", "body": "vitamin D from sunlight", "year": 2021},
        {"create": {"_id": 2}},
        {"text": "bone health", "year": 2020},
        {"update": {"_id": "1"}},
        {"doc": {"year": 2022}},
        {"index": {"_id": "3"}},
        {"text": "to be deleted"},
        {"delete": {"_id": "3"}},
        {"delete": {"_id": "elsewhere"}},
    )
    found = read_documents(source)
    assert found.bad_lines == []
    by_id = {d.id: d for d in found.documents}
    assert by_id["1"].text == "vitamin D from sunlight"  # stored unchanged: no title prepended
    assert by_id["1"].fields == {"title": "Sun", "year": 2022}
    assert by_id["2"].fields == {"year": 2020}
    assert set(by_id) == {"1", "2"}
    assert found.deletions == ["3", "elsewhere"]


def test_bulk_action_without_id_is_a_bad_line_and_the_rest_is_kept(tmp_path) -> None:
    source = lines(
        tmp_path / "export.ndjson",
        {"index": {}},
        {"text": "no id here"},
        {"index": {"_id": "ok"}},
        {"text": "fine"},
    )
    found = read_documents(source)
    assert [d.id for d in found.documents] == ["ok"]
    assert [b.line for b in found.bad_lines] == [1]
    assert "_id" in found.bad_lines[0].reason


def test_json_array_file_with_a_bad_element(tmp_path) -> None:
    source = tmp_path / "docs.json"
    source.write_text(
        json.dumps(
            [{"id": 1, "text": "a, [b] {c}"}, {"id": 2}, {"id": 3, "text": "three"}], indent=1
        )
    )
    found = read_documents(source)
    assert [d.id for d in found.documents] == ["1", "3"]
    assert found.documents[0].text == "a, [b] {c}"
    assert len(found.bad_lines) == 1 and "no text" in found.bad_lines[0].reason


def test_id_and_text_fields_choose_the_input_fields(tmp_path) -> None:
    source = lines(
        tmp_path / "docs.jsonl",
        {"uid": "x1", "id": "ignored", "abstract": "the abstract", "text": "the full text"},
    )
    found = read_documents(source, id_field="uid", text_field="abstract")
    (document,) = found.documents
    assert (document.id, document.text) == ("x1", "the abstract")
    assert document.fields == {"id": "ignored", "text": "the full text"}


def test_csv_columns_are_typed_when_every_cell_parses_or_as_told(tmp_path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text(
        "id,text,year,score,open,code\n1,one,2021,1.5,true,007\n2,two,,2,FALSE,x\n3,three,2019,3,true,9\n"
    )
    found = read_documents(source)
    fields = {d.id: d.fields for d in found.documents}
    assert fields["1"] == {"year": 2021, "score": 1.5, "open": True, "code": "007"}
    assert fields["2"] == {"score": 2.0, "open": False, "code": "x"}  # empty cell: no value
    forced = read_documents(source, types=parse_types(["code=int"]))
    assert [d.id for d in forced.documents] == ["1", "3"]
    assert "column 'code' is int" in forced.bad_lines[0].reason
    with pytest.raises(ConfigurationError, match="COLUMN=TYPE"):
        parse_types(["year=date"])


def test_bad_lines_are_refused_one_by_one_and_good_lines_kept(tmp_path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    nested = '{"id": "deepfield", "text": "t", "f": ' + "[" * 900 + "]" * 900 + "}"
    source = lines(
        tmp_path / "docs.jsonl",
        deep,
        nested,
        '{"id": "nan", "text": "t", "x": NaN}',
        '{"id": "inf", "text": "t", "x": -Infinity}',
        '{"id": "big", "text": "t", "x": 1e999}',
        {"id": "empty", "text": ""},
        {"id": "blank", "text": " \t\n"},
        {"id": "good", "text": "a good document", "x": {"a": [1, 2]}},
    )
    found = read_documents(source)
    assert [d.id for d in found.documents] == ["good"]
    reasons = [b.reason for b in found.bad_lines]
    assert len(reasons) == 7
    assert all("nested deeper than 32" in r for r in reasons[:2])
    assert all("JSON cannot carry" in r for r in reasons[2:5])
    assert all("empty text" in r for r in reasons[5:])


def test_index_add_refuses_deep_non_finite_and_empty_documents(tmp_path) -> None:
    index = Index.open(tmp_path / "idx")
    deep: dict = {}
    cursor = deep
    for _ in range(100):
        cursor["x"] = {}
        cursor = cursor["x"]
    for record, message in (
        ({"id": "a", "text": "t", "f": deep}, "nested deeper"),
        ({"id": "a", "text": "t", "f": float("nan")}, "JSON cannot carry"),
        ({"id": "a", "text": "  "}, "empty text"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            index.add([record])
    assert index.count() == 0


def test_cli_ingests_a_bulk_export_and_an_all_bad_file_creates_nothing(tmp_path) -> None:
    export = lines(
        tmp_path / "export.ndjson",
        {"index": {"_id": "1"}},
        {"body": "vitamin D from sunlight", "year": 2021},
        {"index": {"_id": "2"}},
        {"body": "bone health", "year": 2020},
    )
    index_dir = tmp_path / "idx"
    run = itlr("ingest", str(export), "--index", str(index_dir))
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "added 2, updated 0, unchanged 0" in stdout
    bad = lines(tmp_path / "bad.jsonl", {"id": "x", "text": ""}, "[" * 50_000 + "]" * 50_000)
    empty_dir = tmp_path / "never"
    run = itlr("ingest", str(bad), "--index", str(empty_dir))
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 2, stderr
    assert "Traceback" not in stderr and "no index was created" in stderr
    assert not empty_dir.exists()


def test_cli_text_field_and_types_options(tmp_path) -> None:
    source = tmp_path / "docs.csv"
    source.write_text("key,abstract,year\nk1,sunlight and vitamin D,2021\nk2,coffee,x\n")
    index_dir = tmp_path / "idx"
    run = itlr(
        "ingest", str(source), "--index", str(index_dir), "--id-field", "key",
        "--text-field", "abstract", "--types", "year=str",
    )  # fmt: skip
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "added 2" in stdout
    index = Index.open(index_dir)
    assert index.backend.get("k1") == {
        "id": "k1", "text": "sunlight and vitamin D", "fields": {"year": "2021"},
    }  # fmt: skip
