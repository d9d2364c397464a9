"""`itlr translate`: the printed requests are exactly what the backends build, in a form that
Kibana / OpenSearch Dashboards Dev Tools, curl and programs accept."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app
from itlr.documents import read_jsonl
from itlr.engines import elasticsearch, opensearch
from itlr.engines.connection import Connection
from itlr.options import SearchOptions, search_options
from itlr.resources import data_file
from itlr.scoring import TRUTH_CODES, TruthMap

runner = CliRunner()

QUERY = '"vitamin D" AND NOT "bone health"'
# The recommended hybrid setting (docs/hybrid-truths.md, "Lexical evidence"), spelled out so that these tests
# hold whatever the default truths are.
HYBRID = ("--truth", "hybrid", "--lexical-share", "0.3", "--not-evidence", "max")
METHOD_LINE = re.compile(r"^(GET|PUT|POST|DELETE|HEAD) (\S+)$")


def parse_console(text: str) -> list[tuple[str, str, dict]]:
    """Read Dev Tools console text back: each request is a `METHOD path` line followed by a
    JSON body that runs until the next method line."""
    requests: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        head = METHOD_LINE.match(line)
        if head:
            requests.append((head.group(1), head.group(2), []))
        else:
            assert requests, f"text before the first request: {line!r}"
            requests[-1][2].append(line)
    return [(method, path, json.loads("\n".join(body))) for method, path, body in requests]


def translate(*args: str) -> str:
    result = runner.invoke(app, ["translate", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    ("engine", "module"), [("opensearch", opensearch), ("elasticsearch", elasticsearch)]
)
def test_console_text_parses_back_into_the_same_method_path_and_body(
    engine, module, embedder
) -> None:
    text = translate(
        QUERY, "--engine", engine, "--index", "demo", "--with-install", "--hard-filter", "0.5"
    )
    requests = parse_console(text)
    assert [(m, p) for m, p, _ in requests] == [
        ("PUT", f"_scripts/{module.SCORE_SCRIPT.id}"),
        ("PUT", f"_scripts/{module.EXCLUDE_SCRIPT.id}"),
        ("GET", "demo/_search"),
    ]
    assert requests[0][2] == module.SCORE_SCRIPT.body()
    assert requests[1][2] == module.EXCLUDE_SCRIPT.body()
    query = itlr.parse(QUERY)
    backend_class = (
        opensearch.OpenSearchBackend
        if engine == "opensearch"
        else elasticsearch.ElasticsearchBackend
    )
    backend = backend_class(None, "demo", embedder.name, embedder.dims)
    # Without a cluster translate prints cosine truths, whatever the default truths are.
    options = SearchOptions(hard_filter=0.5, truth=TruthMap("clamp"))
    expected = backend.build_request(query, embedder.encode_terms(list(query.terms)), options)
    assert requests[2][2] == json.loads(json.dumps(expected))


def test_each_engine_gets_its_own_request_syntax() -> None:
    (_, _, es_body) = parse_console(translate(QUERY, "--engine", "elasticsearch", "-i", "x"))[0]
    (_, _, os_body) = parse_console(translate(QUERY, "--engine", "opensearch", "-i", "x"))[0]
    (es_knn,) = es_body["query"]["script_score"]["query"]["bool"]["should"]
    (os_knn,) = os_body["query"]["script_score"]["query"]["bool"]["should"]
    assert set(es_knn["knn"]) >= {"field", "query_vector", "num_candidates", "k"}
    assert set(os_knn["knn"]) == {"embedding"} and "vector" in os_knn["knn"]["embedding"]


def test_options_shape_the_request(embedder) -> None:
    text = translate(
        '"vitamin D" OR "coffee and sleep"',
        "--engine",
        "elasticsearch",
        "-i",
        "demo",
        "--k",
        "7",
        "--candidates",
        "55",
        "--and",
        "min",
        "--or",
        "max",
        "--not",
        "reciprocal",
        "--truth",
        "sigmoid",
        "--tau",
        "0.3",
        "--lam",
        "8",
        "--filter",
        '{"term": {"metadata.topic": "coffee"}}',
        "--vector-field",
        "vec",
    )
    ((_, _, body),) = parse_console(text)
    assert body["size"] == 7
    params = body["query"]["script_score"]["script"]["params"]
    assert (params["and_op"], params["or_op"], params["not_op"], params["truth"]) == (2, 1, 1, 2)
    assert params["tau"] == [0.3, 0.3] and params["field"] == "vec"
    clauses = body["query"]["script_score"]["query"]["bool"]["should"]
    # The candidate plan shares 55 neighbours per positive term among its searches.
    assert sum(clause["knn"]["k"] for clause in clauses) == 55 * 2
    for clause in clauses:
        assert clause["knn"]["field"] == "vec"
        assert clause["knn"]["filter"] == {"term": {"metadata.topic": "coffee"}}


def test_a_query_of_only_negations_is_translated_in_exact_mode() -> None:
    ((_, _, body),) = parse_console(translate('NOT "bone health"', "-i", "demo"))
    assert body["query"]["script_score"]["query"]["bool"]["must"] == [{"match_all": {}}]


def test_server_version_shapes_the_elasticsearch_knn_clause() -> None:
    args = [QUERY, "--engine", "elasticsearch", "-i", "demo", "--candidates", "80"]
    args += ["--truth", "clamp"]  # no note about a hybrid default beside the one error line
    ((_, _, body),) = parse_console(translate(*args, "--server-version", "8.13.2"))
    (clause,) = body["query"]["script_score"]["query"]["bool"]["should"]
    assert "k" not in clause["knn"] and clause["knn"]["num_candidates"] == 80
    old = runner.invoke(app, ["translate", *args, "--server-version", "8.10.2"])
    assert old.exit_code == 2
    assert "8.12" in old.stderr and "--mode exact" in old.stderr
    assert len(old.stderr.strip().splitlines()) == 1


def test_json_format_prints_the_search_body_alone() -> None:
    body = json.loads(
        translate(QUERY, "--engine", "elasticsearch", "-i", "demo", "--format", "json")
    )
    assert set(body) == {"size", "query", "sort", "_source"}
    refused = runner.invoke(
        app, ["translate", QUERY, "-i", "demo", "--format", "json", "--with-install"]
    )
    assert refused.exit_code == 2 and "--with-install" in refused.stderr
    assert "Traceback" not in refused.output


def test_inline_script_puts_the_source_in_the_request_and_needs_no_install() -> None:
    text = translate(
        QUERY, "--engine", "elasticsearch", "-i", "demo", "--inline-script", "--with-install"
    )
    ((method, _, body),) = parse_console(text)
    assert method == "GET"
    assert body["query"]["script_score"]["script"]["source"] == elasticsearch.SCORE_SCRIPT.source


def test_translate_needs_no_cluster_for_cosine_truths(monkeypatch) -> None:
    monkeypatch.setenv("ITLR_URL", "http://127.0.0.1:9")  # nothing listens there
    text = translate(
        QUERY, "--engine", "elasticsearch", "-i", "demo", "--format", "curl", "--truth", "clamp"
    )
    assert "http://127.0.0.1:9/demo/_search" in text


def test_hybrid_truths_asked_for_without_a_cluster_are_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.delenv("ITLR_URL", raising=False)
    refused = runner.invoke(app, ["translate", QUERY, "-i", "demo", *HYBRID])
    assert refused.exit_code == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: --truth hybrid needs the index's token statistics")
    assert "give --url" in line


def test_hybrid_truths_that_are_only_the_default_print_cosine_truths_with_a_note(
    monkeypatch,
) -> None:
    monkeypatch.delenv("ITLR_URL", raising=False)
    # Hybrid as the default, where search_options keeps its defaults (whatever ships).
    for name, value in (("truth", "hybrid"), ("lexical", 0.3), ("not_evidence", "max")):
        monkeypatch.setitem(search_options.__kwdefaults__, name, value)
    result = runner.invoke(app, ["translate", QUERY, "-i", "demo", "--format", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    params = body["query"]["script_score"]["script"]["params"]
    assert params["truth"] == TRUTH_CODES["clamp"] and "lex_tokens" not in params
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("warning: the default hybrid truths need the index's token statistics")
    assert "--truth clamp" in line and "give --url" in line
    clamp = translate(QUERY, "-i", "demo", "--format", "json", "--truth", "clamp")
    assert body == json.loads(clamp)


def test_syntax_errors_exit_2_with_the_caret() -> None:
    bad = runner.invoke(app, ["translate", '"vitamin D" AND', "-i", "demo"])
    assert bad.exit_code == 2 and "syntax error" in bad.output


def curl_commands(text: str) -> list[str]:
    return [block for block in text.split("\n\n") if block.startswith("curl ")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_curl_format_is_valid_shell_with_the_body_in_a_quoted_heredoc() -> None:
    text = translate(
        '"it\'s $HOME `x`" AND NOT "bone health"',
        "-i",
        "demo",
        "--with-install",
        "--format",
        "curl",
    )
    commands = curl_commands(text)
    assert len(commands) == 3
    check = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    for command in commands:
        first, *body, last = command.splitlines()
        assert first.endswith("<<'ITLR_JSON'") and last == "ITLR_JSON"
        json.loads("\n".join(body))


def read_json_stream(text: str) -> list[dict]:
    decoder = json.JSONDecoder()
    values, position = [], 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        value, position = decoder.raw_decode(text, position)
        values.append(value)
    return values


@pytest.mark.opensearch
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_output_runs_against_opensearch_and_returns_the_embedded_ranking(
    opensearch_url, embedder, tmp_path
) -> None:
    corpus = list(read_jsonl(data_file("demo", "corpus.jsonl")))[:80]
    backend = opensearch.OpenSearchBackend(
        Connection(opensearch_url).opensearch(),
        f"itlr-translate-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=opensearch_url,
    )
    backend.ensure_index()
    vectors = embedder.encode([d.text for d in corpus])
    assert backend.add([d.id for d in corpus], [d.text for d in corpus], vectors) == {}
    backend.refresh()
    text = translate(
        QUERY,
        "-i",
        backend.index_name,
        "--url",
        opensearch_url,
        "--with-install",
        "--format",
        "curl",
    )
    ran = subprocess.run(["bash"], input=text, text=True, capture_output=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    *installs, search = read_json_stream(ran.stdout)
    assert all(answer.get("acknowledged") for answer in installs), installs
    ids = [hit["_id"] for hit in search["hits"]["hits"]]
    query = itlr.parse(QUERY)
    expected = backend.search(query, embedder.encode(list(query.terms)), SearchOptions())
    assert ids == [h.id for h in expected] and len(ids) == 10


def test_the_plan_flag_chooses_the_candidate_searches() -> None:
    query = '"vitamin D" AND "immune system" AND NOT "bone health"'

    def knn_ks(*flags: str) -> list[int]:
        body = json.loads(translate(query, "-i", "demo", "--format", "json", *flags))
        should = body["query"]["script_score"]["query"]["bool"]["should"]
        return [clause["knn"]["embedding"]["k"] for clause in should]

    # The default combines an anchored conjunction into one search with the whole budget.
    assert knn_ks() == [200]
    assert knn_ks("--plan", "per-term") == [100, 100]
    assert knn_ks("--plan", "per-branch", "--candidates", "30") == [60]


@pytest.mark.opensearch
def test_translate_with_url_counts_the_statistics_and_its_body_scores_like_itlr_search(
    opensearch_url, opensearch_demo
) -> None:
    opensearch_demo.install_scripts()  # the body names the stored script, as Dev Tools would
    index = opensearch_demo.index_name
    for query in (QUERY, '("vitamin D" OR "sleep quality") AND NOT "caffeine"'):
        text = translate(query, "-i", index, "--url", opensearch_url, "--format", "json", *HYBRID)
        body = json.loads(text)
        params = body["query"]["script_score"]["script"]["params"]
        assert params["truth"] == TRUTH_CODES["hybrid"] and params["lex_tokens"]
        sent = httpx.post(f"{opensearch_url}/{index}/_search", json=body, timeout=60)
        assert sent.status_code == 200, sent.text
        got = [(hit["_id"], hit["_score"]) for hit in sent.json()["hits"]["hits"]]
        searched = runner.invoke(
            app, ["search", query, "-i", index, "--url", opensearch_url, "--json", *HYBRID]
        )
        assert searched.exit_code == 0, searched.output
        expected = [(hit["id"], hit["score"]) for hit in json.loads(searched.stdout)["hits"]]
        assert len(got) == len(expected) == 10
        assert [i for i, _ in got] == [i for i, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-4)


def test_translate_with_a_cluster_that_is_down_says_so_in_one_line() -> None:
    refused = runner.invoke(
        app, ["translate", QUERY, "-i", "demo", "--url", "http://127.0.0.1:9", *HYBRID]
    )
    assert refused.exit_code == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert "http://127.0.0.1:9" in line and "Traceback" not in refused.output
