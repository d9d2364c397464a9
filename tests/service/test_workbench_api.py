"""What the workbench page needs from the JSON API, for every client: the dense baseline beside
itlr's hits, the Dev Tools text of the request, the rewriters on offer; and the pages themselves
(the workbench at /, Swagger UI at /docs) served from the package, nothing from elsewhere."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.rewrite.llm import LLMConfig
from itlr.service import create_app
from itlr.service.pages import DOCS_FILES, STATIC, SWAGGER_UI, WORKBENCH_FILES
from itlr.service.server import serving
from served_process import first_answer

runner = CliRunner()
QUERY = '"vitamin D benefits" AND NOT "bone health"'
QUESTION = "What are the benefits of vitamin D, other than bone health?"
TOKEN = "a-client-token-of-32-characters!"


def _by_id(hits: list[dict]) -> dict[str, dict]:
    return {hit["id"]: hit for hit in hits}


def check_dense_baseline(client: httpx.Client, index: itlr.Index, body: dict) -> dict:
    """The answer with `dense` holds itlr's answer unchanged and, beside it, the top k of plain
    dense retrieval of the text, each hit with the truths and score itlr gives it."""
    body = {**body, "explain": True}  # a cluster's hits carry truths with explain only
    alone = client.post("/search", json=body)
    answer = client.post("/search", json={**body, "dense": True})
    assert alone.status_code == 200 and answer.status_code == 200, answer.text
    compared = answer.json()
    dense = compared.pop("dense")
    assert compared == alone.json()
    expected = index.dense(body["query"], k=body.get("k", 10), filter=body.get("filter"))
    assert dense["text"] == body["query"]
    assert [hit["id"] for hit in dense["hits"]] == [hit.id for hit in expected]
    assert [hit["score"] for hit in dense["hits"]] == pytest.approx([h.score for h in expected])
    # The same document has the same truths in both columns, and itlr's own score.
    itlr_hits = _by_id(compared["hits"])
    shared = [hit for hit in dense["hits"] if hit["id"] in itlr_hits]
    assert shared, "no document in both top k: the comparison below checks nothing"
    for hit in shared:
        mine = itlr_hits[hit["id"]]
        assert hit["truths"] == pytest.approx(mine["truths"], abs=1e-6)
        assert hit["itlr_score"] == pytest.approx(mine["score"], abs=1e-6)
    for hit in dense["hits"]:
        assert set(hit["truths"]) == set(compared["terms"]), hit
    return dense


def test_search_with_dense_gives_the_dense_baseline_beside_the_same_itlr_hits(
    service, demo_index
) -> None:
    dense = check_dense_baseline(service, demo_index, {"query": QUERY, "k": 10})
    # The point of the page: dense ranks bone-health passages that itlr pushes down.
    assert any(hit["truths"]["bone health"] > 0.5 for hit in dense["hits"])


def test_dense_hits_the_hard_filter_drops_have_a_null_itlr_score_and_their_truths(
    service, demo_index
) -> None:
    # The absolute rule: the relative one (the default) drops none of the demo's dense top 10.
    body = {"query": QUERY, "k": 10, "hard_filter": 0.5, "hard_filter_rule": "absolute"}
    dense = service.post("/search", json={**body, "dense": True}).json()["dense"]
    # The score each document gets, independently: every document, exact, same hard filter.
    everything = demo_index.search(
        QUERY, k=demo_index.count(), mode="exact", hard_filter=0.5, hard_filter_rule="absolute"
    )
    kept = {hit.id: hit.score for hit in everything}
    dropped = [hit for hit in dense["hits"] if hit["id"] not in kept]
    assert dropped, "no dense hit is dropped by the hard filter: the test checks nothing"
    for hit in dense["hits"]:
        if hit["id"] in kept:
            assert hit["itlr_score"] == pytest.approx(kept[hit["id"]], abs=1e-6)
        else:
            assert hit["itlr_score"] is None
            assert set(hit["truths"]) == {"vitamin D benefits", "bone health"}
            assert hit["truths"]["bone health"] >= 0.5 - 1e-9


def test_dense_with_a_question_embeds_the_question_and_answers_the_rewritten_query(
    service, demo_index
) -> None:
    answer = service.post("/search", json={"query": QUESTION, "rewrite": "rules", "dense": True})
    assert answer.status_code == 200, answer.text
    payload = answer.json()
    assert payload["rewrite"]["question"] == QUESTION
    assert payload["query"] == '("benefits of vitamin D" AND NOT "bone health")'
    assert payload["dense"]["text"] == QUESTION
    expected = demo_index.dense(QUESTION, k=10)
    assert [hit["id"] for hit in payload["dense"]["hits"]] == [hit.id for hit in expected]


def test_the_dense_baseline_keeps_to_the_search_filter(service, demo_index) -> None:
    body = {"query": QUERY, "k": 5, "filter": {"term": {"topic": "vitamin_d"}}}
    dense = check_dense_baseline(service, demo_index, body)
    assert len(dense["hits"]) == 5
    assert {hit["fields"]["topic"] for hit in dense["hits"]} == {"vitamin_d"}


def test_a_dense_baseline_deeper_than_a_filter_may_hold_has_every_hit_s_truths(
    tmp_path, embedder
) -> None:
    """k up to 10,000, a filter at most max_filter_values (1,024) ids: the truths of the dense
    hits are computed in as many searches as that needs, not refused as a filter nobody sent."""
    import numpy as np

    from itlr.engines.embedded import EmbeddedBackend
    from itlr.limits import LIMITS

    size = LIMITS.max_filter_values + 76
    backend = EmbeddedBackend.create(tmp_path / "deep", embedder.name, embedder.dims)
    vectors = np.random.default_rng(7).standard_normal((size, embedder.dims)).astype(np.float32)
    ids = [f"doc-{n:04d}" for n in range(size)]
    backend.add(ids, [f"passage {n}" for n in range(size)], vectors, [{}] * size)
    index = itlr.Index.open(str(backend.path), create=False)
    with serving(create_app(index)) as url:
        body = {"query": QUERY, "k": size, "mode": "exact", "dense": True}
        answer = httpx.post(f"{url}/search", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    dense, hits = answer.json()["dense"]["hits"], answer.json()["hits"]
    assert len(dense) == len(hits) == size
    itlr_scores = {hit["id"]: hit["score"] for hit in hits}
    for hit in dense:
        assert set(hit["truths"]) == {"vitamin D benefits", "bone health"}
        assert hit["itlr_score"] == pytest.approx(itlr_scores[hit["id"]], abs=1e-6)


def test_dense_that_is_not_a_boolean_is_a_422(service) -> None:
    answer = service.post("/search", json={"query": QUERY, "dense": "yes please"})
    assert answer.status_code == 422 and "dense" in answer.json()["error"]


def test_translate_gives_the_dev_tools_text_itlr_translate_prints(service, demo_index) -> None:
    answer = service.post("/translate", json={"query": QUERY, "k": 7, "hard_filter": 0.5})
    assert answer.status_code == 200, answer.text
    (search,) = answer.json()["requests"]
    name = demo_index.spec.index_name
    printed = runner.invoke(
        cli, ["translate", QUERY, "-i", name, "-k", "7", "--hard-filter", "0.5"]
    )
    assert printed.exit_code == 0, printed.output
    assert search["console"] == printed.stdout.strip()
    assert search["console"].startswith(f"GET {name}/_search\n")
    assert json.loads(search["console"].split("\n", 1)[1]) == search["body"]


def test_healthz_names_the_rewriters_a_search_may_ask_for(service, demo_index) -> None:
    assert service.get("/healthz").json()["rewriters"] == ["rules"]
    llm = LLMConfig(model="any-model", base_url="http://127.0.0.1:9/v1")
    with serving(create_app(demo_index, llm=llm)) as url:
        assert httpx.get(f"{url}/healthz").json()["rewriters"] == ["rules", "llm"]


# -- the pages -------------------------------------------------------------------------------


def test_the_workbench_is_served_without_the_token_and_everything_else_is_not(demo_index) -> None:
    """The page's three files hold no data; the API the page calls stays behind the token."""
    with serving(create_app(demo_index, token=TOKEN)) as url:
        for path, file in WORKBENCH_FILES.items():
            page = httpx.get(f"{url}{path}")
            assert page.status_code == 200, path
            assert page.content == file.read_bytes()
            assert httpx.head(f"{url}{path}").status_code == 200
        refused = [
            httpx.post(f"{url}/search", json={"query": QUERY}),
            httpx.post(f"{url}/", json={"query": QUERY}),
            httpx.get(f"{url}/healthz"),
            httpx.get(f"{url}/docs"),
            httpx.get(f"{url}/openapi.json"),
            httpx.get(f"{url}/workbench/"),
            httpx.get(f"{url}/workbench/nothing.js"),
            httpx.get(f"{url}/workbench/%2e%2e/healthz"),
        ]
        for answer in refused:
            assert answer.status_code == 401, (answer.request.url, answer.status_code)
        with_token = httpx.post(
            f"{url}/search", json={"query": QUERY}, headers={"X-Itlr-Token": TOKEN}
        )
        assert with_token.status_code == 200


class _References(HTMLParser):
    """Every URL an HTML page loads or links to."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.urls.append(value)


def test_the_pages_load_nothing_from_another_origin(service) -> None:
    for path in ("/", "/docs"):
        page = service.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
        assert "script-src 'self';" in policy  # no inline script, no other origin
        parser = _References()
        parser.feed(page.text)
        assert parser.urls, path
        for url in parser.urls:
            # Relative (so a path prefix in front of the service works) or a data: URL.
            assert url.startswith("data:") or not re.match(r"^([a-z]+:)?//|^/", url), url
            if not url.startswith("data:"):
                assert service.get(f"/{url}").status_code == 200, url
    for script in ("/workbench/workbench.js", "/docs/swagger-init.js"):
        assert not re.search(r"https?://", service.get(script).text), script


def test_docs_serves_swagger_ui_from_the_package_with_its_licence(service) -> None:
    for path, file in DOCS_FILES.items():
        answer = service.get(path)
        assert answer.status_code == 200, path
        assert answer.content == file.read_bytes(), path
    assert "Apache License" in service.get("/docs/LICENSE").text
    assert (
        service.get("/docs/swagger-ui-bundle.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    version = (SWAGGER_UI / "VERSION").read_text().split()
    assert version[0] == "swagger-ui-dist" and version[2].startswith("sha512-")
    # The validator badge would send the schema to validator.swagger.io: it is off.
    assert "validatorUrl: null" in (STATIC / "swagger-init.js").read_text()
    # No page left that loads Swagger UI or ReDoc from a CDN.
    assert service.get("/redoc").status_code == 404
    assert "cdn" not in service.get("/docs").text.lower()


def test_every_page_file_is_package_data(tmp_path: Path) -> None:
    """The files are under plugin/itlr, which the wheel carries whole (hatch's `packages`);
    tests/install builds the wheel and looks for them."""
    package = Path(itlr.__file__).parent
    for file in (*WORKBENCH_FILES.values(), *DOCS_FILES.values()):
        assert file.is_file() and package in file.parents, file


# -- OpenSearch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_index(opensearch_demo, opensearch_url) -> itlr.Index:
    return itlr.Index.open(opensearch_demo.index_name, url=opensearch_url, create=False)


@pytest.mark.opensearch
def test_dense_baseline_on_opensearch(cluster_index) -> None:
    with serving(create_app(cluster_index)) as url, httpx.Client(base_url=url, timeout=60) as c:
        dense = check_dense_baseline(c, cluster_index, {"query": QUERY, "k": 10})
        assert any(hit["truths"]["bone health"] > 0.5 for hit in dense["hits"])
        filtered = {
            "query": QUERY,
            "k": 10,
            "hard_filter": 0.5,
            "hard_filter_rule": "absolute",
            "dense": True,
        }
        hits = c.post("/search", json=filtered).json()["dense"]["hits"]
        assert any(hit["itlr_score"] is None for hit in hits)
        assert all(set(hit["truths"]) == {"vitamin D benefits", "bone health"} for hit in hits)


def test_itlr_serve_serves_the_workbench_and_says_where(demo_index) -> None:
    import subprocess
    import sys

    from itlr.service.server import free_port

    port = free_port()
    command = [sys.executable, "-c", "from itlr.cli import app; app()", "serve"]
    command += ["--index", str(demo_index.spec.index_name), "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--log-level", "warning"], stderr=subprocess.PIPE, text=True
    )
    try:
        page = first_answer(server, f"http://127.0.0.1:{port}/")
        assert page.status_code == 200 and page.content == WORKBENCH_FILES["/"].read_bytes()
        bundle = httpx.get(f"http://127.0.0.1:{port}/docs/swagger-ui-bundle.js", timeout=30)
        assert bundle.content == DOCS_FILES["/docs/swagger-ui-bundle.js"].read_bytes()
    finally:
        server.terminate()
        _, said = server.communicate(timeout=60)
    assert f"http://127.0.0.1:{port} (workbench at /, API docs at /docs)" in said
