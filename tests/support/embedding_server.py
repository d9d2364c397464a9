"""A small OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 for tests: real HTTP, the real
bundled model behind it (the local encoder), and scripted misbehaviour in front of it.

    with EmbeddingServer(embedder) as server:
        server.misbehave(Misbehaviour(status=429), Misbehaviour(status=429))
        Embedder("all-MiniLM-L6-v2", encoder="openai", encoder_url=server.base_url)

Each request takes the next scripted misbehaviour, if any: a status with an error body, a delay
before the answer, a raw body instead of the embeddings, or an answer sent a byte at a time. With none left it answers as a real
server does. `requests` records the inputs of every request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Misbehaviour:
    status: int = 200
    delay: float = 0.0
    body: str | None = None  # sent as it is, instead of the embeddings
    trickle: float = 0.0  # seconds between the answer's bytes (its headers come at once)


class EmbeddingServer:
    def __init__(self, embedder: Any, model: str = "all-MiniLM-L6-v2") -> None:
        self.embedder = embedder
        self.model = model
        self.requests: list[list[str]] = []
        self.authorizations: list[str | None] = []
        self._script: deque[Misbehaviour] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def misbehave(self, *steps: Misbehaviour) -> None:
        with self._lock:
            self._script.extend(steps)

    def _next(self) -> Misbehaviour | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def answer(self, inputs: list[str]) -> dict[str, Any]:
        vectors = self.embedder.encode(inputs)
        return {
            "object": "list",
            "model": self.model,
            "data": [
                {"object": "embedding", "index": n, "embedding": [float(x) for x in vector]}
                for n, vector in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str, trickle: float = 0.0) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if not trickle:
                        self.wfile.write(data)  # unless the client gave up (its time-out)
                        return
                    for byte in range(len(data)):
                        self.wfile.write(data[byte : byte + 1])
                        self.wfile.flush()
                        time.sleep(trickle)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._send(404, '{"error": {"message": "not found"}}')
                    return
                inputs = request.get("input")
                inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                server.requests.append(inputs)
                server.authorizations.append(self.headers.get("Authorization"))
                step = server._next()
                if step is not None and step.delay:
                    time.sleep(step.delay)
                if step is not None and step.status != 200:
                    reason = {"error": {"message": f"scripted {step.status}", "type": "test"}}
                    self._send(step.status, json.dumps(reason))
                elif step is not None and step.body is not None:
                    self._send(200, step.body)
                else:
                    trickle = step.trickle if step is not None else 0.0
                    self._send(200, json.dumps(server.answer(inputs)), trickle)

        return Handler
