"""`itlr eval` with both rewriters: the LLM rewriter answered from a file of earlier answers
(served on loopback, through the real rewriter path), the report per rewriter and per number of
NOTs with question counts, and the hard filter's two rules as methods."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from itlr.cli import app
from itlr.errors import ConfigurationError
from itlr.evaluation.answers import AnswersServer, read_answers
from itlr.evaluation.experiment import rewriter_names
from itlr.rewrite import rewrite_for_search

runner = CliRunner()

QUESTIONS = {
    "q1": "benefits of vitamin D other than bone health",
    "q2": "coffee or tea",
    "q3": "water supply of ancient Rome",
}
# What a model might answer: not what the rules write (q1's positive term differs).
ANSWERS = {
    "q1": '"health benefits of vitamin D" AND NOT "bone health"',
    "q2": '"coffee" OR "tea"',
    "q3": '"water supply of ancient Rome"',
}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    texts = {
        "imm": "Vitamin D helps the immune system fight infections.",
        "bone": "Vitamin D lets the gut absorb calcium for strong bones.",
        "cof": "Coffee beans are roasted to bring out their aroma.",
        "tea": "Green tea is steamed right after picking to keep it green.",
        "aq": "Roman aqueducts carried fresh water into the city.",
        "col": "The Colosseum in Rome hosted gladiator fights.",
    }
    write_jsonl(folder / "corpus.jsonl", [{"_id": k, "text": v} for k, v in texts.items()])
    write_jsonl(folder / "queries.jsonl", [{"_id": k, "text": v} for k, v in QUESTIONS.items()])
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\timm\t1\nq2\tcof\t1\nq2\ttea\t1\nq3\taq\t1\n"
    )
    return folder


@pytest.fixture
def answers(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    write_jsonl(
        path, [{"_id": k, "question": QUESTIONS[k], "answer": v} for k, v in ANSWERS.items()]
    )
    return path


def test_eval_reports_both_rewriters_per_not_count_with_question_counts(
    dataset: Path, answers: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    methods = "dense,itlr,itlr-hard,itlr-hard-absolute"
    both = ["--rewrite", "rules,llm", "--llm-answers", str(answers)]
    result = runner.invoke(
        app, ["eval", str(dataset), *both, "--methods", methods, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    llm = json.loads((out / "llm" / "results.json").read_text())
    rules = json.loads((out / "rules" / "results.json").read_text())
    # The LLM's queries are the file's answers, through the real rewriter (method llm).
    for qid, answer in ANSWERS.items():
        assert llm["queries"][qid]["rewrite"]["method"] == "llm"
        assert llm["queries"][qid]["rewrite"]["fallback"] is False
        assert llm["queries"][qid]["query"].strip("()") == answer
    assert rules["queries"]["q1"]["rewrite"]["method"] == "rules"
    assert llm["config"]["rewrite"] == "llm" and rules["config"]["rewrite"] == "rules"
    assert llm["config"]["hard_filter_rule"] == "relative"
    assert set(llm["metrics"]) == set(methods.split(","))
    # Per number of NOTs, each group with its question count, for every method.
    assert set(llm["by_negations"]["itlr-hard"]) == {"0 NOT (2 queries)", "1 NOT (1 queries)"}
    table = (out / "by_rewriter.md").read_text()
    assert table.splitlines()[0] == "| questions | " + " | ".join(methods.split(",")) + " |"
    for row in ("rules, all (3)", "rules, 1 NOT (1)", "llm, all (3)", "llm, 0 NOT (2)"):
        assert f"| {row} |" in table
    assert "nDCG@10 by rewriter and number of NOTs" in result.stdout


def test_a_question_the_answers_file_lacks_is_an_error_not_a_fallback(
    dataset: Path, tmp_path: Path
) -> None:
    partial = tmp_path / "partial.jsonl"
    write_jsonl(partial, [{"question": QUESTIONS["q1"], "answer": ANSWERS["q1"]}])
    llm = ["--rewrite", "llm", "--llm-answers", str(partial)]
    result = runner.invoke(
        app, ["eval", str(dataset), *llm, "--methods", "dense,itlr", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "no answer in the answers file" in result.stderr
    assert "coffee or tea" in result.stderr or "ancient Rome" in result.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rewrite", "rules"], "add --rewrite llm"),
        (["--rewrite", "llm", "--llm-model", "m"], "not both"),
        (["--rewrite", "rules,sometimes"], "unknown --rewrite 'sometimes'"),
    ],
)
def test_eval_rewriter_options_refused_in_one_line(
    dataset: Path, answers: Path, extra: list[str], message: str
) -> None:
    result = runner.invoke(app, ["eval", str(dataset), "--llm-answers", str(answers), *extra])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_malformed_answers_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "a", "answer": "b"}\n{"question": "c"}\n', encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad.jsonl:2: .*\"answer\""):
        read_answers(path)
    path.write_text("not json\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad.jsonl:1: not JSON"):
        read_answers(path)


def test_an_answer_that_does_not_parse_is_retried_once_then_falls_back_to_the_rules() -> None:
    question = "vitamin D without bone health"
    with AnswersServer({question: '"vitamin D" AND (NOT'}) as server:
        result = rewrite_for_search(question, "llm", server.config(timeout=5))
        asked = server.asked
    # The real rewriter: the syntax error sent back once, the same answer again, then the rules.
    assert asked == 2
    assert result.method == "rules" and result.fallback
    assert any("did not parse" in w for w in result.warnings)


def test_the_answers_server_says_what_is_wrong_with_a_request_it_cannot_answer() -> None:
    # A body that is JSON but not an object reached the right endpoint: it lacks a user
    # message (it was called "no such endpoint"); a wrong path is the one that is no endpoint.
    with AnswersServer({"a question": '"a"'}) as server:
        array = httpx.post(f"{server.base_url}/chat/completions", json=[1], timeout=10)
        elsewhere = httpx.post(f"{server.base_url}/completions", json={}, timeout=10)
    assert array.status_code == 400
    assert array.json()["error"]["message"] == "the request has no user message"
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["message"] == "no such endpoint: /v1/completions"


def test_rewriter_names_are_checked_and_kept_in_order() -> None:
    assert rewriter_names("llm, rules,llm") == ["llm", "rules"]
    with pytest.raises(ConfigurationError, match="choose none, rules or llm"):
        rewriter_names("rules,bm25")
    with pytest.raises(ConfigurationError):
        rewriter_names(" , ")


@pytest.mark.parametrize("rule", ["relative", "absolute"])
def test_itlr_hard_takes_the_rule_given_and_itlr_hard_absolute_is_always_absolute(
    dataset: Path, tmp_path: Path, rule: str
) -> None:
    # At a low threshold the relevant passage of q1 (immunity) reaches it for "bone health", but
    # is closer to what the question asks for: only the absolute rule drops it.
    out = tmp_path / "out"
    hard = ["--hard-filter", "0.1", "--hard-filter-rule", rule, "--rewrite", "rules"]
    methods = ["--methods", "itlr,itlr-hard,itlr-hard-absolute"]
    result = runner.invoke(app, ["eval", str(dataset), *methods, *hard, "--out", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "results.json").read_text())
    assert payload["config"]["hard_filter_rule"] == rule
    per_query = payload["per_query"]
    assert per_query["itlr-hard-absolute"]["q1"]["R@100"] == 0.0
    expected = per_query["itlr"] if rule == "relative" else per_query["itlr-hard-absolute"]
    assert per_query["itlr-hard"]["q1"] == expected["q1"]
