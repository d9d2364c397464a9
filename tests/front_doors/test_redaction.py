"""Secrets never printed (issue 57.5): every URL itlr shows goes through one redaction
(itlr.urls), whatever its form: no scheme (`admin:SEKRET@host:9200` printed the password),
userinfo on a later host of a list (printed), or on the first of several hosts (a 63-line
traceback). And `--no-verify-certs` / `ITLR_VERIFY_CERTS=false` says in one line that TLS is not
checked, where it said nothing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError
from itlr.openai_encoder import shown
from itlr.rewrite.llm import LLMConfig
from itlr.urls import redact_url, split_credentials

SECRET = "SEKRET-pw"
# Nothing listens on port 1 of loopback: every command fails fast, as `cannot reach`.
FORMS = {
    "no-scheme": f"admin:{SECRET}@127.0.0.1:1",
    "scheme": f"http://admin:{SECRET}@127.0.0.1:1",
    "first-of-two": f"http://admin:{SECRET}@127.0.0.1:1,http://127.0.0.1:2",
    "second-of-two": f"http://127.0.0.1:1,http://admin:{SECRET}@127.0.0.1:2",
    "second-no-scheme": f"127.0.0.1:1,admin:{SECRET}@127.0.0.1:2",
    "at-in-password": f"http://admin:{SECRET}@x@127.0.0.1:1",
    "escaped": f"http://admin:{SECRET}%40x@127.0.0.1:1/",
    "ipv6": f"http://admin:{SECRET}@[::1]:1",
}


@pytest.mark.parametrize("url", FORMS.values(), ids=FORMS.keys())
def test_every_form_of_a_url_loses_its_userinfo(url) -> None:
    redacted = redact_url(url)
    assert SECRET not in redacted and "admin" not in redacted
    assert "127.0.0.1" in redacted or "[::1]" in redacted
    assert shown(url) == redacted
    assert SECRET not in LLMConfig(model="m", base_url=url).shown_endpoint
    stripped, user, password = split_credentials(url)
    assert stripped == redacted and user == "admin" and password is not None
    assert password.startswith(SECRET)
    for connection in (Connection(url), Connection.from_env(url)):
        assert SECRET not in connection.url and SECRET not in repr(connection)
        assert connection.user == "admin" and connection.password == password


def test_two_hosts_naming_different_users_are_refused_without_showing_either() -> None:
    with pytest.raises(ConfigurationError) as refused:
        split_credentials(f"http://a:{SECRET}@h1:9200,http://b:other-{SECRET}@h2:9200")
    assert SECRET not in str(refused.value) and "different users" in str(refused.value)


@pytest.mark.parametrize("url", FORMS.values(), ids=FORMS.keys())
def test_the_cli_shows_no_password_and_no_traceback(url) -> None:
    result = CliRunner().invoke(app, ["search", "vitamin D", "--url", url, "--index", "x"])
    assert result.exit_code == 2, result.output
    assert SECRET not in result.output and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--no-verify-certs"], {}), ([], {"ITLR_VERIFY_CERTS": "false"})],
    ids=["flag", "env"],
)
def test_turning_tls_checks_off_says_so_in_one_line(flags, env) -> None:
    args = ["search", "vitamin D", "--url", "https://127.0.0.1:1", "--index", "x", *flags]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.output
    assert "not verified" in warnings[0] and "--ca-file" in warnings[0]


def test_tls_checked_says_nothing() -> None:
    args = ["search", "vitamin D", "--url", "https://127.0.0.1:1", "--index", "x"]
    result = CliRunner().invoke(app, args)
    assert "not verified" not in result.output
