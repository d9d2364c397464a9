"""Bad input ends in one clear line and loses nothing good: documents, queries, servers."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app
from itlr.documents import read_documents
from itlr.engines.embedded import EmbeddedBackend
from itlr.errors import EngineError, QuerySyntaxError

runner = CliRunner()


def invoke(*args: str, input: str | bytes | None = None):
    return runner.invoke(app, list(args), input=input)


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- documents ---------------------------------------------------------------------------------


def test_lines_that_are_not_documents_are_reported_and_the_rest_kept(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    lines = [
        b'{"id": "good1", "text": "kept"}',
        b'{"id": "bad-bytes", "text": "caf\xe9"}',
        b"[1, 2]",
        b'"just a string"',
        b"null",
        b'{"text": "no id"}',
        b'{"id": "no-text"}',
        b'{"id": "torn", "te',
        b'{"id": 1.5, "text": "float id"}',
        b'{"id": "surrogate", "text": "\\ud800"}',
        b"",
        b'{"id": "good2", "text": "kept too"}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    found = read_documents(path)
    assert [d.id for d in found.documents] == ["good1", "good2"]
    reasons = {bad.line: bad.reason for bad in found.bad_lines}
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert "not UTF-8" in reasons[2] and "0xe9" in reasons[2]
    assert "an array" in reasons[3] and "a string" in reasons[4] and "null" in reasons[5]
    assert reasons[6].startswith("no id") and reasons[7].startswith("no text")
    assert "not valid JSON" in reasons[8]
    assert "ids are strings" in reasons[9]
    assert "lone surrogate" in reasons[10]
    assert str(found.bad_lines[0]).startswith(f"{path}:2: ")


def test_a_byte_order_mark_is_ignored_in_csv_and_json_lines(tmp_path) -> None:
    csv_path = tmp_path / "docs.csv"
    csv_path.write_bytes("\ufeffid,text\n1,Solar power\n".encode())
    jsonl_path = tmp_path / "docs.jsonl"
    jsonl_path.write_bytes('\ufeff{"id": "a", "text": "Wind power"}\n'.encode())
    assert [d.id for d in read_documents(csv_path).documents] == ["1"]
    assert [d.id for d in read_documents(jsonl_path).documents] == ["a"]


def test_a_csv_row_with_bytes_that_are_not_utf8_costs_only_that_row(tmp_path) -> None:
    path = tmp_path / "docs.csv"
    path.write_bytes(b"id,text\n1,fine\n2,caf\xe9\n3,also fine\n")
    found = read_documents(path)
    assert [d.id for d in found.documents] == ["1", "3"]
    assert [(b.line, "not UTF-8" in b.reason) for b in found.bad_lines] == [(3, True)]


def test_repeated_ids_keep_the_last_copy_and_are_counted_numbers_are_strings(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    records = [
        {"id": 1, "text": "first"},
        {"id": "2", "text": "two"},
        {"id": "1", "text": "last"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    found = read_documents(path)
    assert [(d.id, d.text) for d in found.documents] == [("1", "last"), ("2", "two")]
    assert found.duplicates == 1


def test_ingest_keeps_the_good_documents_lists_bad_lines_and_exits_1(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'{"id": "a", "text": "Vitamin D and the immune system"}\n'
        b"[not, a, document]\n"
        b'{"id": "a", "text": "Vitamin D supports immunity"}\n'
        b'{"id": "b[red]x[/red]", "text": "caf\xe9"}\n'
        b'{"id": "c", "text": "Roman roads"}\n'
    )
    index = tmp_path / "idx"
    result = invoke("ingest", str(path), "--index", str(index))
    assert result.exit_code == 1, result.output
    assert f"{path}:2: not valid JSON" in result.stderr
    assert f"{path}:4: not UTF-8" in result.stderr
    assert (
        "added 2, updated 0, unchanged 0, deleted 0, 1 repeated ids (last copy kept), 2 bad lines"
        in (result.stdout)
    )
    stored = EmbeddedBackend.open(index)
    assert stored.ids() == ["a", "c"] and stored.get("a")["text"] == "Vitamin D supports immunity"


def test_strict_ingest_refuses_the_whole_file_and_writes_nothing(tmp_path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "fine"}\n{"id": "b"}\n')
    result = invoke("ingest", str(path), "--index", str(tmp_path / "idx"), "--strict")
    assert result.exit_code == 2
    assert f"{path}:2: no text" in result.stderr
    assert "nothing was ingested" in result.stderr
    assert not (tmp_path / "idx").exists()


# -- queries -----------------------------------------------------------------------------------


def test_weights_must_be_finite_and_at_most_1000() -> None:
    with pytest.raises(QuerySyntaxError, match="from 0 to 1000"):
        itlr.parse('"a"^' + "9" * 400)
    with pytest.raises(QuerySyntaxError, match="from 0 to 1000"):
        itlr.parse("a^1000.5")
    assert itlr.parse("a^1000").root.weight == 1000


def test_a_weight_prints_without_an_exponent_and_parses_back() -> None:
    for text in ("a^0.00001", "a^0.123456789", "a^1000", "a^0"):
        query = itlr.parse(text)
        assert itlr.parse(str(query)).root == query.root
    assert str(itlr.parse("a^0.00001")) == '"a"^0.00001'


def test_text_that_is_not_unicode_is_a_syntax_error_at_its_position() -> None:
    with pytest.raises(QuerySyntaxError, match="not valid Unicode") as raised:
        itlr.parse("vitamin\udcff AND b")
    assert raised.value.position == 7
    assert "\ufffd" in raised.value.caret


def test_translate_of_an_oversized_weight_is_a_syntax_error_not_infinity() -> None:
    result = invoke("translate", '"a"^' + "9" * 400, "--index", "x", "--format", "json")
    assert result.exit_code == 2 and "Infinity" not in result.stdout
    assert "from 0 to 1000" in result.stderr


def test_a_query_comes_from_stdin_or_a_file(tmp_path) -> None:
    long_query = " OR ".join(f'"term {i}"' for i in range(64))  # the most terms a query may hold
    from_stdin = invoke("parse", "-", input=long_query.encode())
    assert from_stdin.exit_code == 0, from_stdin.output
    assert from_stdin.stdout.count("OR") == 63
    query_file = tmp_path / "query.txt"
    query_file.write_text("-a AND b\n")
    from_file = invoke("parse", "--query-file", str(query_file))
    assert from_file.stdout.strip() == '(NOT "a" AND "b")'


def test_query_from_stdin_that_is_not_utf8_is_one_line(tmp_path) -> None:
    result = invoke("parse", "-", input=b"caf\xe9 AND b")
    assert result.exit_code == 2
    assert "not valid Unicode" in result.stderr and "Traceback" not in result.output


def test_a_query_starting_with_a_dash_gets_a_hint_naming_the_fix() -> None:
    result = invoke("parse", "-a AND b")
    assert result.exit_code == 2
    assert "put -- before it" in result.output
    fixed = invoke("parse", "--", "-a AND b")
    assert fixed.stdout.strip() == '(NOT "a" AND "b")'


def test_no_query_or_two_queries_is_one_line() -> None:
    assert "no query" in one_line_error(invoke("parse"))
    assert "not both" in one_line_error(invoke("parse", "a", "--query-file", "q.txt"))


# -- servers that are not search engines -------------------------------------------------------


@pytest.fixture()
def html_server() -> Iterator[str]:
    """A web server that is not a search engine: every path answers an HTML page."""

    class Page(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            body = b"<!DOCTYPE html><html><body>" + b"<p>[b]welcome[/b]</p>" * 500 + b"</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_HEAD = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("engine", [[], ["--engine", "opensearch"]])
def test_a_url_that_is_not_a_search_engine_is_one_line_without_the_page(
    html_server, engine
) -> None:
    line = one_line_error(invoke("search", "a", "--index", "x", "--url", html_server, *engine))
    assert html_server in line and "check --url" in line
    assert "welcome" not in line and len(line) < 300


@pytest.mark.parametrize("flag", ["--tau", "--lam", "--hard-filter"])
def test_an_infinite_scoring_option_is_one_line_not_infinity_in_json(flag) -> None:
    result = invoke("translate", "a AND NOT b", "--index", "x", flag, "inf", "--format", "json")
    assert f"{flag} must be a finite number" in one_line_error(result)


@pytest.mark.opensearch
def test_engine_detection_reads_the_root_endpoint_of_a_real_opensearch(opensearch_url) -> None:
    from itlr.engines.connection import Connection
    from itlr.engines.factory import detect_engine

    engine, version = detect_engine(Connection(opensearch_url))
    assert engine == "opensearch" and version.count(".") == 2


def test_engine_detection_refuses_a_web_page_in_one_line(html_server) -> None:
    from itlr.engines.connection import Connection
    from itlr.engines.factory import detect_engine

    with pytest.raises(EngineError) as refused:
        detect_engine(Connection(html_server))
    message = str(refused.value)
    assert "neither OpenSearch nor Elasticsearch" in message and "welcome" not in message


def test_engine_detection_of_a_closed_port_says_it_cannot_reach_it() -> None:
    from itlr.engines.connection import Connection
    from itlr.engines.factory import detect_engine

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EngineError, match="cannot reach"):
        detect_engine(Connection(f"http://127.0.0.1:{port}"))
