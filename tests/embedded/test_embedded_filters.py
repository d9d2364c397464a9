"""The embedded engine's search options: validated filters (one line per mistake), range on
numbers and ISO dates, CSV / JSON values compared alike, unknown-field warnings, from_,
source_fields and highlights (issue 22 part 5, issue 26 part 3)."""

from __future__ import annotations

import json

import pytest

from itlr.engines.filters import compile_filter, filter_rows
from itlr.engines.store import StoredRow
from itlr.errors import ConfigurationError
from itlr.index import Index
from itlr.limits import LimitError
from test_crash import itlr

DOCS = [
    {"id": "1", "text": "Vitamin D comes from sunlight. Bones need it.", "year": 2019,
     "day": "2019-03-01", "topic": "health"},
    {"id": "2", "text": "Espresso is brewed under pressure.", "year": 2021,
     "day": "2021-06-15T10:00:00Z", "topic": "coffee"},
    {"id": "3", "text": "Vitamin D supplements in winter.", "year": 2023,
     "day": "2023-01-20", "topic": "health"},
]  # fmt: skip


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    opened = Index.open(tmp_path_factory.mktemp("filters") / "idx")
    opened.add(DOCS)
    return opened


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"term": {}}, "term names exactly one field, got 0 fields"),
        ({"term": "x"}, "term names exactly one field, got 'x'"),
        ({"terms": {"topic": [[1]]}}, "compares with strings, numbers or booleans"),
        ({"term": {"a": 1, "b": 2}}, "got 2 fields"),
        ({"range": {"year": {"from": 1}}}, "range on 'year' takes some of gt, gte, lt, lte"),
        ({"range": {"year": {"gte": "soon"}}}, "a number or an ISO date"),
        ({"match": {"text": "x"}}, "not 'match'"),
        ({"bool": {"must": [{"term": {"a": 1}}], "nope": []}}, "bool takes some of"),
        ("x", "each clause is an object with one key"),
    ],
)
def test_malformed_filters_are_one_line_errors(spec, message) -> None:
    with pytest.raises(ConfigurationError, match="bad filter") as caught:
        compile_filter(spec)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_bool_deeper_than_the_limit_is_refused_without_recursing() -> None:
    spec: dict = {"term": {"a": 1}}
    for _ in range(400):
        spec = {"bool": {"must": [spec]}}
    with pytest.raises(ConfigurationError, match="deeper than 32"):
        compile_filter(spec)


def ids(result) -> list[str]:
    return sorted(h.id for h in result.hits)


def test_range_on_numbers_and_iso_dates(index) -> None:
    search = lambda f: index.search('"vitamin D"', k=10, filter=f)  # noqa: E731
    assert ids(search({"range": {"year": {"gte": 2021}}})) == ["2", "3"]
    assert ids(search({"range": {"year": {"gt": 2019, "lt": 2023}}})) == ["2"]
    assert ids(search({"range": {"day": {"lte": "2021-06-15T10:00:00Z"}}})) == ["1", "2"]
    assert ids(search({"range": {"day": {"gt": "2021-06-15"}}})) == ["2", "3"]
    both = {"bool": {"filter": [{"term": {"topic": "health"}}, {"range": {"year": {"lt": 2020}}}]}}
    assert ids(search(both)) == ["1"]


def test_term_matches_a_year_from_csv_and_from_jsonl_alike(tmp_path) -> None:
    csv_file = tmp_path / "docs.csv"
    csv_file.write_text("id,text,year\nc1,vitamin D in winter,2021\n")
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"id": "j1", "text": "vitamin D in summer", "year": 2021}) + "\n")
    legacy = Index.open(tmp_path / "idx")
    for source in (csv_file, jsonl):
        run = itlr("ingest", str(source), "--index", str(tmp_path / "idx"))
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    # An index written before typed CSV holds the year as text: it still matches.
    legacy.add([{"id": "s1", "text": "vitamin D tablets", "year": "2021"}])
    for wanted in (2021, "2021", {"value": 2021}):
        assert ids(legacy.search('"vitamin D"', k=10, filter={"term": {"year": wanted}})) == [
            "c1", "j1", "s1",
        ]  # fmt: skip


def test_a_filter_on_a_field_no_document_has_warns(index) -> None:
    result = index.search('"vitamin D"', filter={"term": {"yeer": 2021}})
    assert result.hits == []
    assert any("'yeer' is in no document" in w for w in result.warnings)
    assert not index.search('"vitamin D"', filter={"term": {"year": 2021}}).warnings


def test_filtering_the_stored_rows_keeps_the_matching_live_rows_and_names_unknown_fields() -> None:
    """The embedded backend filters its rows through itlr.engines.filters (the filter language's
    own module): live rows kept in order, one warning per field no document has, and a filter
    refused before a row is read when its work is over the limit."""
    stored = [StoredRow(d["id"], d["text"], {"year": d["year"]}) for d in DOCS]
    stored.insert(1, None)  # a deleted row: not live, so never asked
    spec = {"bool": {"filter": [{"range": {"year": {"gte": 2020}}}, {"term": {"colour": "red"}}]}}
    kept, notes = filter_rows(
        {"range": {"year": {"gte": 2020}}}, [0, 2, 3], stored, lambda: {"year"}, "here"
    )
    assert kept == [2, 3] and notes == []
    kept, notes = filter_rows(spec, [0, 2, 3], stored, lambda: {"year"}, "here")
    assert kept == [] and len(notes) == 1
    assert "filter field 'colour' is in no document of index at here" in notes[0]
    never_read: list[StoredRow | None] = []  # indexing it would fail: nothing is read
    with pytest.raises(LimitError, match="max_filter_work"):
        filter_rows(spec, range(10**9), never_read, set, "here")


def test_from_pages_through_the_ranking(index) -> None:
    everything = [h.id for h in index.search('"vitamin D"', k=3, mode="exact").hits]
    page = [h.id for h in index.search('"vitamin D"', k=2, from_=1, mode="exact").hits]
    assert page == everything[1:3]
    assert index.search('"vitamin D"', k=2, from_=3).hits == []


def test_source_fields_choose_the_returned_fields(index) -> None:
    hit = index.search('"espresso"', k=1, source_fields=["year", "metadata.topic"]).hits[0]
    assert hit.fields == {"year": 2021, "topic": "coffee"}
    assert index.search('"espresso"', k=1, source_fields=[]).hits[0].fields == {}


def test_highlight_marks_the_positive_terms_words_in_matching_sentences(index) -> None:
    hits = index.search('"vitamin D" AND NOT "winter"', k=3, highlight=True).hits
    first = next(h for h in hits if h.id == "1")
    assert first.highlights == {"text": ["<em>Vitamin</em> <em>D</em> comes from sunlight."]}
    third = next(h for h in hits if h.id == "3")
    assert third.highlights == {"text": ["<em>Vitamin</em> <em>D</em> supplements in winter."]}
    assert index.search('"vitamin D"', k=1).hits[0].highlights == {}


def test_cli_bad_filters_exit_2_without_a_traceback(index) -> None:
    for spec in ('{"term":{}}', '{"term":"x"}', '{"terms":{"topic":[[1]]}}'):
        run = itlr("search", '"sleep"', "--index", str(index.backend.path), "--filter", spec)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 2 and "bad filter" in stderr and "Traceback" not in stderr
