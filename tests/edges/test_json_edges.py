"""No 500 and no traceback from any input (issue 42, item 3): numbers outside the float range
and lone surrogates are refused at every edge (service, CLI, `itlr.Index`) with the field's
path, a bad line of any kind costs only itself at ingest, and arbitrary JSON thrown at the
service's endpoints never gets a 5xx or a body of another shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.documents import Document
from itlr.errors import ConfigurationError, ItlrError

runner = CliRunner()
HUGE = "1" + "0" * 400  # a JSON integer no double holds
ENORMOUS = "1" + "0" * 4300  # past Python's int <-> str limit: int() itself raises ValueError


def big(template: str) -> str:
    return template.replace("ENORMOUS", ENORMOUS).replace("HUGE", HUGE)


def post(client: httpx.Client, path: str, raw: str | bytes) -> httpx.Response:
    return client.post(path, content=raw, headers={"content-type": "application/json"})


PROBES = [
    ("/search", big('{"query": "sleep", "filter": {"term": {"year": HUGE}}}'), "filter.term.year"),
    (
        "/search",
        big('{"query": "sleep", "filter": {"range": {"year": {"gte": HUGE}}}}'),
        "filter.range.year.gte",
    ),
    (
        "/search",
        big('{"query": "sleep", "filter": {"terms": {"year": [1, ENORMOUS]}}}'),
        "filter.terms.year[1]",
    ),
    ("/search", '{"query": "sleep", "filter": {"term": {"year": -1e999}}}', "filter.term.year"),
    ("/search", big('{"query": "sleep", "k": HUGE}'), "k"),
    ("/search", '{"query": "sleep", "_source": ["\\ud800"]}', "_source[0]"),
    ("/search", '{"query": "sleep", "search_after": ["\\ud800", 1]}', "search_after[0]"),
    ("/search", '{"query": "sleep", "filter": {"term": {"f\\udfff": 1}}}', "filter.term"),
    ("/search", '{"query": "sleep", "filter": {"term": {"tag": "\\ud800"}}}', "filter.term.tag"),
    ("/rewrite", '{"question": "sleep \\ud800 and memory"}', "question"),
    (
        "/translate",
        big('{"query": "sleep", "filter": {"term": {"year": HUGE}}}'),
        "filter.term.year",
    ),
    ("/parse", '{"query": "\\udc80"}', "query"),
]


@pytest.mark.parametrize(("path", "raw", "where"), PROBES)
def test_a_number_outside_float_range_or_a_lone_surrogate_is_a_400_naming_the_field(
    service: httpx.Client, path: str, raw: str, where: str
) -> None:
    response = post(service, path, raw)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["path"] == where
    assert body["error"].startswith(f"{where}: ")


def test_bytes_that_are_not_utf8_are_a_400_in_the_error_shape(service: httpx.Client) -> None:
    response = post(service, "/search", b'{"query": "sl\xffep"}')
    assert response.status_code == 400
    assert "not UTF-8" in response.json()["error"]


def test_fastapis_own_refusals_come_in_the_error_shape(service: httpx.Client) -> None:
    missing = service.get("/no-such-endpoint")
    assert missing.status_code == 404 and set(missing.json()) == {"error"}
    wrong_method = service.get("/search")
    assert wrong_method.status_code == 405 and set(wrong_method.json()) == {"error"}


@pytest.mark.parametrize(
    "names",
    [
        {"filter": {"term": {"year": int(HUGE)}}},
        {"filter": {"range": {"year": {"lt": -int(HUGE)}}}},
        {"filter": {"terms": {"year": [10**4300]}}},
        {"search_after": ["\ud800"]},
        {"source_fields": ["ok", "\udc00"]},
        {"filter": {"term": {"\ud800": "x"}}},
    ],
)
def test_index_search_refuses_the_same_values_with_its_own_error(
    demo_index: itlr.Index, names: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError, match=r"(no finite double|lone surrogate)"):
        demo_index.search("sleep", **names)


def test_a_filter_built_in_code_past_the_float_range_is_a_filter_error_not_overflow(
    demo_index: itlr.Index,
) -> None:
    from itlr.options import SearchOptions

    for spec in ({"term": {"year": int(HUGE)}}, {"range": {"year": {"gte": int(HUGE)}}}):
        with pytest.raises(ItlrError):
            demo_index.search("sleep", options=SearchOptions(filter=spec))


@pytest.mark.parametrize(
    "flags",
    [
        ["--filter", big('{"term": {"year": HUGE}}')],
        ["--filter", big('{"range": {"year": {"gte": ENORMOUS}}}')],
        ["--search-after", big("[HUGE]")],
    ],
)
def test_the_cli_refuses_them_in_one_line(demo_index: itlr.Index, flags: list[str]) -> None:
    result = runner.invoke(cli, ["search", "sleep", "--index", demo_index.name, *flags])
    assert result.exit_code == 2, result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no finite double" in result.stderr


def test_one_bad_line_of_any_kind_costs_only_itself_at_ingest(tmp_path: Path) -> None:
    lines = [
        {"id": "good1", "text": "sleep and memory"},
        big('{"id": "enormous", "text": "t", "n": ENORMOUS}'),
        big('{"id": "huge", "text": "t", "n": HUGE}'),
        '{"id": "surrogate", "text": "bad \\ud800 text"}',
        '{"id": "key", "text": "t", "f": {"\\udc00": 1}}',
        '{"id": "nan", "text": "t", "x": NaN}',
        {"id": "good2", "text": "vitamin D and bones"},
    ]
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    result = runner.invoke(cli, ["ingest", str(source), "--index", str(tmp_path / "idx")])
    assert result.exit_code == 1, result.output  # some lines were not documents
    assert "Traceback" not in result.output
    for number in range(2, 7):
        assert f"docs.jsonl:{number}:" in result.output
    index = itlr.Index.open(str(tmp_path / "idx"), create=False)
    assert index.count() == 2


@pytest.mark.parametrize(
    "record",
    [
        {"id": "a", "text": "t", "n": 10**4300},
        {"id": "a", "text": "t", "n": int(HUGE)},
        {"id": "a", "text": "t", "n": [1, -int(HUGE)]},
        {"id": "a", "text": "lone \ud800"},
        {"id": "a", "text": "t", "f": {"\udc00": 1}},
    ],
)
def test_index_add_raises_itlrs_own_error_not_a_raw_value_error(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    index = itlr.Index.open(tmp_path / "idx")
    with pytest.raises(ConfigurationError, match="document 'a'"):
        index.add([record])
    with pytest.raises(ConfigurationError, match="document 'a'"):
        index.add([Document("a", record["text"], {k: v for k, v in record.items()})])
    assert index.count() == 0


# -- arbitrary JSON at the service ---------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["\ud800", "sleep", "vitamin D", "NOT", '"a" AND', "(((", "rules", "exact"]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = [
    "query",
    "question",
    "method",
    "k",
    "mode",
    "filter",
    "search_after",
    "_source",
    "rewrite",
    "from",
    "hard_filter",
    "truth",
    "engine",
    "highlight",
    "explain",
    "candidates",
]
_FILTERS = st.recursive(
    st.dictionaries(
        st.sampled_from(["term", "terms", "range", "exists", "ids"]),
        st.dictionaries(
            st.sampled_from(["year", "lang", "gte", "lt", "field", "value"]), _JSON, max_size=2
        ),
        min_size=1,
        max_size=1,
    ),
    lambda inner: st.builds(
        lambda clauses: {"bool": {"must": clauses}}, st.lists(inner, max_size=3)
    ),
    max_leaves=6,
)
_BODIES = st.one_of(
    _JSON,
    st.dictionaries(st.sampled_from(_KEYS), _JSON | _FILTERS, max_size=6),
    st.builds(
        lambda query, extra: {"query": query, **extra},
        st.text(max_size=60) | st.sampled_from(['"a" AND NOT "b"', "sleep"]),
        st.dictionaries(st.sampled_from(_KEYS[2:]), _JSON | _FILTERS, max_size=4),
    ),
)


@pytest.mark.parametrize("endpoint", ["/search", "/translate", "/rewrite"])
def test_arbitrary_json_never_gets_a_5xx_and_errors_have_the_documented_shape(
    service: httpx.Client, endpoint: str
) -> None:
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(body=_BODIES)
    def check(body: Any) -> None:
        raw = json.dumps(body, allow_nan=True)  # NaN / Infinity tokens and \\udXXX escapes too
        response = post(service, endpoint, raw)
        assert response.status_code < 500, (raw, response.text)
        answer = response.json()
        if response.status_code >= 400:
            assert isinstance(answer, dict) and isinstance(answer.get("error"), str), answer
            assert answer["error"] and "Traceback" not in answer["error"]
        else:
            assert isinstance(answer, dict)

    check()


def test_a_lone_surrogate_a_cluster_returns_is_answered_as_u_fffd_not_a_500() -> None:
    """The embedded store cannot hold one, but a cluster index filled by others may: the answer
    must still encode as UTF-8."""
    from itlr.strict_json import dumps

    text = dumps({"hits": [{"text": "sleep \ud800 text", "fields": {"\udc00": "x"}}]})
    assert json.loads(text.encode("utf-8")) == {
        "hits": [{"text": "sleep \ufffd text", "fields": {"\ufffd": "x"}}]
    }


def test_an_opensearch_answer_beyond_64_bit_integers_is_read_exactly_and_no_json_is_refused():
    """The client reads answers with orjson, which stops at 64-bit integers: such an answer
    (a `sum` aggregation, a `_seq_no` of a foreign writer) falls back to the standard
    library, and what is no JSON at all stays the client's own SerializationError."""
    from opensearchpy.exceptions import SerializationError

    from itlr.engines.connection import Connection

    read = Connection("http://127.0.0.1:9").opensearch().transport.deserializer.loads
    assert read('{"value": 18446744073709551616}', "application/json") == {
        "value": 18446744073709551616
    }
    assert read('{"hits": {"hits": [{"_score": 0.5}]}}', "application/json") == {
        "hits": {"hits": [{"_score": 0.5}]}
    }
    with pytest.raises(SerializationError):
        read("<html>502 Bad Gateway</html>", "application/json")
