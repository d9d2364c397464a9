"""The LLM rewriter against a real local HTTP server speaking the OpenAI chat API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from itlr.cli import app
from itlr.errors import RewriteError
from itlr.rewrite import LLMConfig, rewrite, rewrite_for_search, rewrite_rules
from itlr.rewrite.llm import cache_dir, cache_key, load_prompt, parse_answer
from llm_server import FakeLLMServer, Reply

QUESTION = "What are the benefits of vitamin D, other than bone health?"
GOOD = '"benefits of vitamin D" AND NOT "bone health"'
CANONICAL = '("benefits of vitamin D" AND NOT "bone health")'


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The session-wide ITLR_HOME would let one test's cached answer leak into the next.
    monkeypatch.setenv("ITLR_HOME", str(tmp_path))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return tmp_path


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


def config_for(server: FakeLLMServer, **changes) -> LLMConfig:
    fast = LLMConfig(
        model="fake-model", base_url=server.base_url, timeout=2.0, retries=1, backoff=0.01
    )
    return replace(fast, **changes)


def test_a_good_answer_becomes_the_query(server: FakeLLMServer) -> None:
    server.script(Reply(GOOD))
    result = rewrite(QUESTION, "llm", config_for(server))
    assert (result.canonical, result.method, result.fallback) == (CANONICAL, "llm", False)
    assert result.raw_answer == GOOD
    [request] = server.requests
    assert request["_path"] == "/v1/chat/completions" and request["model"] == "fake-model"
    system, user = request["messages"]
    assert "NOT binds tighter than AND" in system["content"]
    assert QUESTION in user["content"]


def test_code_fences_and_a_query_label_are_tolerated(server: FakeLLMServer) -> None:
    server.script(Reply(f"```\nQuery: {GOOD}\n```"))
    assert rewrite(QUESTION, "llm", config_for(server)).canonical == CANONICAL


def test_a_malformed_answer_is_retried_with_the_error_shown(server: FakeLLMServer) -> None:
    server.script(Reply('"benefits of vitamin D" AND NOT ("bone health"'), Reply(GOOD))
    result = rewrite(QUESTION, "llm", config_for(server))
    assert (result.canonical, result.method, result.fallback) == (CANONICAL, "llm", False)
    retry = server.requests[1]["messages"]
    assert retry[-2]["role"] == "assistant"
    assert "unbalanced '('" in retry[-1]["content"]
    assert any("did not parse" in w for w in result.warnings)


def test_garbage_twice_falls_back_to_the_rules_and_says_so(server: FakeLLMServer) -> None:
    server.script(Reply("AND AND"), Reply("(((("))
    result = rewrite(QUESTION, "llm", config_for(server))
    assert result.fallback and result.method == "rules"
    assert result.canonical == str(rewrite_rules(QUESTION).query)
    assert result.raw_answer == "(((("
    assert any("used the rule rewriter instead" in w for w in result.warnings)
    assert len(server.requests) == 2


def test_a_slow_server_times_out_and_falls_back(server: FakeLLMServer) -> None:
    server.script(Reply(GOOD, delay=1.5), Reply(GOOD, delay=1.5))
    started = time.perf_counter()
    result = rewrite(QUESTION, "llm", config_for(server, timeout=0.2))
    assert result.fallback and result.canonical == CANONICAL
    assert any("did not answer within 0.2s" in w for w in result.warnings)
    assert len(server.requests) == 2  # the first try and one retry
    assert time.perf_counter() - started < 1.5


def test_a_rate_limit_is_waited_out(server: FakeLLMServer) -> None:
    server.script(Reply(status=429, headers=(("Retry-After", "0"),)), Reply(GOOD))
    result = rewrite(QUESTION, "llm", config_for(server))
    assert (result.method, result.fallback) == ("llm", False)
    assert any("rate limiting (429)" in w for w in result.warnings)


def test_server_errors_are_retried_then_fall_back(server: FakeLLMServer) -> None:
    server.script(Reply(status=503), Reply(status=502))
    result = rewrite(QUESTION, "llm", config_for(server))
    assert result.fallback
    assert any("failed (502)" in w for w in result.warnings)


def test_a_cached_answer_does_not_reach_the_server(server: FakeLLMServer, own_cache: Path) -> None:
    config = config_for(server)
    server.script(Reply(GOOD))
    first = rewrite(QUESTION, "llm", config)
    second = rewrite(QUESTION, "llm", config)
    assert len(server.requests) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.canonical == CANONICAL
    entry = cache_dir() / f"{cache_key(config, QUESTION)}.json"
    assert entry.is_relative_to(own_cache / "cache" / "rewrite")
    assert json.loads(entry.read_text())["answer"] == GOOD


def test_the_cache_key_covers_endpoint_model_prompt_and_question() -> None:
    base = LLMConfig(model="m", base_url="http://127.0.0.1:1/v1")
    keys = {
        cache_key(base, "q"),
        cache_key(replace(base, model="other"), "q"),
        cache_key(replace(base, base_url="http://127.0.0.1:2/v1"), "q"),
        cache_key(replace(base, prompt_version="v2"), "q"),
        cache_key(base, "another question"),
    }
    assert len(keys) == 5
    assert cache_key(replace(base, timeout=1.0), "q") == cache_key(base, "q")


def test_a_failed_answer_is_not_cached(server: FakeLLMServer) -> None:
    server.script(Reply("(("), Reply("(("), Reply(GOOD))
    config = config_for(server)
    assert rewrite(QUESTION, "llm", config).fallback
    assert not rewrite(QUESTION, "llm", config).fallback
    assert len(server.requests) == 3


def test_refused_credentials_are_an_error_not_a_fallback(server: FakeLLMServer) -> None:
    server.script(Reply(status=401))
    with pytest.raises(RewriteError, match=r"refused the credentials \(401\).*OPENAI_API_KEY"):
        rewrite(QUESTION, "llm", config_for(server))


def test_openai_without_a_key_asks_for_one() -> None:
    with pytest.raises(RewriteError, match=r"set \$OPENAI_API_KEY"):
        rewrite(QUESTION, "llm", LLMConfig(model="gpt-4o-mini"))


def test_the_key_comes_from_the_named_variable(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-test-123")
    server.script(Reply(GOOD))
    server.script(Reply(GOOD))
    rewrite(QUESTION, "llm", config_for(server, api_key_env="MY_LLM_KEY", cache=False))
    rewrite(QUESTION, "llm", config_for(server, cache=False))
    assert server.requests[0]["_authorization"] == "Bearer sk-test-123"
    # A local server needs no key, but the client insists on sending one.
    assert server.requests[1]["_authorization"] == "Bearer not-needed"


def test_llm_without_a_configuration_is_an_actionable_error() -> None:
    with pytest.raises(RewriteError, match="`llm_model`"):
        rewrite(QUESTION, "llm", None)


def test_lenient_parsing_takes_the_first_line_when_the_model_chats() -> None:
    answer = f"{GOOD}\nThis excludes bone health because the user asked so."
    assert str(parse_answer(answer)) == CANONICAL


def test_the_prompt_template_has_a_user_part_with_the_question() -> None:
    prompt = load_prompt("v1")
    assert "Answer with the query only" in prompt.system
    assert prompt.messages("Q?")[1]["content"].startswith("Question: Q?")
    with pytest.raises(RewriteError, match="no prompt version 'v0'"):
        load_prompt("v0")


def test_search_rewrite_leaves_a_logical_query_as_typed() -> None:
    typed = rewrite_for_search('"cats" AND NOT "dogs"', "llm", None)
    assert (typed.method, typed.canonical) == ("query", '("cats" AND NOT "dogs")')
    assert "used as typed" in typed.warnings[0]
    asked = rewrite_for_search("cats but not dogs", "rules", None)
    assert (asked.method, asked.canonical) == ("rules", '("cats" AND NOT "dogs")')


runner = CliRunner()


def test_cli_uses_the_llm_when_a_model_is_given(server: FakeLLMServer) -> None:
    server.script(Reply(GOOD))
    result = runner.invoke(
        app,
        ["rewrite", QUESTION, "--llm-base-url", server.base_url, "--llm-model", "m", "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["query"], payload["method"], payload["fallback"]) == (CANONICAL, "llm", False)


def test_cli_warns_on_stderr_when_it_falls_back(server: FakeLLMServer) -> None:
    server.script(Reply("(("), Reply("(("))
    result = runner.invoke(
        app, ["rewrite", QUESTION, "--llm-base-url", server.base_url, "--llm-model", "m"]
    )
    assert result.exit_code == 0
    assert result.stdout.strip() == CANONICAL
    assert "used the rule rewriter instead" in result.stderr


def test_cli_eval_scores_the_llm(server: FakeLLMServer, tmp_path: Path) -> None:
    devset = tmp_path / "dev.jsonl"
    rows = [
        {"question": QUESTION, "gold": CANONICAL, "category": "not", "in_scope": True},
        {"question": "cats or dogs", "gold": '("cats" OR "dogs")', "category": "or",
         "in_scope": True},
    ]  # fmt: skip
    devset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = {QUESTION: GOOD, "cats or dogs": '"cats" AND "dogs"'}
    server.respond_with(
        lambda request: Reply(
            answers[request["messages"][-1]["content"].split("\n")[0].removeprefix("Question: ")]
        )
    )
    result = runner.invoke(
        app,
        ["rewrite", "--eval", str(devset), "--llm-base-url", server.base_url,
         "--llm-model", "m", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    totals = json.loads(result.stdout)["all"]["total"]
    assert (totals["n"], totals["exact"], totals["structure"]) == (2, 1, 1)
