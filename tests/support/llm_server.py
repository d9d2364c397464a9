"""A tiny OpenAI-compatible chat server on 127.0.0.1 for tests: real HTTP, scripted replies.

    with FakeLLMServer() as server:
        server.script(Reply('"a" AND NOT "b"'))
        config = LLMConfig(model="fake", base_url=server.base_url)

Replies are served in order; `respond_with(fn)` answers every request from a function instead.
A request with nothing scripted gets a 500 that names the problem, so a test that sends more
requests than it expects fails loudly. The HTTP side is the product's own chat endpoint (the one
`itlr eval --llm-answers` serves an answers file with); only the replies are scripted here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from typing import Any

from itlr.evaluation.answers import ChatEndpoint, ChatReply, chat_completion, chat_error


@dataclass(frozen=True)
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()


class FakeLLMServer(ChatEndpoint):
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        self._responder: Callable[[dict[str, Any]], Reply] | None = None
        self._lock = threading.Lock()
        super().__init__()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def respond_with(self, responder: Callable[[dict[str, Any]], Reply]) -> None:
        self._responder = responder

    def respond(self, request: dict[str, Any], path: str, headers: Message) -> ChatReply:
        request["_path"] = path
        request["_authorization"] = headers.get("Authorization")
        reply = self._next_reply(request)
        time.sleep(reply.delay)
        if reply.status == 200:
            body = chat_completion(reply.content, request.get("model", "fake"))
        else:
            body = chat_error(reply.content or "error", "test")
        return ChatReply(reply.status, body, reply.headers)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        if self._responder is not None:
            return self._responder(request)
        return Reply(status=500, content="the fake server has no scripted reply left")
