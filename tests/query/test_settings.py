"""Numbers from environment variables: one reading for every setting, one line for a bad one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from itlr.errors import ConfigurationError
from itlr.settings import env_number


def test_an_unset_or_blank_variable_gives_the_default(monkeypatch) -> None:
    monkeypatch.delenv("ITLR_TEST_NUMBER", raising=False)
    assert env_number("ITLR_TEST_NUMBER", 7, least=1, meaning="a count") == 7
    monkeypatch.setenv("ITLR_TEST_NUMBER", "  ")
    assert env_number("ITLR_TEST_NUMBER", 2.5, least=0.0, meaning="seconds") == 2.5


def test_a_number_of_the_defaults_kind_is_read(monkeypatch) -> None:
    monkeypatch.setenv("ITLR_TEST_NUMBER", " 12 ")
    value = env_number("ITLR_TEST_NUMBER", 7, least=1, meaning="a count")
    assert value == 12 and isinstance(value, int)
    monkeypatch.setenv("ITLR_TEST_NUMBER", "0.25")
    assert env_number("ITLR_TEST_NUMBER", 1.0, least=0.0, meaning="seconds") == 0.25


@pytest.mark.parametrize(
    ("raw", "default", "least", "kind"),
    [
        ("lots", 7, 1, "an integer"),
        ("1.5", 7, 1, "an integer"),
        ("0", 7, 1, "an integer"),
        ("-1", 0.5, 0.0, "a number"),
        ("nan", 0.5, 0.0, "a number"),
        ("inf", 0.5, 0.0, "a number"),
    ],
)
def test_anything_else_is_refused_naming_the_variable(
    monkeypatch, raw: str, default: float, least: float, kind: str
) -> None:
    monkeypatch.setenv("ITLR_TEST_NUMBER", raw)
    with pytest.raises(ConfigurationError) as refused:
        env_number("ITLR_TEST_NUMBER", default, least=least, meaning="what it counts")
    assert str(refused.value) == (
        f"ITLR_TEST_NUMBER={raw!r}: give what it counts, {kind} >= {least}"
    )


@pytest.mark.parametrize(
    ("name", "value"), [("ITLR_MAX_TERMS", "many"), ("ITLR_ENCODE_SLOTS", "abc")]
)
def test_a_bad_setting_read_when_the_cli_loads_is_one_line_and_status_2(
    name: str, value: str
) -> None:
    # Both are read while the commands' modules load, before any command can catch an error;
    # the encoder's slots used to fall back to the default without a word.
    finished = subprocess.run(
        [sys.executable, "-m", "itlr", "search", "a", "--index", "nowhere"],
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 2
    (line,) = finished.stderr.strip().splitlines()
    assert line.startswith(f"error: {name}={value!r}: give ")


def test_the_package_exports_load_on_first_use_and_are_listed_before() -> None:
    # `import itlr` loads no module that reads a setting; `itlr.Index` loads it on first use.
    code = (
        "import sys, itlr; print('itlr.limits' in sys.modules, 'Index' in dir(itlr)); "
        "itlr.Index; print('itlr.limits' in sys.modules)"
    )
    finished = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert finished.stdout.split() == ["False", "True", "True"]


# -- time-outs: finite, positive and bounded (issue 42, item 7) ------------------------------


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "-5", "0", "1e300", "3601"])
@pytest.mark.parametrize(
    ("variable", "named"),
    [
        ("ITLR_UPSTREAM_TIMEOUT", "--upstream-timeout, ITLR_UPSTREAM_TIMEOUT"),
        ("ITLR_HEADER_TIMEOUT", "--header-timeout, ITLR_HEADER_TIMEOUT"),
        ("ITLR_BODY_TIMEOUT", "--body-timeout, ITLR_BODY_TIMEOUT"),
    ],
)
def test_a_time_out_that_is_not_finite_positive_and_bounded_is_refused_in_one_line(
    monkeypatch, raw: str, variable: str, named: str
) -> None:
    from typer.testing import CliRunner

    from itlr.cli import app as cli

    monkeypatch.setenv(variable, raw)
    result = CliRunner().invoke(cli, ["serve", "--proxy", "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "at most 3600" in lines[0], lines


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0.0, 1e300])
def test_every_time_out_reader_refuses_the_same_values(monkeypatch, value: float) -> None:
    from itlr.rewrite.llm import LLMConfig
    from itlr.service.timeouts import ReadTimeouts
    from itlr.settings import env_seconds

    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        ReadTimeouts(header=value)
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        ReadTimeouts(body=value)
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        LLMConfig(model="m", timeout=value)
    monkeypatch.setenv("ITLR_HEADER_TIMEOUT", str(value))
    with pytest.raises(ConfigurationError, match="ITLR_HEADER_TIMEOUT"):
        ReadTimeouts.from_env()
    with pytest.raises(ConfigurationError, match="ITLR_X_TIMEOUT"):
        monkeypatch.setenv("ITLR_X_TIMEOUT", str(value))
        env_seconds("ITLR_X_TIMEOUT", 1.0, "a time-out")


def test_a_time_out_within_bounds_is_taken(monkeypatch) -> None:
    from itlr.service.timeouts import ReadTimeouts

    monkeypatch.setenv("ITLR_HEADER_TIMEOUT", "2.5")
    monkeypatch.setenv("ITLR_BODY_TIMEOUT", "3600")
    assert ReadTimeouts.from_env() == ReadTimeouts(2.5, 3600.0)
