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
