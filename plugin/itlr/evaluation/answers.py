"""A file of LLM answers served as an OpenAI-compatible chat endpoint on loopback, for `itlr eval
--llm-answers FILE`: the questions go through the real LLM rewriter (its prompt, the answer's
lenient parsing, the retry on a syntax error, the fallback to the rules), and the answers are the
ones a model gave earlier, so an evaluation with a capable model's rewrites is repeatable offline.

The file is JSON lines, one question a line: `{"question": ..., "answer": ...}` (other keys, such
as `_id`, are ignored). A request is answered from the row whose question, put into the prompt,
is exactly the request's user message; a question the file lacks is refused with a 400 that names
it, which the rewriter reports as an error: an evaluation that silently fell back to the rules
for some questions would measure a mix of rewriters.

Evaluation only: the server binds 127.0.0.1 on a free port and lives as long as the `with` block.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from itlr.errors import ConfigurationError
from itlr.rewrite.llm import PROMPT_VERSION, LLMConfig, load_prompt

# The model name the rewriter sends; the server answers whatever name it is given.
ANSWERS_MODEL = "answers-file"


def read_answers(path: Path) -> dict[str, str]:
    """question -> answer from a JSON-lines file; a clear error for a malformed line."""
    answers: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as bad:
        raise ConfigurationError(f"cannot read the answers file {path}: {bad.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as bad:
            raise ConfigurationError(f"{path}:{number}: not JSON ({bad})") from None
        if not (
            isinstance(row, dict)
            and isinstance(row.get("question"), str)
            and isinstance(row.get("answer"), str)
        ):
            raise ConfigurationError(
                f'{path}:{number}: each line must be an object with "question" and "answer" strings'
            )
        answers[row["question"]] = row["answer"]
    if not answers:
        raise ConfigurationError(f"the answers file {path} holds no answer")
    return answers


class ChatEndpoint:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 at a free port, live for the `with` block:
    each POST's JSON body goes to `respond`, whose status, body and extra headers are sent back.
    The answers file's server below, and the tests' scripted stand-in, are both one."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # A slow answer must not hold up shutdown after its client has given up on it.
        self._server.daemon_threads = True
        self._server.block_on_close = False
        # A short poll keeps shutdown fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def respond(self, request: dict[str, Any], path: str, headers: Message) -> ChatReply:
        """The status, JSON body and extra headers for one POST (`request` is {} if its body
        was not a JSON object)."""
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    request = {}
                reply = endpoint.respond(
                    request if isinstance(request, dict) else {}, self.path, self.headers
                )
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: nobody is waiting for the answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@dataclass(frozen=True)
class ChatReply:
    status: int
    body: dict[str, Any]
    headers: Sequence[tuple[str, str]] = ()


class AnswersServer(ChatEndpoint):
    """`with AnswersServer(answers) as server:` an endpoint at `server.base_url` answering the
    rewriter's prompt (version `prompt_version`) for each question of `answers`."""

    def __init__(self, answers: Mapping[str, str], prompt_version: str = PROMPT_VERSION) -> None:
        prompt = load_prompt(prompt_version)
        self.prompt_version = prompt_version
        # Keyed by the user message the rewriter sends for the question: nothing is parsed
        # out of the prompt, so any prompt text works.
        self._answers = {
            prompt.messages(question)[-1]["content"]: answer for question, answer in answers.items()
        }
        self.asked = 0
        super().__init__()

    def config(self, timeout: float = 30.0) -> LLMConfig:
        """The rewriter's configuration for this server: answers are not cached on disk (the
        file is the cache), and nothing is retried after a refusal."""
        return LLMConfig(
            model=ANSWERS_MODEL,
            base_url=self.base_url,
            timeout=timeout,
            prompt_version=self.prompt_version,
            cache=False,
        )

    def respond(self, request: dict[str, Any], path: str, headers: Message) -> ChatReply:
        if not path.endswith("/chat/completions"):
            return ChatReply(404, chat_error(f"no such endpoint: {path}"))
        return ChatReply(*self.answer(request))

    def answer(self, request: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and body for one chat request."""
        messages = request.get("messages")
        if not isinstance(messages, list):
            messages = []
        said = [m.get("content") for m in messages if isinstance(m, dict)]
        user = said[-1] if said else None
        if not isinstance(user, str):
            return 400, chat_error("the request has no user message")
        answer = self._answers.get(user)
        if answer is None:
            # The rewriter's second try after an answer that did not parse: the file has one
            # answer per question, so the same one again (the question is the first user's).
            first = said[1] if len(said) > 2 else None
            answer = self._answers.get(first) if isinstance(first, str) else None
            if answer is None:
                # The rewriter shows 160 characters of the message: the question's end fits.
                question = " ".join(user.split())[-100:]
                return 400, chat_error(f"no answer in the answers file for ...{question}")
        self.asked += 1
        return 200, chat_completion(answer, str(request.get("model", ANSWERS_MODEL)))


def chat_error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI-shaped error body."""
    return {"error": {"message": message, "type": kind}}


def chat_completion(content: str, model: str) -> dict[str, Any]:
    """An OpenAI-shaped chat completion whose one choice says `content`."""
    return {
        "id": "chatcmpl-itlr",
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
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


__all__ = [
    "ANSWERS_MODEL",
    "AnswersServer",
    "ChatEndpoint",
    "ChatReply",
    "chat_completion",
    "chat_error",
    "read_answers",
]
