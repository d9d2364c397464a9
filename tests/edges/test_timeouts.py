"""Time-outs that say what happened (issue 26.5): a slow upstream is a 504 naming the seconds,
not "cannot reach the upstream"; a client that dribbles its headers or body (slowloris) loses
its connection after the read time-out, in the proxy and in the JSON service alike.

The slow upstream is a tiny local HTTP server that sleeps (a stand-in for a cluster that is
running but slow, which a real one cannot be made to be on demand); the slow clients are raw
sockets against the real servers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

import itlr
from itlr.engines.connection import Connection
from itlr.proxy import create_proxy_app, serving
from itlr.service import create_app
from itlr.service.server import free_port
from itlr.service.timeouts import ReadTimeouts
from served_process import first_answer

FAST = ReadTimeouts(header=1.0, body=1.0)
ROOT = {"version": {"distribution": "opensearch", "number": "3.6.0"}, "tagline": "The OpenSearch"}


class SlowUpstream(BaseHTTPRequestHandler):
    """Answers `GET /` at once (the proxy asks it which engine it is), everything else after
    `delay` seconds."""

    delay = 3.0

    def _answer(self) -> None:
        if self.path != "/" and not self.path.startswith("/_scripts/"):
            time.sleep(self.delay)
        status, body = (200, ROOT) if self.path == "/" else (404, {"found": False})
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the proxy gave up first: that is the point

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowUpstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def slowloris(url: str, first: bytes, dribble: bytes, every: float = 0.2, limit: float = 8.0):
    """Send `first`, then `dribble` every `every` s until the server answers or closes; returns
    (what the server sent, seconds until it closed)."""
    host, port = url.removeprefix("http://").split(":")
    start = time.monotonic()
    received = b""
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(every)
        sock.sendall(first)
        while time.monotonic() - start < limit:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                try:
                    sock.sendall(dribble)
                except OSError:
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    return received, time.monotonic() - start


def assert_cut_off(received: bytes, seconds: float, part: str) -> None:
    assert 0.9 <= seconds < 4.0, seconds  # the 1 s time-out, not the 8 s the client would take
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert f"the request {part} did not arrive within 1 s".encode() in received


HEADERS_DRIBBLED = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: 1\r\n")
BODY_DRIBBLED = (
    b"POST /x/_search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{",
    b" ",
)


@pytest.fixture(scope="module")
def guarded_proxy(slow_upstream, embedder) -> Iterator[str]:
    app = create_proxy_app(Connection(slow_upstream), embedder=embedder, timeout=1.0)
    with serving(app, read_timeouts=FAST) as url:
        yield url


@pytest.fixture(scope="module")
def guarded_service(embedded) -> Iterator[str]:
    index = itlr.Index.open(str(embedded.path), create=False)
    with serving(create_app(index), read_timeouts=FAST) as url:
        yield url


def test_a_slow_upstream_is_a_504_naming_the_seconds(guarded_proxy) -> None:
    start = time.monotonic()
    response = httpx.get(f"{guarded_proxy}/_cat/indices", timeout=30)
    elapsed = time.monotonic() - start
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert error["type"] == "itlr_upstream_timeout"
    assert "did not answer within 1 s" in error["reason"]
    assert "--upstream-timeout" in error["reason"]
    assert "is it running" not in error["reason"]
    assert response.json()["status"] == 504
    assert elapsed < 2.9  # the proxy's 1 s, not the upstream's 3 s


def test_a_logical_search_on_a_slow_upstream_is_a_504_too(guarded_proxy) -> None:
    body = {"query": {"query_string": {"query": 'itlr:("sleep")'}}}
    response = httpx.post(f"{guarded_proxy}/docs/_search", json=body, timeout=30)
    assert response.status_code == 504, response.text
    assert "did not answer within 1 s" in response.json()["error"]["reason"]


@pytest.fixture(scope="module")
def deaf_upstream() -> Iterator[str]:
    """Takes connections and never reads from them: a forwarded body stops going out once the
    socket buffers are full."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for connection in held:
        connection.close()


def test_an_upstream_that_stops_taking_a_forwarded_body_is_a_504_too(deaf_upstream) -> None:
    def bulk() -> Iterator[bytes]:
        for _ in range(512):  # 32 MiB: far more than the sockets buffer
            yield b"x" * 65536

    app = create_proxy_app(Connection(deaf_upstream), timeout=1.0)
    with serving(app, read_timeouts=FAST) as url:
        start = time.monotonic()
        response = httpx.put(f"{url}/docs/_bulk", content=bulk(), timeout=30)
        elapsed = time.monotonic() - start
    assert response.status_code == 504, response.text
    assert "did not answer within 1 s" in response.json()["error"]["reason"]
    assert elapsed < 4.0  # the write time-out, not the client's or the socket's patience


class CountingUpstream(BaseHTTPRequestHandler):
    """Reads a body whole and answers with its length, at once."""

    def do_PUT(self) -> None:
        received = len(self.rfile.read(int(self.headers["content-length"])))
        data = json.dumps({"received": received}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_body_the_ui_sends_slowly_is_not_cut_off_by_the_upstream_time_out() -> None:
    """The upstream time-out bounds each write to the upstream, not the wait for the UI's next
    chunk (the read time-outs bound that): 2.6 s of upload under a 1 s upstream time-out."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), CountingUpstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def slowly() -> Iterator[bytes]:
        for _ in range(2):
            time.sleep(1.3)
            yield b"x" * 1000

    app = create_proxy_app(Connection(f"http://127.0.0.1:{server.server_address[1]}"), timeout=1.0)
    try:
        with serving(app) as url:
            response = httpx.put(
                f"{url}/docs/_bulk",
                content=slowly(),
                headers={"content-length": "2000"},
                timeout=30,
            )
    finally:
        server.shutdown()
    assert response.status_code == 200, response.text
    assert response.json() == {"received": 2000}


def test_the_proxy_closes_a_connection_whose_headers_are_dribbled(guarded_proxy) -> None:
    assert_cut_off(*slowloris(guarded_proxy, *HEADERS_DRIBBLED), "headers")


def test_the_proxy_closes_a_connection_whose_body_is_dribbled(guarded_proxy) -> None:
    assert_cut_off(*slowloris(guarded_proxy, *BODY_DRIBBLED), "body")


def test_the_proxy_closes_a_connection_that_sends_nothing(guarded_proxy) -> None:
    received, seconds = slowloris(guarded_proxy, b"", b"", every=0.2)
    assert_cut_off(received, seconds, "headers")


def test_the_service_closes_connections_whose_headers_or_body_are_dribbled(
    guarded_service,
) -> None:
    assert_cut_off(*slowloris(guarded_service, *HEADERS_DRIBBLED), "headers")
    body_first = BODY_DRIBBLED[0].replace(b"/x/_search", b"/search")
    assert_cut_off(*slowloris(guarded_service, body_first, b" "), "body")


def test_the_service_still_answers_ordinary_requests_on_a_kept_alive_connection(
    guarded_service,
) -> None:
    with httpx.Client(base_url=guarded_service, timeout=30) as client:
        for _ in range(2):
            response = client.post("/search", json={"query": '"sleep"', "k": 3})
            assert response.status_code == 200, response.text
            time.sleep(1.2)  # idle longer than the read time-outs between requests: not cut
        assert client.get("/healthz").status_code == 200


def test_itlr_serve_proxy_takes_the_time_out_flags(slow_upstream) -> None:
    """The flags reach the running proxy: `itlr serve --proxy` as a real subprocess."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-c",
        "from itlr.cli import app; app()",
        "serve",
        "--proxy",
        "--url",
        slow_upstream,
        "--engine",
        "opensearch",
        "--port",
        str(port),
        "--upstream-timeout",
        "1",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        answer = first_answer(process, f"{url}/")
        assert answer.status_code == 200
        response = httpx.get(f"{url}/_cat/indices", timeout=30)
        assert response.status_code == 504, response.text
        assert "within 1 s" in response.json()["error"]["reason"]
        assert_cut_off(*slowloris(url, *HEADERS_DRIBBLED), "headers")
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--header-timeout", "0"], "--header-timeout"),
        (["--body-timeout", "-1"], "--body-timeout"),
        (["--upstream-timeout", "0"], "--upstream-timeout"),
    ],
)
def test_a_time_out_that_is_not_positive_is_refused_in_one_line(flags, named) -> None:
    from typer.testing import CliRunner

    from itlr.cli import app as cli

    result = CliRunner().invoke(cli, ["serve", "--proxy", "--url", "http://127.0.0.1:1", *flags])
    assert result.exit_code == 2, result.output
    assert named in result.output and "positive number of seconds" in result.output
