"""The command line, through typer's test runner, with the real model."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from itlr.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_parse_prints_the_canonical_form() -> None:
    result = invoke("parse", "vitamin D benefits AND NOT bone health")
    assert result.exit_code == 0
    assert result.stdout.strip() == '("vitamin D benefits" AND NOT "bone health")'


def test_parse_json_prints_the_tree() -> None:
    result = invoke("parse", "a OR NOT b", "--json")
    tree = json.loads(result.stdout)["tree"]
    assert tree["or"][0]["term"] == "a" and tree["or"][1]["not"]["term"] == "b"


def test_parse_error_exits_2_with_a_caret() -> None:
    result = invoke("parse", "a AND (b OR")
    assert result.exit_code == 2
    assert "unbalanced '('" in result.stderr
    assert result.stderr.splitlines()[-1] == "      ^"


def test_ingest_then_search_shows_per_term_truths(tmp_path) -> None:
    corpus = tmp_path / "docs.jsonl"
    rows = [
        {"id": "imm", "text": "Vitamin D supports the immune system against infections."},
        {"id": "bone", "text": "Vitamin D helps calcium absorption for strong bones."},
        {"id": "rome", "text": "Roman aqueducts carried water into the city."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = invoke("ingest", str(corpus), "--index", "vit")
    assert first.exit_code == 0, first.output
    assert "added 3" in first.stdout
    again = invoke("ingest", str(corpus), "--index", "vit")
    assert "added 0, updated 0, unchanged 3" in again.stdout

    result = invoke(
        "search", '"vitamin D benefits" AND NOT "bone health"', "--index", "vit", "--json"
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["hits"][0]["id"] == "imm"
    assert set(payload["hits"][0]["truths"]) == {"vitamin D benefits", "bone health"}

    table = invoke("search", "vitamin D AND NOT bone", "--index", "vit", "--k", "2")
    assert table.exit_code == 0 and "imm" in table.stdout


def test_ingest_csv(tmp_path) -> None:
    corpus = tmp_path / "docs.csv"
    corpus.write_text("id,text,lang\n1,Solar panels turn light into power.,en\n")
    result = invoke("ingest", str(corpus), "--index", str(tmp_path / "csvidx"))
    assert result.exit_code == 0, result.output
    found = invoke(
        "search",
        "solar",
        "--index",
        str(tmp_path / "csvidx"),
        "--filter",
        '{"term": {"lang": "en"}}',
        "--json",
    )
    assert json.loads(found.stdout)["hits"][0]["fields"] == {"lang": "en"}


def test_search_on_a_missing_index_is_one_line_and_exit_2() -> None:
    result = invoke("search", "x", "--index", "no-such-index")
    assert result.exit_code == 2
    assert "no itlr index" in result.stderr and "itlr ingest" in result.stderr
    assert "Traceback" not in result.output


def test_bad_filter_json_is_explained(tmp_path) -> None:
    result = invoke("search", "x", "--index", "vit", "--filter", "{nope")
    assert result.exit_code == 2 and "--filter is not valid JSON" in result.stderr


def test_not_only_query_warns_and_still_searches(tmp_path) -> None:
    corpus = tmp_path / "d.jsonl"
    corpus.write_text('{"id": "a", "text": "cats"}\n{"id": "b", "text": "dogs"}\n')
    invoke("ingest", str(corpus), "--index", "neg")
    result = invoke("search", "NOT cats", "--index", "neg", "--json")
    assert result.exit_code == 0
    assert "no positive term" in result.stderr
    assert json.loads(result.stdout)["hits"][0]["id"] == "b"


def test_demo_runs_offline_and_shows_both_methods() -> None:
    result = invoke("demo", "--k", "3")
    assert result.exit_code == 0, result.output
    assert "vitamin D benefits" in result.stdout
    assert "dense" in result.stdout and "itlr" in result.stdout


def test_search_rewrites_a_question_with_the_rule_rewriter(tmp_path) -> None:
    corpus = tmp_path / "d.jsonl"
    corpus.write_text(
        '{"id": "imm", "text": "Vitamin D supports the immune system against infections."}\n'
        '{"id": "bone", "text": "Vitamin D helps calcium absorption for strong bones."}\n'
    )
    invoke("ingest", str(corpus), "--index", "rw")
    question = "What are the benefits of vitamin D, other than bone health?"
    result = invoke("search", question, "--rewrite", "rules", "--index", "rw", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["query"] == '("benefits of vitamin D" AND NOT "bone health")'
    assert payload["rewrite"]["method"] == "rules"
    assert payload["hits"][0]["id"] == "imm"


def test_calibrated_truth_without_a_calibration_says_how_to_make_one() -> None:
    result = invoke("search", "x", "--index", "vit", "--truth", "calibrated")
    assert result.exit_code == 2 and "itlr calibrate" in result.stderr


def test_credentials_in_the_url_move_to_auth_and_never_reach_a_message() -> None:
    from itlr.engines.connection import Connection

    connection = Connection.from_env("https://alice:s%40cret@127.0.0.1:9/")
    assert (connection.url, connection.user, connection.password) == (
        "https://127.0.0.1:9",
        "alice",
        "s@cret",
    )
    assert "cret" not in repr(connection)
    down = runner.invoke(
        app, ["search", "x", "--url", "http://alice:s3cret@127.0.0.1:9", "--index", "demo"]
    )
    assert down.exit_code == 2 and "cannot reach" in down.stderr
    assert "s3cret" not in down.output and "alice" not in down.output


def test_a_markdown_report_keeps_its_table_rows_whole_when_piped(capsys) -> None:
    from itlr.cli.app import print_markdown

    row = "| " + " | ".join(f"measurement {i}" for i in range(12)) + " |"
    print_markdown(f"| a | b |\n|---|---|\n{row}")
    assert row in capsys.readouterr().out.splitlines()


# -- issue 53, item 6: help text printed as written ---------------------------------------------


def _commands(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_help_shows_the_extras_names_and_every_bracket_it_holds() -> None:
    import re

    import typer

    wide = {"COLUMNS": "1000"}
    shown = runner.invoke(app, ["search", "--help"], env=wide)
    assert shown.exit_code == 0, shown.output
    assert "needs itlr[torch])" in shown.stdout and "needs itlr[llm];" in shown.stdout
    root = typer.main.get_command(app)
    checked = 0
    for path, command in _commands(root):
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        brackets = {
            found
            for text in texts
            for found in re.findall(r"\[[^\]\s]+\]", text.replace("\\[", "["))
        }
        if not brackets:
            continue
        page = runner.invoke(app, [*path, "--help"], env=wide)
        assert page.exit_code == 0, (path, page.output)
        for found in brackets:
            assert found in page.stdout, (path, found)
            checked += 1
    assert checked >= 2
