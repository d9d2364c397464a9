"""The query-bar proxy sees every body the engine would (issue 56.5), in front of a real
OpenSearch: a gzip or deflate body, a `wrapper` query, a YAML or CBOR body, a `source=` in YAML,
`terminate_after` (body, URL, `_msearch`), `_rank_eval` / `_reindex` and the other APIs that take
a query. Each was a 200 whose hits ignored the logical clause, or a 500 of the proxy's own; each
is now ranked by the clause, or refused in one line naming what works."""

from __future__ import annotations

import base64
import gzip
import json
import os
import zlib
from typing import Any

import cbor2
import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.opensearch

LOGICAL = '"vitamin D benefits" AND NOT "bone health"'
CLAUSE = {"query_string": {"query": f"itlr:({LOGICAL})"}}
SEARCH = {"size": 5, "query": CLAUSE}
JSON_TYPE = {"content-type": "application/json"}
NDJSON = {"content-type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def index(opensearch_demo) -> str:
    return str(opensearch_demo.index_name)


@pytest.fixture(scope="module")
def ranked(client, index) -> list[str]:
    """The ids a plain JSON logical search ranks first: what every other spelling must give."""
    return ids(client.post(f"/{index}/_search", json=SEARCH))


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text[:400]
    return [hit["_id"] for hit in response.json()["hits"]["hits"]]


def refused(response: httpx.Response, status: int, *words: str) -> str:
    """An error in the cluster's shape, one line, holding every word; its reason."""
    assert response.status_code == status, response.text[:400]
    body = response.json()
    assert body["status"] == status and body["error"]["type"].startswith("itlr_")
    reason = str(body["error"]["reason"])
    assert "\n" not in reason and "Traceback" not in response.text
    for word in words:
        assert word in reason, reason
    return reason


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


# -- Content-Encoding --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
    ],
    ids=["gzip", "x-gzip", "upper-case", "deflate-zlib", "deflate-raw"],
)
def test_a_compressed_search_body_is_ranked_by_its_clause(
    client, index, ranked, encoding, pack
) -> None:
    body = pack(json.dumps(SEARCH).encode())
    response = client.post(
        f"/{index}/_search", content=body, headers={**JSON_TYPE, "content-encoding": encoding}
    )
    assert ids(response) == ranked


def test_a_compressed_msearch_is_ranked_by_its_clause(client, index, ranked) -> None:
    lines = f'{{"index": "{index}"}}\n{json.dumps(SEARCH)}\n'.encode()
    response = client.post(
        "/_msearch", content=gzip.compress(lines), headers={**NDJSON, "content-encoding": "gzip"}
    )
    assert response.status_code == 200, response.text[:300]
    assert [hit["_id"] for hit in response.json()["responses"][0]["hits"]["hits"]] == ranked


def test_a_compressed_body_without_a_clause_passes_through_as_sent(
    client, index, opensearch_url
) -> None:
    search = {"size": 3, "query": {"match": {"text": "sleep"}}}
    headers = {**JSON_TYPE, "content-encoding": "gzip"}
    through = client.post(
        f"/{index}/_search", content=gzip.compress(json.dumps(search).encode()), headers=headers
    )
    direct = httpx.post(f"{opensearch_url}/{index}/_search", json=search)
    assert ids(through) == ids(direct)


def test_a_decompression_bomb_is_a_413_naming_the_limit(client, index) -> None:
    # 2 MiB of a body nested in 4 KiB of gzip: refused when the inflated size passes the limit.
    bomb = gzip.compress(b'{"query": {"match_all": {}}, "x": "' + b" " * (2 << 20) + b'"}')
    assert len(bomb) < 8192
    response = client.post(
        f"/{index}/_search", content=bomb, headers={**JSON_TYPE, "content-encoding": "gzip"}
    )
    refused(response, 413, "inflates to over", "max_body_bytes")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"this is not gzip at all", "not valid compressed data"),
        (gzip.compress(json.dumps(SEARCH).encode())[:-12], "cut short"),
        (gzip.compress(b"{}") + b"trailing", "after the end"),
    ],
    ids=["garbage", "truncated", "trailing-data"],
)
def test_a_broken_gzip_body_is_a_400(client, index, body, words) -> None:
    response = client.post(
        f"/{index}/_search", content=body, headers={**JSON_TYPE, "content-encoding": "gzip"}
    )
    refused(response, 400, words)


def test_a_content_encoding_the_proxy_cannot_read_is_a_415_on_a_search(client, index) -> None:
    response = client.post(
        f"/{index}/_search",
        content=json.dumps(SEARCH).encode(),
        headers={**JSON_TYPE, "content-encoding": "br"},
    )
    refused(response, 415, "'br'", "gzip or deflate")


# -- YAML, CBOR, SMILE -------------------------------------------------------------------------

YAML_SEARCH = f"size: 5\nquery:\n  query_string:\n    query: 'itlr:({LOGICAL})'\n"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/yaml", YAML_SEARCH.encode()),
        # A YAML escape: the bytes never spell the field, the text the engine reads does.
        ("application/yaml", b'query:\n  query_string:\n    query: "\\x69tlr:(vitamin)"\n'),
        ("application/cbor", cbor2.dumps(SEARCH)),
        ("application/vnd.elasticsearch+cbor; compatible-with=8", cbor2.dumps(SEARCH)),
        ("application/smile", b":)\n\x03" + b"\xfa\x84query" + b"itlr:(vitamin)"),
    ],
    ids=["yaml", "yaml-escaped", "cbor", "vnd-cbor", "smile"],
)
def test_a_logical_search_in_another_format_than_json_is_refused_in_one_line(
    client, index, content_type, body
) -> None:
    response = client.post(
        f"/{index}/_search", content=body, headers={"content-type": content_type}
    )
    refused(response, 415, "read as JSON only", "Content-Type: application/json")


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/yaml", b"size: 3\nquery:\n  match:\n    text: sleep\n"),
        ("application/cbor", cbor2.dumps({"size": 3, "query": {"match": {"text": "sleep"}}})),
    ],
    ids=["yaml", "cbor"],
)
def test_a_search_in_another_format_without_a_clause_passes_through(
    client, index, opensearch_url, content_type, body
) -> None:
    through = client.post(f"/{index}/_search", content=body, headers={"content-type": content_type})
    direct = httpx.post(
        f"{opensearch_url}/{index}/_search", content=body, headers={"content-type": content_type}
    )
    assert through.status_code == direct.status_code == 200
    assert through.content.count(b"_index") == direct.content.count(b"_index") == 3


def test_a_yaml_body_whose_anchors_repeat_it_past_its_size_is_a_400(client, index) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in range(1, 9):
        bomb += (
            f"{'b' * level}: &{'b' * level} ["
            + ", ".join([f"*{'b' * (level - 1) or 'a'}"] * 10)
            + "]\n"
        )
    response = client.post(
        f"/{index}/_search", content=bomb.encode(), headers={"content-type": "application/yaml"}
    )
    refused(response, 400, "more values than it has bytes")


def test_a_yaml_source_parameter_with_a_clause_is_refused(client, index) -> None:
    params = {"source": YAML_SEARCH, "source_content_type": "application/yaml"}
    refused(client.get(f"/{index}/_search", params=params), 415, "source= parameter is YAML")


def test_a_cbor_source_parameter_is_read_as_the_engine_reads_it(client, index) -> None:
    # The engine reads a URL parameter as UTF-8 text: CBOR's bytes do not survive that, and the
    # proxy, reading the same bytes, refuses what it cannot read rather than pass it on.
    params = {
        "source": cbor2.dumps(SEARCH).decode("latin-1"),
        "source_content_type": "application/cbor",
    }
    refused(client.get(f"/{index}/_search", params=params), 400, "not CBOR")


def test_a_json_source_parameter_with_a_clause_is_ranked_by_it(client, index, ranked) -> None:
    params = {"source": json.dumps(SEARCH), "source_content_type": "application/json"}
    assert ids(client.get(f"/{index}/_search", params=params)) == ranked


def test_a_count_with_a_clause_in_yaml_or_gzip_is_refused(client, index) -> None:
    yaml_count = b"query:\n  query_string:\n    query: 'itlr:(vitamin)'\n"
    response = client.post(
        f"/{index}/_count", content=yaml_count, headers={"content-type": "application/yaml"}
    )
    refused(response, 400, "_count cannot rank")
    body = gzip.compress(json.dumps({"query": CLAUSE}).encode())
    response = client.post(
        f"/{index}/_count", content=body, headers={**JSON_TYPE, "content-encoding": "gzip"}
    )
    refused(response, 400, "_count cannot rank")


# -- wrapper queries ---------------------------------------------------------------------------


def wrapped(query: Any, encode: Any = lambda q: json.dumps(q).encode()) -> dict[str, Any]:
    return {"wrapper": {"query": base64.b64encode(encode(query)).decode()}}


@pytest.mark.parametrize(
    "query",
    [
        wrapped(CLAUSE),
        wrapped(wrapped(CLAUSE)),
        wrapped({"bool": {"must": [CLAUSE]}}),
        {"bool": {"must": [wrapped(CLAUSE)]}},
        wrapped(CLAUSE, lambda q: ("---\n" + json.dumps(q)).encode()),
        wrapped(CLAUSE, cbor2.dumps),
    ],
    ids=["top", "nested-wrappers", "bool-inside", "inside-bool", "yaml-inside", "cbor-inside"],
)
def test_a_wrapper_query_holding_a_clause_is_ranked_by_it(client, index, ranked, query) -> None:
    assert ids(client.post(f"/{index}/_search", json={"size": 5, "query": query})) == ranked


def test_a_wrapper_holding_a_clause_is_placed_as_the_clause_would_be(client, index) -> None:
    in_post_filter = {"size": 5, "query": {"match_all": {}}, "post_filter": wrapped(CLAUSE)}
    refused(client.post(f"/{index}/_search", json=in_post_filter), 400, "post_filter")
    negated = {"size": 5, "query": {"bool": {"must_not": [wrapped(CLAUSE)]}}}
    refused(client.post(f"/{index}/_search", json=negated), 400, "must_not")
    count = {"query": wrapped(CLAUSE)}
    refused(client.post(f"/{index}/_count", json=count), 400, "_count cannot rank")


def test_a_wrapper_without_a_clause_passes_through(client, index, opensearch_url) -> None:
    search = {"size": 3, "query": wrapped({"match": {"text": "sleep"}})}
    through = client.post(f"/{index}/_search", json=search)
    direct = httpx.post(f"{opensearch_url}/{index}/_search", json=search)
    assert ids(through) == ids(direct) and len(ids(direct)) == 3


# -- terminate_after ---------------------------------------------------------------------------


def test_terminate_after_with_a_logical_search_is_refused_wherever_it_is_sent(
    client, index
) -> None:
    in_body = {**SEARCH, "terminate_after": 5}
    refused(client.post(f"/{index}/_search", json=in_body), 400, "terminate_after (in the body)")
    in_url = client.post(f"/{index}/_search", params={"terminate_after": "5"}, json=SEARCH)
    refused(in_url, 400, "terminate_after (a URL parameter)")
    async_url = client.post(f"/{index}/_async_search", params={"terminate_after": "5"}, json=SEARCH)
    refused(async_url, 400, "terminate_after")
    msearch_body = f'{{"index": "{index}"}}\n{json.dumps(in_body)}\n'
    refused(client.post("/_msearch", content=msearch_body, headers=NDJSON), 400, "terminate_after")
    msearch_header = f'{{"index": "{index}", "terminate_after": 5}}\n{json.dumps(SEARCH)}\n'
    response = client.post("/_msearch", content=msearch_header, headers=NDJSON)
    refused(response, 400, "header of _msearch search 1")


def test_terminate_after_without_a_clause_passes_through(client, index) -> None:
    search = {"size": 3, "query": {"match_all": {}}, "terminate_after": 2}
    response = client.post(f"/{index}/_search", json=search)
    assert response.status_code == 200 and response.json()["terminated_early"] is True


# -- the APIs that take a query ----------------------------------------------------------------

QUERY_APIS = [
    (
        "POST",
        "/{index}/_rank_eval",
        {
            "requests": [{"id": "a", "request": {"query": CLAUSE}, "ratings": []}],
            "metric": {"precision": {"k": 3}},
        },
    ),
    (
        "POST",
        "/_reindex",
        {"source": {"index": "{index}", "query": CLAUSE}, "dest": {"index": "itlr-never-made"}},
    ),
    ("POST", "/{index}/_field_caps?fields=*", {"index_filter": CLAUSE}),
    ("POST", "/{index}/_delete_by_query", {"query": CLAUSE}),
    ("POST", "/{index}/_update_by_query", {"query": CLAUSE}),
    ("POST", "/{index}/_explain/d001", {"query": CLAUSE}),
    ("POST", "/{index}/_validate/query", {"query": CLAUSE}),
    ("POST", "/_plugins/_asynchronous_search?index={index}", {"query": CLAUSE}),
    (
        "POST",
        "/_scripts/painless/_execute",
        {
            "script": {"source": "1"},
            "context": "score",
            "context_setup": {"index": "{index}", "document": {}, "query": CLAUSE},
        },
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    QUERY_APIS,
    ids=lambda v: v if isinstance(v, str) and v.startswith("/") else None,
)
def test_every_api_that_takes_a_query_refuses_a_clause_instead_of_matching_nothing(
    client, index, method, path, body
) -> None:
    text = json.dumps(body).replace("{index}", index)
    response = client.request(
        method, path.replace("{index}", index), content=text, headers=JSON_TYPE
    )
    refused(response, 400, "cannot rank by a itlr:(...) clause")


DEEP = b'{"query":' + b'{"bool":{"must":' * 3000 + b"{}" + b"}}" * 3000 + b"}"


@pytest.mark.parametrize(
    "path",
    [
        "/{index}/_search",
        "/{index}/_async_search",
        "/_msearch",
        "/{index}/_count",
        "/{index}/_explain/d001",
        "/{index}/_validate/query",
        "/{index}/_search/template",
        "/_msearch/template",
        "/_render/template",
        "/{index}/_delete_by_query",
        "/{index}/_update_by_query",
        "/{index}/_rank_eval",
        "/_reindex",
        "/{index}/_field_caps",
    ],
)
def test_deep_json_is_a_400_on_every_path_the_proxy_reads(client, index, path) -> None:
    response = client.post(path.replace("{index}", index), content=DEEP, headers=JSON_TYPE)
    refused(response, 400, "nested", "max_depth")


# -- _msearch on an index without itlr vectors -------------------------------------------------


@pytest.mark.parametrize("named", ["missing", "plain"])
def test_an_msearch_with_a_clause_on_an_index_without_itlr_vectors_gets_a_clear_answer(
    client, index, opensearch_url, named
) -> None:
    target = f"{index}-{named}"
    if named == "plain":
        httpx.put(f"{opensearch_url}/{target}/_doc/1?refresh=true", json={"text": "vitamin D"})
    try:
        lines = f'{{"index": "{index}"}}\n{{"size": 1}}\n{{"index": "{target}"}}\n{json.dumps(SEARCH)}\n'
        answer = client.post("/_msearch", content=lines, headers=NDJSON)
        if named == "missing":
            # The cluster's own answer to the caller, as a search of that index gets it.
            assert answer.status_code == 404, answer.text[:400]
            assert answer.json()["error"]["type"] == "index_not_found_exception"
            assert target in answer.json()["error"]["reason"]
        else:
            reason = refused(answer, 400, target)
            assert "_msearch search 2" in reason
    finally:
        httpx.delete(f"{opensearch_url}/{target}")


# -- what the rewrite must not break -----------------------------------------------------------


@pytest.mark.parametrize("stored", [["_none_"], "_none_", []])
def test_stored_fields_none_or_empty_works_with_a_logical_search(client, index, stored) -> None:
    response = client.post(f"/{index}/_search", json={**SEARCH, "stored_fields": stored})
    assert response.status_code == 200, response.text[:300]
    hits = response.json()["hits"]["hits"]
    assert len(hits) == 5 and all("_source" not in hit for hit in hits)


def test_a_rescore_without_a_sort_rescores_the_logical_ranking(client, index, ranked) -> None:
    rescore = {
        "window_size": 50,
        "query": {
            "rescore_query": {"match": {"text": "immune"}},
            "query_weight": 1.0,
            "rescore_query_weight": 0.0,
        },
    }
    response = client.post(f"/{index}/_search", json={**SEARCH, "rescore": rescore})
    assert ids(response) == ranked


def test_a_rescore_with_a_sort_is_refused_naming_the_sort(client, index) -> None:
    rescore = {"window_size": 50, "query": {"rescore_query": {"match": {"text": "immune"}}}}
    body = {**SEARCH, "rescore": rescore, "sort": [{"doc_id": "asc"}]}
    reason = refused(client.post(f"/{index}/_search", json=body), 400, "drop the sort")
    assert "Cannot use [sort]" not in reason


def test_url_search_parameters_cannot_undo_the_rewrite(client, index, ranked) -> None:
    params = {"size": "3", "sort": "doc_id:asc", "_source_excludes": "text"}
    response = client.post(f"/{index}/_search", params=params, json={"query": CLAUSE})
    assert ids(response) == ranked[:3]  # the logical order, the URL's size
    for hit in response.json()["hits"]["hits"]:
        assert set(hit["_source"]) & {"text", "embedding", "itlr_tokens", "itlr_hash"} == set()


def test_a_logical_search_asking_for_another_answer_format_is_a_406(client, index) -> None:
    response = client.post(f"/{index}/_search", json=SEARCH, headers={"accept": "application/yaml"})
    refused(response, 406, "YAML", "ask for JSON")
    response = client.post(f"/{index}/_search", params={"format": "cbor"}, json=SEARCH)
    refused(response, 406, "CBOR")


# -- arbitrary bodies in every spelling ---------------------------------------------------------

# Read-only paths only: a body without a clause passes through, and on _delete_by_query an
# arbitrary one could be a match_all.
READ_PATHS = [
    "/{index}/_search",
    "/{index}/_async_search",
    "/_msearch",
    "/{index}/_count",
    "/{index}/_explain/d001",
    "/{index}/_validate/query",
    "/{index}/_search/template",
    "/{index}/_rank_eval",
    "/{index}/_field_caps",
]
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from([f"itlr:({LOGICAL})", "itlr:(", "itlr:(a) OR b", "itlr"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["query", "bool", "must", "query_string", "match", "itlr", "wrapper"])
            | st.text(max_size=4),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)


def spelled(body: Any, content_type: str) -> bytes:
    if content_type == "application/yaml":
        return yaml.safe_dump(body).encode()
    if content_type == "application/cbor":
        return bytes(cbor2.dumps(body))
    return json.dumps(body).encode()


@settings(
    max_examples=int(os.environ.get("ITLR_PROXY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    path=st.sampled_from(READ_PATHS),
    content_type=st.sampled_from(["application/json", "application/yaml", "application/cbor"]),
    encoding=st.sampled_from(["", "gzip", "deflate", "br"]),
    body=VALUES,
)
def test_no_body_in_any_format_or_encoding_makes_the_proxy_fail_on_its_own(
    client, index, path, content_type, encoding, body
) -> None:
    data = spelled(body, content_type)
    if encoding == "gzip":
        data = gzip.compress(data)
    elif encoding == "deflate":
        data = zlib.compress(data)
    headers = {"content-type": content_type, **({"content-encoding": encoding} if encoding else {})}
    response = client.post(path.replace("{index}", index), content=data, headers=headers)
    if response.status_code >= 400 and response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        error = response.json().get("error")
        kind = error.get("type", "") if isinstance(error, dict) else ""
        assert not (response.status_code >= 500 and kind.startswith("itlr_")), response.text[:300]
        assert "Traceback" not in response.text
