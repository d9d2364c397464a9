"""The LLM rewriter: any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp).

The answer must parse with our grammar. A syntax error is shown to the model once; time-outs, rate
limits and server errors are retried with backoff. When all of that fails the caller falls back
to the rule rewriter, so this module reports failure as `LLMFailure` rather than raising.
Configuration problems (no key, unknown model, refused credentials) do raise: retrying or
falling back would only hide them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from itlr.errors import QuerySyntaxError, RewriteError
from itlr.extras import require
from itlr.limits import LIMITS
from itlr.paths import itlr_home
from itlr.query import Query, parse
from itlr.settings import seconds
from itlr.urls import redact_url

if TYPE_CHECKING:
    from openai import OpenAI

PROMPTS = Path(__file__).resolve().parent / "prompts"
PROMPT_VERSION = "v1"
_USER_MARKER = "---- user ----"
# Local servers (Ollama, llama.cpp, vLLM) accept any key, but the client insists on one.
PLACEHOLDER_KEY = "not-needed"
OPENAI_ENDPOINT = "https://api.openai.com/v1"


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask: an OpenAI-compatible endpoint and the retry budget."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 30.0
    retries: int = 2
    backoff: float = 1.0
    max_backoff: float = 10.0
    prompt_version: str = PROMPT_VERSION
    cache: bool = True
    # 0 for repeatable answers; None leaves it out for endpoints that refuse the parameter.
    temperature: float | None = 0.0

    def __post_init__(self) -> None:
        seconds(self.timeout, "the LLM time-out (--llm-timeout)")

    @property
    def endpoint(self) -> str:
        return (self.base_url or OPENAI_ENDPOINT).rstrip("/")

    @property
    def shown_endpoint(self) -> str:
        """The endpoint as messages show it: without a user or password (itlr.urls)."""
        return redact_url(self.endpoint)

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if self.base_url is None:
            raise RewriteError(
                f"no API key for OpenAI: set ${self.api_key_env}, or give `llm_base_url` "
                "for a local OpenAI-compatible server"
            )
        return PLACEHOLDER_KEY


@dataclass(frozen=True)
class Prompt:
    version: str
    system: str
    user: str

    def messages(self, question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user.replace("{question}", question)},
        ]


def load_prompt(version: str = PROMPT_VERSION) -> Prompt:
    path = PROMPTS / f"{version}.txt"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROMPTS.glob("*.txt")))
        raise RewriteError(f"no prompt version {version!r}: choose one of {known}")
    system, _, user = path.read_text(encoding="utf-8").partition(_USER_MARKER)
    if "{question}" not in user:
        raise RewriteError(f"prompt {path} has no '{_USER_MARKER}' section with {{question}}")
    return Prompt(version, system.strip(), user.strip())


_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_LABEL = re.compile(r"^(?:logical\s+)?(?:query|answer)\s*:\s*", re.IGNORECASE)


def _candidates(answer: str) -> list[str]:
    """Texts worth parsing from an answer, most faithful first."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    text = _LABEL.sub("", text).strip().strip("`").strip()
    lines = [_LABEL.sub("", line).strip() for line in text.splitlines() if line.strip()]
    # Chatty models add a sentence after the query: the first line alone is the next best guess.
    return [text, *lines[:1]] if len(lines) > 1 else [text]


def parse_answer(answer: str) -> Query:
    """Parse a model's answer leniently (code fences, a leading "Query:", trailing chatter)."""
    first_error: QuerySyntaxError | None = None
    for candidate in _candidates(answer):
        try:
            return parse(candidate)
        except QuerySyntaxError as bad:
            first_error = first_error or bad
    assert first_error is not None
    raise first_error


def cache_dir() -> Path:
    return itlr_home() / "cache" / "rewrite"


def cache_key(config: LLMConfig, question: str) -> str:
    identity = [config.endpoint, config.model, config.prompt_version, question]
    return hashlib.sha256(json.dumps(identity, ensure_ascii=False).encode()).hexdigest()


def _read_cache(config: LLMConfig, question: str) -> str | None:
    path = cache_dir() / f"{cache_key(config, question)}.json"
    try:
        text = path.read_text(encoding="utf-8")
        LIMITS.check_json_depth(text, str(path))  # a LimitError, never a RecursionError
        entry = json.loads(text)
    except (OSError, ValueError):
        return None
    # A hash collision is absurdly unlikely, but a hand-edited entry is not.
    if entry.get("question") != question or not isinstance(entry.get("answer"), str):
        return None
    return cast(str, entry["answer"])


def _write_cache(config: LLMConfig, question: str, answer: str, query: Query) -> None:
    folder = cache_dir()
    entry = {
        "endpoint": config.shown_endpoint,
        "model": config.model,
        "prompt_version": config.prompt_version,
        "question": question,
        "answer": answer,
        "query": str(query),
        "created": time.time(),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Write then rename, so a concurrent reader never sees half a file.
        with tempfile.NamedTemporaryFile(
            "w", dir=folder, suffix=".tmp", delete=False, encoding="utf-8"
        ) as handle:
            json.dump(entry, handle, ensure_ascii=False, indent=1)
        os.replace(handle.name, folder / f"{cache_key(config, question)}.json")
    except OSError:
        pass  # a cache that cannot be written costs a request next time, nothing more


@dataclass(frozen=True)
class LLMAnswer:
    """A parsed answer and everything the model said on the way."""

    query: Query
    raw: str
    answers: tuple[str, ...]
    cached: bool = False
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class LLMFailure:
    """Why the model gave no usable query; the caller falls back to the rules."""

    reason: str
    answers: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())


class _Transient(Exception):
    """A request that may succeed if sent again later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMRewriter:
    """One client per configuration, reused across questions (connection pooling)."""

    def __init__(self, config: LLMConfig) -> None:
        (openai,) = require("llm", "openai")
        self.config = config
        self.prompt = load_prompt(config.prompt_version)
        # Our own retry loop decides about backoff and fallback, so the client's is off.
        self.client: OpenAI = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key(),
            timeout=config.timeout,
            max_retries=0,
        )

    def rewrite(self, question: str) -> LLMAnswer | LLMFailure:
        config = self.config
        if config.cache:
            cached = _read_cache(config, question)
            if cached is not None:
                try:
                    return LLMAnswer(parse_answer(cached), cached, (cached,), cached=True)
                except QuerySyntaxError:
                    pass  # written by an older grammar: ask again
        messages = self.prompt.messages(question)
        answers: list[str] = []
        warnings: list[str] = []
        for attempt in range(2):
            try:
                answer = self._complete(messages, warnings)
            except _Transient as failure:
                return LLMFailure(str(failure), tuple(answers), tuple(warnings))
            answers.append(answer)
            try:
                query = parse_answer(answer)
            except QuerySyntaxError as bad:
                if attempt == 1:
                    return LLMFailure(
                        f"the model's answer is not a valid query twice ({bad.message})",
                        tuple(answers),
                        tuple(warnings),
                    )
                warnings.append(f"the model's first answer did not parse ({bad.message})")
                messages = [
                    *messages,
                    {"role": "assistant", "content": answer},
                    {
                        "role": "user",
                        "content": f"That is not a valid query:\n{bad.render()}\n"
                        "Answer again with the corrected query only, on one line.",
                    },
                ]
                continue
            if config.cache:
                _write_cache(config, question, answer, query)
            return LLMAnswer(query, answer, tuple(answers), warnings=tuple(warnings))
        raise AssertionError("unreachable")

    def _complete(self, messages: list[dict[str, str]], warnings: list[str]) -> str:
        """One answer, retrying what is transient; raise _Transient once the budget is spent."""
        config = self.config
        for attempt in range(config.retries + 1):
            try:
                return self._request(messages)
            except _Transient as failure:
                if attempt == config.retries:
                    raise _Transient(f"{failure} (gave up after {attempt + 1} attempts)") from None
                delay = min(config.backoff * 2**attempt, config.max_backoff)
                if failure.retry_after is not None:
                    delay = min(max(failure.retry_after, 0.0), config.max_backoff)
                warnings.append(f"{failure}: retrying in {delay:g}s")
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(self, messages: list[dict[str, str]]) -> str:
        (openai,) = require("llm", "openai")

        config = self.config
        try:
            extra: dict[str, Any] = (
                {} if config.temperature is None else {"temperature": config.temperature}
            )
            response = self.client.chat.completions.create(
                model=config.model,
                messages=messages,  # type: ignore[arg-type]  # plain dicts, not openai's TypedDicts
                **extra,
            )
        except openai.APITimeoutError:
            raise _Transient(
                f"{config.shown_endpoint} did not answer within {config.timeout:g}s"
            ) from None
        except openai.APIConnectionError as bad:
            raise _Transient(f"cannot reach {config.shown_endpoint}: {bad}") from None
        except openai.RateLimitError as bad:
            raise _Transient(
                f"{config.shown_endpoint} is rate limiting (429)", _retry_after(bad.response)
            ) from None
        except openai.APIStatusError as bad:
            if bad.status_code >= 500:
                raise _Transient(f"{config.shown_endpoint} failed ({bad.status_code})") from None
            raise RewriteError(_refusal(config, bad.status_code, bad.message)) from None
        choices = getattr(response, "choices", None) or []
        content = choices[0].message.content if choices else None
        return content or ""


def _retry_after(response: object) -> float | None:
    value = getattr(response, "headers", {}).get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _refusal(config: LLMConfig, status: int, message: str) -> str:
    if status in (401, 403):
        return f"{config.shown_endpoint} refused the credentials ({status}): check ${config.api_key_env}"
    if status == 404:
        return (
            f"{config.shown_endpoint} has no model {config.model!r} (404): check `llm_model` "
            "and `llm_base_url` (it usually ends in /v1)"
        )
    said = " ".join(message.split())[:160]
    return f"{config.shown_endpoint} rejected the request ({status}: {said}): check `llm_model`"
