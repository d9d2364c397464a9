"""The hard filter with the real model: a NOT term that repeats what the query asks for cannot
drop its answer under the default (relative) rule, on the embedded engine, OpenSearch, through
`itlr.Index` with explain (why each hit was kept, which documents were dropped), `itlr
translate` and the query-bar proxy; the absolute rule stays available and drops it."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.options import search_options
from itlr.query import parse

runner = CliRunner()

# People and LLMs write exclusions that repeat the question's subject. On the demo corpus the
# NOT term's cosine to the passage asked for (d014, vitamin D and autoimmune conditions) is
# 0.64, over the bundled threshold 0.53, but below its cosine to "vitamin D benefits" (0.73).
QUERY = '"vitamin D benefits" AND NOT "vitamin D and bone health"'
ANSWER = "d014"
THETA = 0.53


def _ids(hits) -> list[str]:
    return [h.id for h in hits]


def test_a_not_that_repeats_the_query_cannot_drop_its_answer_by_default(embedded, embedder) -> None:
    query = parse(QUERY)
    vectors = embedder.encode(list(query.terms))
    relative = embedded.search(query, vectors, search_options(k=10, hard_filter=THETA))
    absolute = embedded.search(
        query, vectors, search_options(k=10, hard_filter=THETA, hard_filter_rule="absolute")
    )
    assert ANSWER in _ids(relative)[:3]
    assert ANSWER not in _ids(absolute)


def test_explain_says_why_each_hit_was_kept_and_lists_the_dropped(embedded) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    result = index.search(QUERY, k=10, hard_filter=THETA, explain=True)
    (answer,) = [h for h in result.hits if h.id == ANSWER]
    verdict = answer.hard_filter
    assert verdict is not None and verdict["kept"] and verdict["rule"] == "relative"
    assert verdict["best_positive"]["term"] == "vitamin D benefits"
    (term,) = verdict["terms"]
    assert term["reaches_threshold"] and not term["above_positive"] and not term["drops"]
    assert "not above the best positive cosine" in verdict["reason"]
    # What the filter removed from these ten places: about the excluded thing more than the
    # query's subject, each with its reason.
    assert result.dropped
    for hit in result.dropped:
        assert hit.hard_filter is not None and not hit.hard_filter["kept"]
        (term,) = hit.hard_filter["terms"]
        assert term["value"] >= THETA and term["value"] > hit.hard_filter["best_positive"]["value"]
        assert hit.id not in _ids(result.hits)
    payload = result.to_dict()
    assert all(h["hard_filter"]["kept"] is True for h in payload["hits"])
    assert {h["id"] for h in payload["dropped"]} == {h.id for h in result.dropped}

    absolute = index.search(
        QUERY, k=10, hard_filter=THETA, hard_filter_rule="absolute", explain=True
    )
    assert ANSWER in _ids(absolute.dropped or [])
    (why,) = [h.hard_filter["reason"] for h in absolute.dropped or [] if h.id == ANSWER]
    assert why.startswith('dropped: NOT "vitamin D and bone health" cosine 0.6')


def test_service_answers_carry_the_verdict_and_the_dropped(embedded) -> None:
    from itlr.service import create_app
    from itlr.service.server import serving

    index = itlr.Index.open(str(embedded.path), create=False)
    names = {"k": 10, "hard_filter": THETA, "hard_filter_rule": "absolute", "explain": True}
    expected = index.search(QUERY, **names).to_dict()
    with serving(create_app(index)) as url:
        answer = httpx.post(f"{url}/search", json={"query": QUERY, **names}, timeout=60)
    assert answer.status_code == 200, answer.text
    served = answer.json()
    assert [h["hard_filter"] for h in served["hits"]] == [
        h["hard_filter"] for h in expected["hits"]
    ]
    assert ANSWER in [h["id"] for h in served["dropped"]]


def test_without_explain_there_is_no_verdict_and_no_dropped_list(embedded) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    result = index.search(QUERY, k=5, hard_filter=THETA)
    assert result.dropped is None and all(h.hard_filter is None for h in result.hits)
    assert "dropped" not in result.to_dict()


def test_cli_prints_the_verdict_and_the_dropped(embedded) -> None:
    args = ["search", QUERY, "--index", str(embedded.path), "-k", "5", "--explain"]
    shown = runner.invoke(app, [*args, "--hard-filter", str(THETA)])
    assert shown.exit_code == 0, shown.output
    assert 'hard filter: kept: NOT "vitamin D and bone health" cosine 0.6' in shown.stdout
    absolute = runner.invoke(
        app, [*args, "--hard-filter", str(THETA), "--hard-filter-rule", "absolute"]
    )
    assert absolute.exit_code == 0, absolute.output
    assert f"dropped by the hard filter: {ANSWER}" in absolute.stdout
    bad = runner.invoke(app, [*args, "--hard-filter", "0.5", "--hard-filter-rule", "sometimes"])
    assert bad.exit_code == 2 and "sometimes" in bad.stderr


TRANSLATE = ["translate", QUERY, "--engine", "opensearch", "--index", "demo", "--format", "json"]


def test_translate_prints_one_relative_exclusion_clause(embedded) -> None:
    printed = runner.invoke(app, [*TRANSLATE, "--hard-filter", str(THETA), "--truth", "clamp"])
    assert printed.exit_code == 0, printed.output
    body = json.loads(printed.stdout)
    (clause,) = body["query"]["script_score"]["query"]["bool"]["must_not"]
    assert clause["script_score"]["min_score"] == pytest.approx(1 + THETA)
    # The excluded term, then the positive term it must outweigh.
    assert clause["script_score"]["script"]["params"]["excluded"] == 1
    assert clause["script_score"]["script"]["params"]["dims"] == 384
    rule = ["--hard-filter-rule", "absolute"]
    absolute = runner.invoke(
        app, [*TRANSLATE, "--hard-filter", str(THETA), *rule, "--truth", "clamp"]
    )
    params = json.loads(absolute.stdout)["query"]["script_score"]["query"]["bool"]["must_not"][0]
    assert len(params["script_score"]["script"]["params"]["tau"]) == 1  # no positive vector


# -- a real OpenSearch ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def opensearch_backend(opensearch_demo) -> OpenSearchBackend:
    """The session's read-only demo index (the whole corpus with its fields)."""
    return opensearch_demo


@pytest.mark.opensearch
@pytest.mark.parametrize("mode", ["knn", "exact"])
def test_opensearch_keeps_the_answer_by_default_and_drops_it_when_absolute(
    opensearch_backend, embedded, embedder, mode
) -> None:
    query = parse(QUERY)
    vectors = embedder.encode(list(query.terms))
    for rule in ("relative", "absolute"):
        options = search_options(k=10, mode=mode, hard_filter=THETA, hard_filter_rule=rule)
        remote = opensearch_backend.search(query, vectors, options)
        local = embedded.search(query, vectors, options)
        assert _ids(remote) == _ids(local)
        for mine, theirs in zip(remote, local, strict=True):
            assert mine.score == pytest.approx(theirs.score, rel=1e-4, abs=1e-6)
        assert (ANSWER in _ids(remote)) is (rule == "relative")


@pytest.mark.opensearch
def test_opensearch_front_door_explains_the_filter_as_the_embedded_engine_does(
    opensearch_backend, opensearch_url, embedded
) -> None:
    remote = itlr.Index.open(opensearch_backend.index_name, url=opensearch_url)
    local = itlr.Index.open(str(embedded.path), create=False)
    for rule in ("relative", "absolute"):
        names = {"k": 10, "hard_filter": THETA, "hard_filter_rule": rule, "explain": True}
        theirs, mine = local.search(QUERY, **names), remote.search(QUERY, **names)
        assert [h.hard_filter["kept"] for h in mine] == [True] * len(mine)
        assert [h.id for h in mine.dropped or []] == [h.id for h in theirs.dropped or []]
        for a, b in zip(mine.dropped or [], theirs.dropped or [], strict=True):
            assert a.hard_filter["reason"][:40] == b.hard_filter["reason"][:40]


@pytest.mark.opensearch
def test_query_bar_proxy_applies_the_relative_filter_by_default(
    opensearch_backend, opensearch_url, embedder
) -> None:
    from itlr.cli.serve_proxy import proxy_defaults
    from itlr.proxy import create_proxy_app
    from itlr.proxy import serving as serve_proxy

    body = {"size": 10, "query": {"query_string": {"query": f"itlr:({QUERY})"}}}
    found = {}
    for rule in ("relative", "absolute"):
        defaults = proxy_defaults(hard_filter=THETA, hard_filter_rule=rule)
        proxy = create_proxy_app(Connection(opensearch_url), embedder=embedder, defaults=defaults)
        with serve_proxy(proxy) as url:
            answer = httpx.post(
                f"{url}/{opensearch_backend.index_name}/_search", json=body, timeout=60
            )
        assert answer.status_code == 200, answer.text
        found[rule] = [h["_id"] for h in answer.json()["hits"]["hits"]]
    assert ANSWER in found["relative"] and ANSWER not in found["absolute"]
