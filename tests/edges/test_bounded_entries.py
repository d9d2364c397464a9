"""The limits bound what a request turns into, not only what it sends (issue 42, item 2): the
rule rewriter's output, a query tree built in code, chained dashes, the values of a filter, one
document at ingest and one hit returned; and a maximal request at each entry (CLI, `itlr.Index`,
the service) is refused or finishes, never runs unbounded."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS, LimitError
from itlr.query import parse
from itlr.rewrite import rewrite

runner = CliRunner()
# Far above what any of these takes when bounded (well under a second), far below the probe's
# 40 s of CPU: a generous bound that a busy 2-core machine still meets.
BOUNDED_SECONDS = 30.0
WORDS = [
    "vitamin",
    "D",
    "benefits",
    "other",
    "than",
    "bone",
    "health",
    "sleep",
    "and",
    "memory",
    "but",
    "not",
    "coffee",
    "or",
    "tea,",
    "excluding",
    "sugar",
]


def question(chars: int, seed: int = 1) -> str:
    """A plain-language question of `chars` characters, as the probe sent (no operators)."""
    pick = random.Random(seed)
    text = ""
    while len(text) < chars:
        text += pick.choice(WORDS) + pick.choice([" ", " ", ", ", " and not ", " or "])
    return text[:chars]


PROBE_QUESTION = question(1_020_000)  # the probe's 1.02 MB question: 19,001 terms, 40 s
WIDE_QUESTION = question(LIMITS.max_query_chars)  # within the length limit, over 64 terms
MANY_VALUES = list(range(100_000))  # the probe's `terms` filter: 589 KB, 59 s


@contextmanager
def bounded() -> Iterator[None]:
    started = time.perf_counter()
    yield
    assert time.perf_counter() - started < BOUNDED_SECONDS


def timed(call):
    started = time.perf_counter()
    outcome = call()
    return outcome, time.perf_counter() - started


# -- chained dashes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "-" * 33 + "sleep",
        "!" * 33 + "sleep",
        "-!" * 17 + "sleep",
        "memory AND " + "-" * 40 + "sleep",
        "(" + "-" * 33 + "sleep)",
        "- " * 16 + "-" * 17 + "sleep",
    ],
)
def test_chained_dashes_and_bangs_count_toward_the_depth_limit(text: str) -> None:
    with pytest.raises(LimitError, match="max_depth"):
        parse(text)


def test_thirty_two_chained_dashes_are_still_a_query() -> None:
    assert str(parse("-" * 32 + "sleep")).count("NOT") == 32
    assert str(parse("well-known co-author")) == '"well-known co-author"'


def test_a_tree_built_in_code_is_held_to_the_same_limits() -> None:
    deep = itlr.Term("sleep")
    for _ in range(100_000):  # far past Python's recursion limit: refused, not RecursionError
        deep = ~deep
    with pytest.raises(LimitError, match="max_depth"):
        itlr.Query.of(deep)
    wide = itlr.Term("t0")
    for n in range(1, LIMITS.max_terms + 1):
        wide = wide | itlr.Term(f"t{n}")
    with pytest.raises(LimitError, match="max_terms"):
        itlr.Query.of(wide)
    with pytest.raises(LimitError, match="max_query_chars"):
        itlr.Query.of(itlr.Term("x" * (LIMITS.max_query_chars + 1)))


# -- the rule rewriter -----------------------------------------------------------------------


def test_the_rewriter_refuses_a_question_over_the_length_limit_before_it_runs() -> None:
    with bounded(), pytest.raises(LimitError) as outcome:
        rewrite(PROBE_QUESTION)
    assert outcome.value.name == "max_query_chars"


def test_a_rewrite_over_the_term_limit_is_refused_as_translate_would() -> None:
    assert len(WIDE_QUESTION) == LIMITS.max_query_chars
    with pytest.raises(LimitError, match="max_terms"):
        rewrite(WIDE_QUESTION)
    assert rewrite(question(400)).query.terms  # a question within every limit still rewrites


def test_index_search_with_a_rewrite_is_bounded(demo_index: itlr.Index) -> None:
    for text, limit in ((PROBE_QUESTION, "max_query_chars"), (WIDE_QUESTION, "max_terms")):
        with bounded(), pytest.raises(LimitError) as outcome:
            demo_index.search(text, rewrite="rules")
        assert outcome.value.name == limit


@pytest.mark.parametrize("endpoint", ["/search", "/rewrite"])
def test_the_service_refuses_the_probes_rewrite_like_translate_does(
    service: httpx.Client, endpoint: str
) -> None:
    body = (
        {"query": PROBE_QUESTION[:1_000_000], "rewrite": "rules"}
        if endpoint == "/search"
        else {"question": PROBE_QUESTION[:1_000_000]}
    )
    response, seconds = timed(lambda: service.post(endpoint, json=body))
    assert response.status_code == 422, response.text[:200]
    assert response.json()["limit"] == "max_query_chars"
    assert seconds < BOUNDED_SECONDS
    wide = {"query": WIDE_QUESTION, "rewrite": "rules"}
    if endpoint == "/rewrite":
        wide = {"question": WIDE_QUESTION}
    response = service.post(endpoint, json=wide)
    assert response.status_code == 422 and response.json()["limit"] == "max_terms"


def test_the_cli_refuses_the_probes_rewrite_in_one_line(tmp_path: Path, demo_index) -> None:
    source = tmp_path / "question.txt"
    source.write_text(PROBE_QUESTION)
    result, seconds = timed(
        lambda: runner.invoke(
            cli,
            [
                "search",
                "--query-file",
                str(source),
                "--rewrite",
                "rules",
                "--index",
                demo_index.name,
            ],
        )
    )
    assert result.exit_code == 2, result.output[:300]
    assert "max_query_chars" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert seconds < BOUNDED_SECONDS


# -- values of a filter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"terms": {"year": MANY_VALUES}},
        {"terms": {"_id": [f"d{n}" for n in range(5_000)]}},
        {"ids": {"values": [f"d{n}" for n in range(5_000)]}},
        {"bool": {"should": [{"term": {"year": n}} for n in range(2_000)]}},
    ],
)
def test_a_filter_of_too_many_values_is_refused_at_every_entry(
    demo_index: itlr.Index, service: httpx.Client, spec: dict, tmp_path: Path
) -> None:
    with bounded(), pytest.raises(LimitError) as outcome:
        demo_index.search("sleep", filter=spec)
    assert outcome.value.name == "max_filter_values"
    with pytest.raises(LimitError, match="max_filter_values"):
        demo_index.translate("sleep", filter=spec)
    for endpoint in ("/search", "/translate"):
        response = service.post(endpoint, json={"query": "sleep", "filter": spec})
        assert response.status_code == 422, response.text[:200]
        assert response.json()["limit"] == "max_filter_values"
    spec_file = tmp_path / "filter.json"
    spec_file.write_text(json.dumps(spec))
    result = runner.invoke(
        cli, ["search", "sleep", "--index", demo_index.name, "--filter", spec_file.read_text()]
    )
    assert result.exit_code == 2 and "max_filter_values" in result.stderr


def test_a_filter_at_the_value_limit_runs(demo_index: itlr.Index) -> None:
    spec = {"terms": {"year": list(range(LIMITS.max_filter_values))}}
    result, seconds = timed(lambda: demo_index.search("sleep", filter=spec, mode="exact"))
    assert seconds < BOUNDED_SECONDS
    assert all(int(hit.fields["year"]) < LIMITS.max_filter_values for hit in result.hits)


# -- one document at ingest, one hit returned --------------------------------------------------


def test_a_document_over_the_size_limit_is_refused_by_its_line_and_the_rest_ingested(
    tmp_path: Path,
) -> None:
    big = "word " * (LIMITS.max_document_bytes // 5 + 10)
    source = tmp_path / "docs.jsonl"
    source.write_text(
        json.dumps({"id": "small1", "text": "sleep and memory"})
        + "\n"
        + json.dumps({"id": "huge", "text": big})
        + "\n"
        + json.dumps({"id": "small2", "text": "vitamin D"})
        + "\n"
    )
    result = runner.invoke(cli, ["ingest", str(source), "--index", str(tmp_path / "idx")])
    assert result.exit_code == 1, result.output
    assert "docs.jsonl:2:" in result.output and "max_document_bytes" in result.output
    assert itlr.Index.open(str(tmp_path / "idx"), create=False).count() == 2
    index = itlr.Index.open(str(tmp_path / "idx2"))
    with pytest.raises(ConfigurationError, match="max_document_bytes"):
        index.add([{"id": "huge", "text": big}])


def test_a_hit_over_the_size_limit_is_cut_with_a_warning(tmp_path: Path, embedder) -> None:
    """An index written before the limit (or by others) may hold a huge document: the answer
    carries at most the limit per value, and says what it cut."""
    index = itlr.Index.open(str(tmp_path / "idx"))
    huge_text = "sleep " * (3 * LIMITS.max_document_bytes // 6)
    huge_field = ["x" * 1_000] * (2 * LIMITS.max_document_bytes // 1_000)
    vector = embedder.encode(["sleep"])
    index.backend.add(["big"], [huge_text], np.asarray(vector), [{"blob": huge_field, "t": "ok"}])
    found = index.search("sleep", k=1)
    (hit,) = found.hits
    assert len(hit.text.encode()) <= LIMITS.max_document_bytes + 20
    assert "blob" not in hit.fields and hit.fields["t"] == "ok"
    assert any("hit 'big'" in w and "max_document_bytes" in w for w in found.warnings)
    assert len(json.dumps(found.to_dict())) < 2 * LIMITS.max_document_bytes


# -- a maximal admitted request at each entry finishes -----------------------------------------


def maximal_query() -> str:
    width = LIMITS.max_query_chars // LIMITS.max_terms - len(' OR ""')
    return " OR ".join(f'"{n} {"w" * (width - 6)}"'[: width + 2] for n in range(LIMITS.max_terms))


def test_a_maximal_request_finishes_at_every_entry(
    demo_index: itlr.Index, service: httpx.Client
) -> None:
    query = maximal_query()
    assert len(parse(query).terms) == LIMITS.max_terms
    spec = {"terms": {"year": list(range(LIMITS.max_filter_values))}}
    _, seconds = timed(lambda: demo_index.search(query, k=100, filter=spec, mode="exact"))
    assert seconds < BOUNDED_SECONDS
    response, seconds = timed(
        lambda: service.post(
            "/search", json={"query": query, "k": 100, "filter": spec, "mode": "exact"}
        )
    )
    assert response.status_code == 200 and seconds < BOUNDED_SECONDS
    result, seconds = timed(
        lambda: runner.invoke(
            cli,
            [
                "search",
                query,
                "--index",
                demo_index.name,
                "-k",
                "100",
                "--filter",
                json.dumps(spec),
            ],
        )
    )
    assert result.exit_code == 0, result.output[:300]
    assert seconds < BOUNDED_SECONDS


STORED = [True, False, 0, 1, -0.0, 2021, 2021.0, 2021.5, "2021", " 2021 ", "2021.0", "true"]
STORED += ["True ", "false", "yes", "", "x", "nan", "inf", "1e3", 1000, float("nan"), None]
STORED += [{"a": 1}, [2021, "x"], [[True]], 10**400, "0", 0.0]
WANTED = [v for v in STORED if isinstance(v, str | int | float | bool) and v == v and v != 10**400]


def test_a_terms_filter_matches_exactly_what_its_values_as_term_filters_match() -> None:
    """`terms` looks its values up in a set (a row costs the same for 3 values as for 1,024):
    for every stored and wanted value it agrees with `term`'s coercions."""
    from itlr.engines.filters import compile_filter
    from itlr.engines.store import StoredRow

    for stored in STORED:
        row = StoredRow("r", "t", {"f": stored})
        for wanted in WANTED:
            term, _ = compile_filter({"term": {"f": wanted}})
            terms, _ = compile_filter({"terms": {"f": [wanted, "unrelated"]}})
            assert terms(row) == term(row), (stored, wanted)
