"""One search-option schema: every field of SearchOptions is an option of `itlr search`,
`itlr translate`, `itlr serve` (JSON body), `itlr serve --proxy` and the proxy, with the same
name and default; the embedded engine is called `embedded` (`memory` still works, with a note).

The walk starts from `dataclasses.fields(SearchOptions)`, so a field added there without an
option in `itlr.options.OPTIONS` (from which every front end is derived) fails here."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

import pytest
import typer
from click import Command
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.cli.options import PER_REQUEST, PROXY_OPTIONS
from itlr.cli.serve_proxy import proxy_defaults
from itlr.cli.translate import UNSET_OPTIONS
from itlr.errors import ConfigurationError, ItlrError
from itlr.options import OPTIONS, Option, SearchOptions, search_options
from itlr.service import create_app
from itlr.service.app import SearchBody
from itlr.translation import translate_requests, without_statistics

runner = CliRunner()
QUERY = '"vitamin D benefits" AND NOT "bone health"'


def options_of_field(name: str) -> list[Option]:
    return [option for option in OPTIONS if option.field == name]


FIELDS = [item.name for item in dataclasses.fields(SearchOptions)]


def click_command(name: str) -> Command:
    group = typer.main.get_command(cli)
    return group.commands[name]  # type: ignore[attr-defined]


def flag_default(command: Command, option: Option) -> Any:
    """The default of `option`'s flag on `command`; fails when the command lacks the flag."""
    for param in command.params:
        if option.flag in getattr(param, "opts", ()):
            default = param.default
            return default.value if isinstance(default, Enum) else default
    raise AssertionError(f"{command.name} has no {option.flag}")


def cli_default(option: Option) -> Any:
    """An option's default as its flag spells it (JSON and field lists are text on the CLI)."""
    return None if option.kind in ("object", "list", "fields") else option.default


@pytest.fixture(scope="module")
def client(demo_index):
    with TestClient(create_app(demo_index)) as answering:
        yield answering


@pytest.mark.parametrize("name", FIELDS)
def test_every_search_options_field_is_set_by_an_option_of_the_schema(name: str) -> None:
    assert options_of_field(name), f"SearchOptions.{name} has no option in itlr.options.OPTIONS"


def test_the_schema_defaults_build_the_default_search_options() -> None:
    assert search_options(**{option.name: option.default for option in OPTIONS}) == (
        SearchOptions()
    )


@pytest.mark.parametrize("command", ["search", "translate"])
@pytest.mark.parametrize("name", FIELDS)
def test_itlr_search_and_translate_take_every_field_with_its_default(command, name) -> None:
    for option in options_of_field(name):
        if command == "translate" and option.name in UNSET_OPTIONS:
            # Left to search_options, which applies the same default; the help names it.
            assert flag_default(click_command(command), option) is None
            (param,) = [p for p in click_command(command).params if option.flag in p.opts]
            assert f"Default: {option.default}." in param.help
            continue
        assert flag_default(click_command(command), option) == cli_default(option)


@pytest.mark.parametrize("name", FIELDS)
def test_the_json_service_takes_every_field_by_its_key_with_its_default(name) -> None:
    for option in options_of_field(name):
        keys = {
            key
            for field in SearchBody.model_fields.values()
            for key in (field.alias, *getattr(field.validation_alias, "choices", ()))
            if key
        } | set(SearchBody.model_fields)
        assert option.key in keys or (option.name == "source_fields" and "_source" in keys)
        assert SearchBody.model_fields[option.name].default == option.default


@pytest.mark.parametrize("name", FIELDS)
def test_the_proxy_takes_every_field_as_a_setting_or_from_the_ui_body(name) -> None:
    for option in options_of_field(name):
        if option.name in PER_REQUEST:
            # the UI's search body carries it (size, from, _source, ...), never a proxy setting
            with pytest.raises(ConfigurationError, match=PER_REQUEST[option.name]):
                proxy_defaults(**{option.name: option.default})
            continue
        assert option.name in PROXY_OPTIONS
        assert proxy_defaults(**{option.name: option.default}) == SearchOptions()
        # `python -m itlr.cli.proxy` is `itlr serve --proxy`: these are its flags too.
        serve = click_command("serve")
        assert flag_default(serve, option) == cli_default(option)


def test_the_proxy_refuses_an_unknown_option_with_a_library_error() -> None:
    with pytest.raises(ItlrError, match=r"no option hardfilter: choose from .*hard_filter"):
        proxy_defaults(hardfilter=0.5)


def test_plan_reaches_the_proxy() -> None:
    assert proxy_defaults(plan="per-term").plan == "per-term"


def test_itlr_translate_with_no_flags_builds_the_default_request(embedder) -> None:
    result = runner.invoke(cli, ["translate", QUERY, "-i", "notes", "--format", "json"])
    assert result.exit_code == 0, result.output
    # Offline, as translate builds it without --url (hybrid defaults give way to cosine truths).
    options, _ = without_statistics(search_options(), truth_given=False)
    expected = translate_requests(QUERY, "opensearch", "notes", options, embedder)
    assert json.loads(result.stdout) == json.loads(json.dumps(expected[-1].body))


def test_itlr_search_with_no_flags_answers_as_the_default_library_search(
    embedded, demo_index
) -> None:
    result = runner.invoke(cli, ["search", QUERY, "-i", str(embedded.path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(json.dumps(demo_index.search(QUERY).to_dict()))


def test_the_service_answers_every_key_given_its_default_as_if_none_were_given(client) -> None:
    spelled = {option.key: option.default for option in OPTIONS}
    bare = client.post("/search", json={"query": QUERY})
    every = client.post("/search", json={"query": QUERY, **spelled})
    assert bare.status_code == every.status_code == 200, every.text
    assert every.json() == bare.json()


def body_options(body: dict[str, Any]) -> SearchOptions:
    """The SearchOptions the service builds from a /search body."""
    names = SearchBody.model_validate({"query": QUERY, **body}).names()  # type: ignore[attr-defined]
    del names["query"], names["rewrite"], names["dense"]
    return search_options(**names)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"_source": ["title", "year"]}, ("title", "year")),
        ({"_source": "title"}, ("title",)),
        ({"_source": False}, ()),
        ({"_source": True}, None),
        ({"source_fields": ["title"]}, ("title",)),
    ],
)
def test_the_service_reads_source_as_the_engines_do(given, expected) -> None:
    assert body_options(given).source_fields == expected


def test_the_service_reads_from_search_after_highlight_and_explain() -> None:
    options = body_options({"from": 20, "highlight": True, "explain": True})
    assert (options.from_, options.highlight, options.explain) == (20, True, True)
    assert body_options({"search_after": [0.8, "d3"]}).search_after == (0.8, "d3")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"from": -1}, "from: Input should be greater than or equal to 0"),
        ({"_source": 3}, "_source: Value error, give a list of field names"),
        ({"search_after": {"a": 1}}, "search_after: Input should be a valid list"),
        ({"from": 10, "search_after": [1]}, "give `from_` or `search_after`, not both"),
    ],
)
def test_bad_new_options_in_a_body_are_a_one_line_4xx(client, body, says) -> None:
    answer = client.post("/search", json={"query": QUERY, **body})
    assert 400 <= answer.status_code < 500
    error = answer.json()["error"]
    assert says in error and "\n" not in error


def test_cli_new_options_reach_the_search_options(embedder) -> None:
    result = runner.invoke(
        cli,
        [
            "translate",
            QUERY,
            "-i",
            "notes",
            "--format",
            "json",
            "--from",
            "20",
            "--source-fields",
            "title, year",
            "--highlight",
            "--explain",
        ],
    )
    assert result.exit_code == 0, result.output
    options, _ = without_statistics(
        search_options(from_=20, source_fields=["title", "year"], highlight=True, explain=True),
        truth_given=False,
    )
    expected = translate_requests(QUERY, "opensearch", "notes", options, embedder)[-1].body
    assert json.loads(result.stdout) == json.loads(json.dumps(expected))


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--from", "-1"], "--from must be 0 or more, got -1"),
        (["--search-after", "[1"], "--search-after is not valid JSON"),
        (["--search-after", '{"a": 1}'], "--search-after must be a JSON list"),
        (["--from", "3", "--search-after", "[1]"], "give --from or --search-after, not both"),
        (["--filter", "[]"], "--filter must be a JSON object"),
    ],
)
def test_bad_new_cli_options_are_one_line_and_exit_2(flags, says) -> None:
    result = runner.invoke(cli, ["translate", QUERY, "-i", "notes", *flags])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and result.stderr.count("\n") == 1


def test_itlr_serve_without_proxy_refuses_search_flags_it_would_ignore() -> None:
    result = runner.invoke(cli, ["serve", "-i", "notes", "--hard-filter", "0.5"])
    assert result.exit_code == 2
    assert "--hard-filter set the proxy's defaults (with --proxy)" in result.stderr


def test_the_embedded_engine_is_called_embedded(embedded, demo_index) -> None:
    assert demo_index.engine == "embedded"
    result = runner.invoke(
        cli, ["search", QUERY, "-i", str(embedded.path), "--engine", "embedded", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_memory_is_still_accepted_with_a_one_line_deprecation_note(embedded) -> None:
    result = runner.invoke(
        cli, ["search", QUERY, "-i", str(embedded.path), "--engine", "memory", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert (
        result.stderr
        == 'warning: engine "memory" is now called "embedded"; "memory" will be removed\n'
    )
    with pytest.warns(FutureWarning, match='now called "embedded"'):
        opened = itlr.Index.open(str(embedded.path), engine="memory", create=False)
    assert opened.engine == "embedded"


def test_index_search_takes_the_new_options_by_name(demo_index) -> None:
    options = demo_index.options(
        from_=5, source_fields=["title"], highlight=True, explain=True, k=3
    )
    assert (options.from_, options.source_fields, options.highlight, options.explain) == (
        5,
        ("title",),
        True,
        True,
    )
    with pytest.raises(ConfigurationError, match="`source_fields` must be a list"):
        demo_index.options(source_fields="title")
