"""A tiny OpenAI-compatible chat server on 127.0.0.1 for tests: real HTTP, scripted replies.

    with FakeLLMServer() as server:
        server.script(Reply('"a" AND NOT "b"'))
        config = LLMConfig(model="fake", base_url=server.base_url)

Replies are served in order; `respond_with(fn)` answers every request from a function instead.
A request with nothing scripted gets a 500 that names the problem, so a test that sends more
requests than it expects fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()


def _completion(content: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeLLMServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        self._responder: Callable[[dict[str, Any]], Reply] | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # A slow reply must not hold up shutdown after the client has given up on it.
        self._server.daemon_threads = True
        self._server.block_on_close = False
        # A short poll keeps shutdown (and so every test using the server) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def respond_with(self, responder: Callable[[dict[str, Any]], Reply]) -> None:
        self._responder = responder

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        if self._responder is not None:
            return self._responder(request)
        return Reply(status=500, content="the fake server has no scripted reply left")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                request["_path"] = self.path
                request["_authorization"] = self.headers.get("Authorization")
                reply = fake._next_reply(request)
                time.sleep(reply.delay)
                if reply.status == 200:
                    body = _completion(reply.content, request.get("model", "fake"))
                else:
                    body = {"error": {"message": reply.content or "error", "type": "test"}}
                data = json.dumps(body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: that is the point of a slow reply

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
