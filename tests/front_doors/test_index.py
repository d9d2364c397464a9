"""The front door, itlr.Index: the README's and docs/python-api.md's snippets run as written, and
the object gives what the CLI gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app

runner = CliRunner()
README = Path(__file__).resolve().parents[2] / "README.md"
PYTHON_API = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
QUERY = '"vitamin D" AND NOT "bone health"'
DOCS = [
    {"id": "imm", "text": "Vitamin D supports the immune system against infections."},
    {"id": "bone", "text": "Vitamin D and calcium keep bones strong; bone health in old age."},
    {"id": "mood", "text": "Sunlight, vitamin D and mood in winter.", "lang": "en"},
    {"id": "cat", "text": "Cats sleep most of the day."},
]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("page", [README, PYTHON_API], ids=["README", "python-api"])
def test_the_python_api_snippet_runs_as_written(page: Path) -> None:
    snippet = python_blocks(page)[0]
    scope: dict = {}
    exec(compile(snippet, page.name, "exec"), scope)
    res = scope["res"]
    assert res.hits[0].id == "d1"  # the immune-system document, not the bones one
    assert set(res.hits[0].truths) == {"vitamin D", "bone health"}
    assert res.warnings == ()


def test_the_tree_snippet_gives_what_its_comments_say() -> None:
    scope: dict = {"itlr": itlr}
    exec(compile(python_blocks(PYTHON_API)[2], "python-api.md", "exec"), scope)
    query = scope["query"]
    assert str(query) == '(("dog" OR ("cat" AND "mouse")) AND NOT "giraffe")'
    assert query.terms == ("dog", "cat", "mouse", "giraffe")


def test_operators_build_the_tree_the_parser_builds() -> None:
    a, b, c = itlr.Term("a"), itlr.Term("b"), itlr.Term("c")
    assert a & b & c == itlr.parse('"a" AND "b" AND "c"').root
    assert isinstance(a & b, itlr.And) and (a & b).operands == (a, b)
    assert (a | ~b) & c == itlr.parse('("a" OR NOT "b") AND "c"').root
    assert ~(a | b) == itlr.parse('NOT ("a" OR "b")').root
    built = itlr.parse('"a" OR "b"') & ~c
    assert isinstance(built, itlr.Query) and str(built) == '(("a" OR "b") AND NOT "c")'


def test_operators_refuse_what_is_not_a_query() -> None:
    with pytest.raises(TypeError, match="cannot combine"):
        itlr.Term("a") & "b"  # type: ignore[operator]


def test_built_and_parsed_queries_rank_the_same() -> None:
    idx = itlr.Index.open("built-vs-parsed")
    idx.add(DOCS)
    built = idx.search(itlr.Term("vitamin D") & ~itlr.Term("bone health"), k=4)
    parsed = idx.search(QUERY, k=4)
    assert [h.to_dict() for h in built.hits] == [h.to_dict() for h in parsed.hits]


def test_a_search_result_is_its_hits_with_what_the_search_noticed() -> None:
    idx = itlr.Index.open("result-object")
    idx.add(DOCS)
    res = idx.search(QUERY, k=3, mode="exact")
    assert isinstance(res, itlr.SearchResult)
    assert list(res) == res.hits and len(res) == 3 and res[0] == res.hits[0]
    assert res.exact is True and res.coverage is None  # an embedded index misses no vector
    assert str(res.query) == str(itlr.parse(QUERY)) and res.warnings == ()


def test_add_skips_ids_the_index_has_and_keeps_other_keys_as_fields() -> None:
    idx = itlr.Index.open("skips")
    first = idx.add(DOCS)
    again = idx.add([*DOCS, {"id": "new", "text": "A new document about dogs."}])
    assert (first.added, first.skipped) == (4, 0)
    assert (again.added, again.skipped) == (1, 4)
    assert idx.count() == 5
    (mood,) = [h for h in idx.search('"sunlight"', k=5).hits if h.id == "mood"]
    assert mood.fields == {"lang": "en"}


def test_a_named_index_is_the_one_the_cli_opens(itlr_home: Path) -> None:
    idx = itlr.Index.open("shared-name")
    idx.add(DOCS)
    assert (itlr_home / "indexes" / "shared-name").is_dir()
    result = runner.invoke(app, ["search", QUERY, "--index", "shared-name", "-k", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == idx.search(QUERY, k=4).to_dict()


def test_request_is_the_body_translate_prints() -> None:
    idx = itlr.Index.open("translated")
    for engine in ("opensearch", "elasticsearch"):
        args = ["-i", "translated", "--engine", engine, "--format", "json", "--hard-filter", "0.5"]
        printed = runner.invoke(app, ["translate", QUERY, *args, "-k", "7"])
        assert printed.exit_code == 0, printed.output
        body = idx.request(QUERY, k=7, engine=engine, hard_filter=0.5)
        assert json.loads(printed.stdout) == json.loads(json.dumps(body))


def test_dense_is_the_baseline_without_logic() -> None:
    idx = itlr.Index.open("dense")
    idx.add(DOCS)
    hits = idx.dense("vitamin D and bones", k=2)
    assert hits[0].id == "bone" and hits[0].truths == {}


def test_errors_name_options_as_python_does() -> None:
    idx = itlr.Index.open("errors")
    with pytest.raises(itlr.ConfigurationError, match="`hard_filter` is a truth threshold"):
        idx.search(QUERY, hard_filter=1.5)
    with pytest.raises(itlr.ConfigurationError, match="unknown `mode`"):
        idx.search(QUERY, mode="fast")
    (warning,) = itlr.parse('"a" OR NOT "b"').warnings
    assert 'use `mode="exact"`' in warning


def test_the_cli_shows_the_same_errors_with_its_flags() -> None:
    itlr.Index.open("flags").add(DOCS)
    bad = runner.invoke(app, ["search", QUERY, "-i", "flags", "--hard-filter", "1.5"])
    assert bad.exit_code == 2
    assert "--hard-filter is a truth threshold" in bad.stderr and "`" not in bad.stderr
    warned = runner.invoke(app, ["search", '"a" OR NOT "b"', "-i", "flags"])
    assert warned.exit_code == 0 and "use --mode exact for" in warned.stderr


def test_search_with_rewrite_reports_how_the_question_became_a_query() -> None:
    idx = itlr.Index.open("rewritten")
    idx.add(DOCS)
    result = idx.search("vitamin D, but not bone health", k=2, rewrite="rules")
    assert str(result.query) == QUERY.join("()")
    assert result.to_dict()["rewrite"]["method"] == "rules"
    with pytest.raises(itlr.ConfigurationError, match="`rewrite` takes a question as text"):
        idx.search(itlr.Term("a"), rewrite="rules")
