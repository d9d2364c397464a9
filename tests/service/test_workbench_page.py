"""The search workbench `itlr serve` shows at /, in a real headless Chromium: typed into as a
person would, on the embedded demo index and on a real OpenSearch index, checked against the
JSON API's own answers. Every test also fails on any error the page logs on the console (see
support/chromium_fixture.py); screenshots go to the test artifacts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import itlr
from itlr.service import create_app
from itlr.service.server import serving

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the `browser` fixture says so: a skip, or a failure when required
    pass

pytestmark = pytest.mark.chromium

QUERY = '"vitamin D benefits" AND NOT "bone health"'  # the README's
QUESTION = "What are the benefits of vitamin D, other than bone health?"
TOKEN = "a-client-token-of-32-characters!"
WAIT = 90  # seconds: two searches and a translate on a busy two-core machine


@dataclass
class Served:
    url: str
    index: itlr.Index
    engine: str

    def api(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(f"{self.url}/{path}", json=body, timeout=WAIT)
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture(scope="module", params=["embedded", "opensearch"])
def any_index(request: pytest.FixtureRequest, demo_index) -> itlr.Index:
    """The demo corpus: embedded, or in a real OpenSearch."""
    if request.param == "embedded":
        return demo_index
    backend = request.getfixturevalue("opensearch_demo")
    url = request.getfixturevalue("opensearch_url")
    return itlr.Index.open(backend.index_name, url=url, create=False)


@pytest.fixture(scope="module")
def workbench(any_index) -> Iterator[Served]:
    with serving(create_app(any_index)) as url:
        yield Served(url, any_index, any_index.engine)


@pytest.fixture(scope="module")
def embedded_workbench(demo_index) -> Iterator[Served]:
    with serving(create_app(demo_index)) as url:
        yield Served(url, demo_index, "embedded")


# -- driving the page ------------------------------------------------------------------------


def open_page(browser, url: str) -> None:
    browser.driver.get(f"{url}/")
    WebDriverWait(browser.driver, WAIT).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    )


def searches_done(driver) -> int:
    return int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-searches") or 0)


def run_search(
    browser,
    text: str,
    *,
    kind: str = "none",
    mode: str = "knn",
    k: int = 10,
    hard: str = "",
    rule: str = "relative",
) -> None:
    """Fill the form as a person would, press Enter, and wait for the search to finish."""
    driver = browser.driver
    Select(driver.find_element(By.ID, "input-kind")).select_by_value(kind)
    Select(driver.find_element(By.ID, "mode")).select_by_value(mode)
    Select(driver.find_element(By.ID, "hard-filter-rule")).select_by_value(rule)
    for field, value in (("k", str(k)), ("hard-filter", hard)):
        box = driver.find_element(By.ID, field)
        box.clear()
        if value:
            box.send_keys(value)
    query = driver.find_element(By.ID, "query")
    query.clear()
    query.send_keys(text)
    before = searches_done(driver)
    query.send_keys("\n")  # Enter searches
    WebDriverWait(driver, WAIT).until(lambda d: searches_done(d) > before)


def shown(driver, element_id: str) -> bool:
    return driver.find_element(By.ID, element_id).get_attribute("hidden") is None


def column(driver, name: str) -> list[Any]:
    return driver.find_elements(By.CSS_SELECTOR, f"#{name}-hits li.hit")


def bar_readings(hit) -> dict[str, dict[str, Any]]:
    """Each term bar of a hit: what it says, and how full it is drawn."""
    readings = {}
    for bar in hit.find_elements(By.CSS_SELECTOR, ".bar"):
        track = bar.find_element(By.CSS_SELECTOR, ".bar-track").size["width"]
        fill = bar.find_element(By.CSS_SELECTOR, ".bar-fill").size["width"]
        readings[bar.get_attribute("data-term")] = {
            "negated": bar.get_attribute("data-negated") == "true",
            "label": bar.find_element(By.CSS_SELECTOR, ".bar-label").text,
            "truth": float(bar.get_attribute("data-truth")),
            "drawn": fill / track,
        }
    return readings


# -- the tests -------------------------------------------------------------------------------


def test_the_readme_query_shows_dense_and_itlr_side_by_side_with_term_bars(
    browser, workbench: Served
) -> None:
    driver = browser.driver
    open_page(browser, workbench.url)
    info = driver.find_element(By.ID, "index-info").text
    assert workbench.index.name in info and workbench.engine in info
    run_search(browser, QUERY)
    assert not shown(driver, "error")
    expected = workbench.api("search", {"query": QUERY, "dense": True, "explain": True})

    itlr_hits, dense_hits = column(driver, "itlr"), column(driver, "dense")
    assert [h.get_attribute("data-id") for h in itlr_hits] == [h["id"] for h in expected["hits"]]
    assert [h.get_attribute("data-id") for h in dense_hits] == [
        h["id"] for h in expected["dense"]["hits"]
    ]
    assert len(itlr_hits) == len(dense_hits) == 10

    chips = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#terms .term")]
    assert chips == ["vitamin D benefits", "NOT bone health"]
    answers = [*expected["hits"], *expected["dense"]["hits"]]
    for hit, answer in zip([*itlr_hits, *dense_hits], answers, strict=True):
        bars = bar_readings(hit)
        assert set(bars) == {"vitamin D benefits", "bone health"}
        assert bars["bone health"]["negated"] and bars["bone health"]["label"] == "NOT bone health"
        assert not bars["vitamin D benefits"]["negated"]
        for term, bar in bars.items():
            assert bar["truth"] == pytest.approx(answer["truths"][term], abs=1e-9)
            assert bar["drawn"] == pytest.approx(min(1.0, max(0.0, bar["truth"])), abs=0.02)
        # The terms' words are marked in the text, positive and NOT terms apart.
        marks = hit.find_elements(By.CSS_SELECTOR, ".hit-text mark")
        assert {m.text.lower() for m in marks} <= {"vitamin", "d", "benefits", "bone", "health"}
    assert driver.find_elements(By.CSS_SELECTOR, "#itlr-hits mark.pos")
    assert driver.find_elements(By.CSS_SELECTOR, "#dense-hits mark.neg")
    # What the comparison is for: dense ranks passages itlr leaves out of its top k.
    missing = driver.find_elements(By.CSS_SELECTOR, "#dense-hits .badge.missing")
    assert missing and all(b.text == "not in itlr's top k" for b in missing)

    # The request for Dev Tools is what /translate gives for the same query and options.
    assert shown(driver, "request")
    translated = workbench.api("translate", {"query": expected["query"], "k": 10, "mode": "knn"})
    shown_request = driver.find_element(By.ID, "request-text").text
    assert shown_request == translated["requests"][-1]["console"].strip()
    assert shown_request.startswith(f"GET {workbench.index.name}/_search")

    picture = browser.screenshot(f"workbench-{workbench.engine}")
    assert picture.stat().st_size > 20_000


def test_a_syntax_error_shows_a_caret_under_its_position(browser, workbench) -> None:
    browser.expect(r"status of 422")  # the browser reports the API's 422 on its console
    driver = browser.driver
    open_page(browser, workbench.url)
    broken = '"vitamin D" AND (NOT "bones"'
    run_search(browser, broken)
    assert shown(driver, "error")
    message = driver.find_element(By.ID, "error-message").text
    assert message.startswith("syntax error at position 16:")
    caret = driver.execute_script("return document.getElementById('caret').textContent")
    assert caret.split("\n") == [broken, " " * 16 + "^"]
    # The caret sits under the character, and the query box selects it.
    assert driver.execute_script("return document.getElementById('query').selectionStart") == 16
    browser.screenshot(f"workbench-syntax-error-{workbench.engine}")


def test_the_page_asks_for_the_token_when_the_service_has_one(browser, any_index) -> None:
    browser.expect(r"status of 401")  # the requests made before the token was given
    driver = browser.driver
    with serving(create_app(any_index, token=TOKEN)) as url:
        driver.get(f"{url}/")
        wait = WebDriverWait(driver, WAIT)
        asking = lambda d: d.find_element(By.ID, "token-dialog").get_attribute("open") is not None  # noqa: E731
        wait.until(asking)
        assert "needs its client token" in driver.find_element(By.ID, "token-message").text
        browser.screenshot(f"workbench-token-prompt-{any_index.engine}")

        # Dismissed: the page says what it needs, and asks again at the next search.
        driver.find_element(By.ID, "token-input").send_keys(Keys.ESCAPE)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        assert not asking(driver) and shown(driver, "error")
        assert "needs its client token" in driver.find_element(By.ID, "error-message").text
        query = driver.find_element(By.ID, "query")
        query.send_keys(QUERY + "\n")
        wait.until(asking)

        driver.find_element(By.ID, "token-input").send_keys("a-wrong-token-of-enough-length")
        driver.find_element(By.ID, "token-submit").click()
        wait.until(lambda d: "refused" in d.find_element(By.ID, "token-message").text)
        assert asking(driver)

        driver.find_element(By.ID, "token-input").send_keys(TOKEN)
        driver.find_element(By.ID, "token-submit").click()
        wait.until(lambda d: searches_done(d) == 1)
        assert not asking(driver) and not shown(driver, "error")
        assert len(column(driver, "itlr")) == 10 and len(column(driver, "dense")) == 10
        wait.until(lambda d: "338 documents" in d.find_element(By.ID, "index-info").text)
        # Kept for this tab only, not in a cookie the browser would send to anyone.
        assert driver.get_cookies() == []
        stored = driver.execute_script("return sessionStorage.getItem('itlr-token')")
        assert stored == TOKEN


def test_a_question_is_rewritten_and_the_rewritten_query_shown(browser, embedded_workbench) -> None:
    driver = browser.driver
    open_page(browser, embedded_workbench.url)
    run_search(browser, QUESTION, kind="rules")
    assert shown(driver, "rewritten")
    assert driver.find_element(By.ID, "rewrite-method").text == "rules"
    rewritten = driver.find_element(By.ID, "rewritten-query").text
    assert rewritten == '("benefits of vitamin D" AND NOT "bone health")'
    # Dense embeds the question itself; itlr runs the rewritten query.
    assert driver.find_element(By.ID, "dense-meta").text == f"embedded whole: {QUESTION}"
    expected = embedded_workbench.api("search", {"query": QUESTION, "rewrite": "rules"})
    ids = [h.get_attribute("data-id") for h in column(driver, "itlr")]
    assert ids == [h["id"] for h in expected["hits"]]
    # No LLM configured: the page does not offer it.
    llm = driver.find_element(By.CSS_SELECTOR, '#input-kind option[value="llm"]')
    assert llm.get_attribute("disabled") is not None


def test_a_question_goes_to_the_llm_the_service_was_started_with(browser, demo_index) -> None:
    from itlr.rewrite.llm import LLMConfig
    from llm_server import FakeLLMServer, Reply

    answer = '"vitamin D" AND NOT ("bone health" OR "calcium")'
    driver = browser.driver
    with FakeLLMServer() as llm:
        llm.respond_with(lambda _request: Reply(answer))
        config = LLMConfig(model="a-model", base_url=llm.base_url, timeout=30.0, retries=1)
        with serving(create_app(demo_index, llm=config)) as url:
            open_page(browser, url)
            option = driver.find_element(By.CSS_SELECTOR, '#input-kind option[value="llm"]')
            assert option.get_attribute("disabled") is None
            run_search(browser, QUESTION, kind="llm")
        assert llm.requests and QUESTION in llm.requests[0]["messages"][-1]["content"]
    assert not shown(driver, "error")
    assert driver.find_element(By.ID, "rewrite-method").text == "llm"
    shown_query = driver.find_element(By.ID, "rewritten-query").text
    assert shown_query == '("vitamin D" AND NOT ("bone health" OR "calcium"))'
    chips = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#terms .term")]
    assert chips == ["vitamin D", "NOT bone health", "NOT calcium"]
    bars = bar_readings(column(driver, "itlr")[0])
    assert [bars[t]["negated"] for t in ("vitamin D", "bone health", "calcium")] == [
        False,
        True,
        True,
    ]


def test_mode_k_and_hard_filter_reach_the_search(browser, embedded_workbench) -> None:
    driver = browser.driver
    open_page(browser, embedded_workbench.url)
    # The absolute rule: the relative one (the default) drops none of the demo's dense top 5.
    run_search(browser, QUERY, mode="exact", k=5, hard="0.5", rule="absolute")
    body = {
        "query": QUERY,
        "mode": "exact",
        "k": 5,
        "hard_filter": 0.5,
        "hard_filter_rule": "absolute",
    }
    expected = embedded_workbench.api("search", {**body, "dense": True})
    assert [h.get_attribute("data-id") for h in column(driver, "itlr")] == [
        h["id"] for h in expected["hits"]
    ]
    assert len(column(driver, "dense")) == 5
    dropped = [h["id"] for h in expected["dense"]["hits"] if h["itlr_score"] is None]
    assert dropped, "no dense hit dropped by the hard filter: nothing to check"
    badges = driver.find_elements(By.CSS_SELECTOR, "#dense-hits .badge.dropped")
    assert len(badges) == len(dropped)
    assert all(b.text == "dropped by the hard filter" for b in badges)
    translated = embedded_workbench.api("translate", body)
    assert driver.find_element(By.ID, "request-text").text == (
        translated["requests"][-1]["console"].strip()
    )


def test_the_filter_control_filters_both_columns(browser, embedded_workbench) -> None:
    driver = browser.driver
    open_page(browser, embedded_workbench.url)
    driver.find_element(By.CSS_SELECTOR, "#filter-details summary").click()
    box = driver.find_element(By.ID, "filter")
    box.send_keys('{"term": {"topic": "running"}')  # one brace short
    run_search(browser, QUERY, k=5)
    assert shown(driver, "error")
    assert driver.find_element(By.ID, "error-message").text.startswith("the filter is not JSON")
    assert not column(driver, "itlr") and not column(driver, "dense")

    box.send_keys("}")
    run_search(browser, QUERY, k=5)
    assert not shown(driver, "error")
    body = {"query": QUERY, "k": 5, "filter": {"term": {"topic": "running"}}}
    expected = embedded_workbench.api("search", {**body, "dense": True})
    for name, hits in (("itlr", expected["hits"]), ("dense", expected["dense"]["hits"])):
        shown_hits = column(driver, name)
        assert [h.get_attribute("data-id") for h in shown_hits] == [h["id"] for h in hits]
        assert len(shown_hits) == 5
        for hit in shown_hits:
            assert hit.find_element(By.CSS_SELECTOR, ".hit-fields").text == "topic: running"


def test_warnings_are_shown(browser, embedded_workbench) -> None:
    driver = browser.driver
    open_page(browser, embedded_workbench.url)
    query = '"sunlight" OR NOT "vitamin D"'
    run_search(browser, query)
    expected = embedded_workbench.api("search", {"query": query})
    assert expected["warnings"]
    assert shown(driver, "warnings-box")
    items = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#warnings li")]
    assert items == expected["warnings"]


def test_copy_puts_the_request_on_the_clipboard(browser, embedded_workbench) -> None:
    driver = browser.driver
    open_page(browser, embedded_workbench.url)
    driver.execute_cdp_cmd(
        "Browser.grantPermissions",
        {
            "origin": embedded_workbench.url,
            "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"],
        },
    )
    run_search(browser, QUERY)
    driver.find_element(By.ID, "copy-request").click()
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_element(By.ID, "copy-status").text == "copied"
    )
    copied = driver.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('failed: ' + e))"
    )
    assert copied == driver.execute_script(
        "return document.getElementById('request-text').textContent"
    )
    method_path, body = copied.split("\n", 1)
    assert method_path.startswith("GET ") and "script_score" in json.loads(body)["query"]


def test_a_document_s_markup_is_shown_as_text(browser, tmp_path) -> None:
    """Document text and ids come from whoever wrote the index: never run as the page."""
    hostile = itlr.Index.open(str(tmp_path / "hostile"), create=True)
    attack = "<img src=x onerror=\"document.body.dataset.pwned='img'\">"
    report = hostile.add(
        [
            {"id": "<b>bold-id</b>", "text": f"Vitamin D helps immunity {attack} and mood."},
            {"id": "plain", "text": "Bone health needs calcium and vitamin D."},
            {"id": "other", "text": "<script>document.body.dataset.pwned='script'</script>"},
        ]
    )
    assert report.added == 3
    with serving(create_app(hostile)) as url:
        open_page(browser, url)
        run_search(browser, '"vitamin D" OR "script"')
        driver = browser.driver
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-pwned") is None
        for name in ("itlr", "dense"):
            hits = driver.find_element(By.ID, f"{name}-hits")
            assert not hits.find_elements(By.CSS_SELECTOR, "img, script, b")
            assert attack in hits.text and "<b>bold-id</b>" in hits.text


def test_docs_shows_swagger_ui_from_the_service_alone(browser, embedded_workbench) -> None:
    driver = browser.driver
    driver.get(f"{embedded_workbench.url}/docs")
    WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock"))
    paths = {e.text for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/search", "/translate", "/parse", "/rewrite", "/healthz"} <= paths
    loaded = driver.execute_script(
        "return performance.getEntriesByType('resource').map((entry) => entry.name)"
    )
    assert loaded and all(u.startswith(f"{embedded_workbench.url}/") for u in loaded), loaded
    browser.screenshot("docs-swagger-ui")


def test_the_console_check_catches_an_uncaught_javascript_error(
    browser, embedded_workbench
) -> None:
    """What every test here relies on: an error the page throws reaches `browser.errors()`."""
    open_page(browser, embedded_workbench.url)
    browser.driver.execute_script(
        "setTimeout(() => { throw new Error('itlr-console-check'); }, 0);"
        "Promise.reject(new Error('itlr-rejected-check'));"
    )
    WebDriverWait(browser.driver, WAIT).until(lambda _: len(browser.errors()) >= 2)
    errors = browser.errors()
    assert any("itlr-console-check" in e for e in errors), errors
    assert any("itlr-rejected-check" in e for e in errors), errors
    browser.expect("itlr-console-check|itlr-rejected-check")  # so the teardown check passes
