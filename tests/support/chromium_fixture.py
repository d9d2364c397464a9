"""pytest plugin: a real headless Chromium, driven by Selenium, for the tests of itlr's pages.

Register it with ``pytest_plugins = ["chromium_fixture"]`` (tests/support is on ``pythonpath``).

Fixture ``browser`` -> a ``Browser`` over a fresh Chromium (its own empty profile) for one test.
The browser and its driver are Debian's ``chromium`` and ``chromium-driver`` (``scripts/test.sh``
installs them when missing), or the programs named by ``ITLR_CHROMIUM`` /
``ITLR_CHROMEDRIVER``. Without them the tests that ask are skipped with the reason, or fail when
``ITLR_REQUIRE_CHROMIUM=1`` (test.sh sets it). Also registers the marker ``chromium``.

Every message the page writes to the console at level SEVERE (an uncaught exception, a
rejected promise, ``console.error``, a failed request) fails the test at teardown, except the
ones a test says it expects (``Browser.expect``). Screenshots go to ``$ITLR_TEST_ARTIFACTS``
(default ``results/test-artifacts/`` in the checkout, which git ignores).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRUTHY = {"1", "true", "yes", "on"}
REQUIRE_ENV = "ITLR_REQUIRE_CHROMIUM"
# The machine's network is closed and a test must not depend on it: no background traffic.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("ITLR_TEST_ARTIFACTS") or ROOT / "results" / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _program(env: str, *names: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given if shutil.which(given) else None
    return next((found for name in names if (found := shutil.which(name))), None)


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_ENV, "").strip().lower() in TRUTHY:
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set)", pytrace=False)
    pytest.skip(f"{reason} (apt-get install chromium chromium-driver, or {REQUIRE_ENV}=1 to fail)")


class Browser:
    """A WebDriver plus what the page said on its console."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.console: list[dict[str, Any]] = []
        self._expected: list[re.Pattern[str]] = []

    def expect(self, pattern: str) -> None:
        """A SEVERE console message that matches `pattern` is this test's expectation (e.g. the
        401 the browser reports for a request made without the token)."""
        self._expected.append(re.compile(pattern))

    def read_console(self) -> list[dict[str, Any]]:
        self.console.extend(self.driver.get_log("browser"))
        return self.console

    def errors(self) -> list[str]:
        """SEVERE console messages no test expected."""
        return [
            entry["message"]
            for entry in self.read_console()
            if entry.get("level") == "SEVERE"
            and not any(p.search(entry["message"]) for p in self._expected)
        ]

    def screenshot(self, name: str) -> Path:
        path = artifacts_dir() / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot at {path}"
        return path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"chromium: needs headless Chromium and chromedriver ({REQUIRE_ENV}=1 to fail)"
    )


@pytest.fixture()
def browser() -> Iterator[Browser]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[dev]')")
    chromium = _program("ITLR_CHROMIUM", "chromium", "chromium-browser", "google-chrome")
    driver_path = _program("ITLR_CHROMEDRIVER", "chromedriver")
    if chromium is None or driver_path is None:
        _unavailable(f"no Chromium ({chromium}) or chromedriver ({driver_path}) on PATH")
    # Selenium Manager is never asked to download a browser or driver: both are given.
    os.environ.setdefault("SE_OFFLINE", "true")
    profile = tempfile.mkdtemp(prefix="itlr-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except Exception as failed:  # a broken install: say what, then skip or fail
        shutil.rmtree(profile, ignore_errors=True)
        _unavailable(f"Chromium did not start: {type(failed).__name__}: {failed}")
    driver.set_page_load_timeout(60)
    opened = Browser(driver)
    try:
        yield opened
        errors = opened.errors()
        assert not errors, f"the page logged errors on the console: {errors}"
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
