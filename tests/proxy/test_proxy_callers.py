"""The proxy acts only as its caller (issue 57.1): every cluster read a caller triggers carries
that caller's credentials and nothing else, what is kept from it is kept per caller, index names
are checked and escaped, an unknown index is a one-line 404.

On the secured Elasticsearch (TLS, file-realm users, `reader` limited to `itlr-secure-a*`, `dls`
seeing one document of `itlr-secure-b*`), with the proxy holding admin credentials as a team
would run it; and on OpenSearch for what needs no security plugin (escaping, 404s, whose
searches healthz lists)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import itlr
from demo_backend import demo_backend
from foreign_index import documents
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.proxy.upstream import IndexConfig
from secured_elasticsearch import SecuredCluster

QUERY = '"vitamin D" AND NOT "bone health"'
LOGICAL = {"size": 3, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
COUNT = 30
A = "itlr-secure-a-callers"
B = "itlr-secure-b-callers"


def one_line_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text[:500]
    reason = response.json()["error"]["reason"]
    assert "\n" not in reason and "Traceback" not in response.text
    return str(reason)


class Sent:
    """What the proxy's own HTTP client sent upstream (method, path, Authorization)."""

    def __init__(self, app: Any) -> None:
        self.requests: list[tuple[str, str, str | None]] = []

        async def note(request: httpx.Request) -> None:
            path = request.url.raw_path.decode()
            self.requests.append((request.method, path, request.headers.get("authorization")))

        app.state.proxy.client.event_hooks["request"].append(note)


# -- on the secured Elasticsearch ---------------------------------------------------------


def _load(cluster: SecuredCluster, name: str, docs: list[dict[str, Any]]) -> None:
    lines = []
    for doc in docs:
        source = {k: v for k, v in doc.items() if k != "_id"}
        lines += [json.dumps({"index": {"_index": name, "_id": doc["_id"]}}), json.dumps(source)]
    with cluster.client() as http:
        http.delete(f"/{name}")
        settings = {"settings": {"number_of_shards": 1, "number_of_replicas": 0}}
        assert http.put(f"/{name}", json=settings).status_code == 200
        loaded = http.post(
            "/_bulk?refresh=true",
            content="\n".join(lines) + "\n",
            headers={"content-type": "application/x-ndjson"},
        )
        assert loaded.status_code == 200 and not loaded.json()["errors"], loaded.text[:300]


@pytest.fixture(scope="module")
def secured(secured_elasticsearch, corpus) -> Iterator[SecuredCluster]:
    """Indexes A and B, both back-filled as admin (the demo documents, `vec` / `body`)."""
    cluster = secured_elasticsearch
    for name in (A, B):
        _load(cluster, name, documents(corpus, COUNT))
        report = itlr.Index.backfill(
            name,
            text_field="body",
            vector_field="vec",
            url=cluster.url,
            engine="elasticsearch",
            ca_file=cluster.ca_file,
            user=cluster.admin[0],
            password=cluster.admin[1],
        )
        assert report.failed == {}, report.summary()
    yield cluster
    with cluster.client() as http:
        http.delete(f"/{A},{B}")


@pytest.fixture
def admin_proxy(secured, embedder) -> Iterator[tuple[str, Sent]]:
    """The proxy with admin credentials (ITLR_USER / ITLR_PASSWORD), as a team runs it."""
    upstream = Connection(
        secured.url, user=secured.admin[0], password=secured.admin[1], ca_file=secured.ca_file
    )
    app = create_proxy_app(
        upstream,
        embedder=embedder,
        indexes=(IndexConfig("itlr-secure-*", "vec", "body"),),
        script_check_seconds=3600,
    )
    sent = Sent(app)
    with serving(app) as url:
        yield url, sent


def healthz(url: str, auth: tuple[str, str] | None, *indexes: str) -> httpx.Response:
    return httpx.get(
        f"{url}/_itlr/healthz", params=[("index", i) for i in indexes], auth=auth, timeout=60
    )


@pytest.mark.elasticsearch
def test_healthz_counts_what_the_cluster_lets_each_caller_see(admin_proxy, secured) -> None:
    url, _ = admin_proxy
    # The cluster answers an anonymous caller 401: so does the proxy, it never counts as admin.
    for target in (B, "itlr-secure-*", f"{A},{B}"):
        anonymous = healthz(url, None, target)
        assert anonymous.status_code == 401, anonymous.text[:300]
        assert "documents" not in anonymous.text
    assert healthz(url, None).status_code == 401
    assert healthz(url, secured.reader, B).status_code == 403
    admin = healthz(url, secured.admin, B)
    assert admin.status_code == 200, admin.text
    assert admin.json()["coverage"][B]["documents"] == COUNT
    # A pattern resolves to what the caller may read: the reader's is index A alone.
    pattern = healthz(url, secured.reader, "itlr-secure-*-callers")
    assert pattern.status_code == 200, pattern.text
    assert pattern.json()["coverage"]["itlr-secure-*-callers"]["documents"] == COUNT
    if secured.dls is None:
        pytest.skip(f"no document-level security on this node: {secured.dls_error}")
    dls = healthz(url, secured.dls, B)
    assert dls.status_code == 200, dls.text
    assert dls.json()["coverage"][B]["documents"] == 1


@pytest.mark.elasticsearch
def test_a_layout_read_by_one_caller_does_not_serve_another(admin_proxy, secured) -> None:
    url, sent = admin_proxy
    as_admin = httpx.post(f"{url}/{B}/_search", json=LOGICAL, auth=secured.admin, timeout=120)
    # (This Elasticsearch build has no Painless: the logical search itself cannot run.)
    assert as_admin.status_code != 401, as_admin.text[:300]
    before = len(sent.requests)
    for auth, status in ((None, 401), (secured.reader, 403)):
        answer = httpx.post(f"{url}/{B}/_search", json=LOGICAL, auth=auth, timeout=120)
        assert answer.status_code == status, answer.text[:300]
        assert "hits" not in answer.json()
    admin_header = httpx.BasicAuth(*secured.admin)._auth_header
    triggered = sent.requests[before:]
    assert triggered, "the callers' mapping reads went upstream"
    assert all(authorization != admin_header for _, _, authorization in triggered), triggered
    assert not [r for r in triggered if "_scripts" in r[1]], triggered


@pytest.mark.elasticsearch
def test_healthz_and_metrics_show_no_caller_what_another_searched(admin_proxy, secured) -> None:
    url, _ = admin_proxy
    for name in (A, B):
        httpx.post(f"{url}/{name}/_search", json=LOGICAL, auth=secured.admin, timeout=120)
    admin = healthz(url, secured.admin).json()["coverage"]
    assert set(admin) == {A, B}
    reader = healthz(url, secured.reader)
    assert reader.status_code == 200 and reader.json()["coverage"] == {}, reader.text
    gauges = httpx.get(f"{url}/_itlr/metrics", auth=secured.reader, timeout=60).text
    assert f'index="{A}"' in gauges and B not in gauges
    anonymous = httpx.get(f"{url}/_itlr/metrics", timeout=60).text
    assert A not in anonymous and B not in anonymous


# -- on OpenSearch ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(opensearch_url, corpus, corpus_vectors, embedder) -> Iterator[str]:
    with demo_backend(
        opensearch_url, "itlr-callers", embedder, corpus[:40], corpus_vectors[:40]
    ) as backend:
        yield backend.index_name


@pytest.mark.opensearch
@pytest.mark.parametrize(
    "name",
    ["{index}/_mapping#", "{index}/_search?x", "..", "{index} x", "<logs-{{now/d}}>", "a,,b", ""],
    ids=["slash-hash", "slash-query", "dot-dot", "space", "date-math", "empty-part", "empty"],
)
def test_an_index_name_that_would_change_the_path_is_refused_in_one_line(
    proxy_url, opensearch_url, demo, name
) -> None:
    before = httpx.get(f"{opensearch_url}/{demo}/_mapping").json()
    given = name.format(index=demo)
    answer = httpx.get(f"{proxy_url}/_itlr/healthz", params={"index": given}, timeout=60)
    reason = one_line_error(answer, 400)
    assert "index" in reason
    assert httpx.get(f"{opensearch_url}/{demo}/_mapping").json() == before


@pytest.mark.opensearch
def test_an_unknown_index_is_a_one_line_404(proxy_url) -> None:
    missing = f"itlr-missing-{uuid.uuid4().hex[:8]}"
    named = httpx.get(f"{proxy_url}/_itlr/healthz", params={"index": missing}, timeout=60)
    assert missing in one_line_error(named, 404)
    searched = httpx.post(f"{proxy_url}/{missing}/_search", json=LOGICAL, timeout=60)
    assert searched.status_code == 404, searched.text[:300]
    assert searched.json()["error"]["type"] == "index_not_found_exception"


@pytest.fixture
def plain_index(opensearch_url) -> Iterator[str]:
    """An ordinary index (no itlr vectors): `*` matches it too."""
    name = f"itlr-callers-plain-{uuid.uuid4().hex[:6]}"
    httpx.put(f"{opensearch_url}/{name}/_doc/1?refresh=true", json={"text": "vitamin D"})
    yield name
    httpx.delete(f"{opensearch_url}/{name}")


@pytest.mark.opensearch
def test_healthz_names_every_index_pattern_without_a_500(proxy_url, demo, plain_index) -> None:
    for target in ("*", "_all", f"{demo},{plain_index}", f"{demo},itlr-missing-x*"):
        answer = httpx.get(f"{proxy_url}/_itlr/healthz", params={"index": target}, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        entry = answer.json()["coverage"][target]
        assert "documents" in entry or "\n" not in entry["error"], entry


@pytest.mark.opensearch
def test_healthz_lists_the_indexes_this_caller_searched_not_anothers(proxy_url, demo) -> None:
    alice = {"authorization": "Basic YWxpY2U6YWxpY2UtcHc="}
    bob = {"authorization": "Basic Ym9iOmJvYi1wdw=="}
    searched = httpx.post(f"{proxy_url}/{demo}/_search", json=LOGICAL, headers=alice, timeout=60)
    assert searched.status_code == 200, searched.text[:300]
    mine = httpx.get(f"{proxy_url}/_itlr/healthz", headers=alice, timeout=60).json()
    assert demo in mine["coverage"]
    theirs = httpx.get(f"{proxy_url}/_itlr/healthz", headers=bob, timeout=60).json()
    assert demo not in theirs["coverage"]
