"""The openai encoder: vectors from an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Azure,
vLLM, Ollama, Infinity, text-embeddings-inference), through the `openai` package.

A deployment whose vectors came from an embedding service must embed query terms with the same
service. The `openai` client does the HTTP; the retries are here, so that they share one
deadline: `ITLR_ENCODER_TIMEOUT` (30 s) is the time for the whole call, every attempt and every
wait between them included, and an answer trickling in slower than that is cut at the deadline
(it is read in chunks). Connection errors, time-outs, 408, 409, 429 and 5xx are retried with
exponential back-off (honouring Retry-After), at most `ITLR_ENCODER_RETRIES` (4) times and only
while the deadline leaves room, each retry said in one line on stderr. A 404 at a URL without
`/v1` says that OpenAI-compatible servers answer under it. What comes back is checked before
anything uses it: valid JSON, one finite, non-zero vector per
input, every one of the same dimension. A bad answer raises EmbeddingError in one line, so
ingestion writes nothing of that batch and a search fails instead of scoring with garbage.
The vectors are scaled to unit length, as the local encoders' are.

`openai` is imported here only, on first use: `import itlr` never loads it.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from itlr.errors import EmbeddingError
from itlr.settings import env_number
from itlr.urls import redact_url

URL_ENV = "ITLR_ENCODER_URL"
KEY_ENV = "ITLR_ENCODER_API_KEY"
TIMEOUT_ENV = "ITLR_ENCODER_TIMEOUT"
RETRIES_ENV = "ITLR_ENCODER_RETRIES"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
INSTALL_HINT = "pip install 'itlr[llm]'"
# Local servers take any key; the client refuses to start without one.
_NO_KEY = "itlr-no-key"


def _openai() -> Any:
    try:
        import openai
    except ImportError:
        raise EmbeddingError(
            f"the openai encoder needs the openai package: {INSTALL_HINT}"
        ) from None
    return openai


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _vector(item: Any, position: int) -> np.ndarray:
    """One `data` entry's embedding: a list of numbers, or base64 float32 (encoding_format)."""
    embedding = item.get("embedding") if isinstance(item, dict) else None
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        except ValueError:
            raise EmbeddingError(
                f"entry {position} of the endpoint's answer holds a string that is not base64 "
                "float32"
            ) from None
    if not isinstance(embedding, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in embedding
    ):
        raise EmbeddingError(
            f"entry {position} of the endpoint's answer has no `embedding` list of numbers"
        )
    return np.asarray(embedding, dtype=np.float32)


def parse_embeddings(text: str, expected: int, dims: int | None) -> np.ndarray:
    """The (expected, dims) unit vectors in an `/v1/embeddings` answer, ordered by `index`;
    EmbeddingError for anything else."""
    try:
        payload = json.loads(text, parse_constant=_reject_constant)
    except ValueError as bad:
        shown = text[:80].replace("\n", " ")
        raise EmbeddingError(f"the endpoint's answer is not JSON ({bad}): {shown!r}") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise EmbeddingError("the endpoint's answer has no `data` list of embeddings")
    if len(data) != expected:
        raise EmbeddingError(f"the endpoint returned {len(data)} embeddings for {expected} inputs")
    order = [item.get("index", n) if isinstance(item, dict) else n for n, item in enumerate(data)]
    if sorted(order) != list(range(expected)):
        raise EmbeddingError(
            f"the endpoint's embeddings are numbered {order[:10]}, not 0..{expected - 1}"
        )
    rows: list[np.ndarray | None] = [None] * expected
    for position, (slot, item) in enumerate(zip(order, data, strict=True)):
        rows[slot] = _vector(item, position)
    widths = {row.shape[0] for row in rows if row is not None}
    if len(widths) != 1:
        raise EmbeddingError(f"the endpoint's embeddings have different lengths {sorted(widths)}")
    (width,) = widths
    if dims is not None and width != dims:
        raise EmbeddingError(
            f"the endpoint returned {width}-dim embeddings, {dims} before: is another model "
            "behind it now?"
        )
    vectors = np.stack(rows)  # type: ignore[arg-type]
    if not np.isfinite(vectors).all():
        raise EmbeddingError("the endpoint returned an embedding with NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if width == 0 or not (norms > 0).all():
        raise EmbeddingError("the endpoint returned an empty or all-zero embedding")
    unit: np.ndarray = (vectors / norms).astype(np.float32)
    return unit


class OpenAIEncoder:
    """Unit vectors of `model` from the endpoint at `url` (its base, e.g. http://host:7997/v1)."""

    def __init__(
        self,
        model: str,
        url: str,
        api_key: str | None = None,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> None:
        openai = _openai()
        self.model = model
        self.url = url.rstrip("/")
        self.shown_url = shown(self.url)
        self.timeout = (
            timeout
            if timeout is not None
            else env_number(
                TIMEOUT_ENV,
                DEFAULT_TIMEOUT,
                least=0.001,
                meaning="seconds for a whole endpoint call, retries included",
            )
        )
        self.retries = (
            retries
            if retries is not None
            else env_number(
                RETRIES_ENV, DEFAULT_RETRIES, least=0, meaning="retries of a failed endpoint call"
            )
        )
        key = api_key or os.environ.get(KEY_ENV, "").strip() or _NO_KEY
        self._errors = openai
        # Retries are `encode`'s, within one deadline: the client makes one attempt each.
        self._client = openai.OpenAI(
            base_url=self.url, api_key=key, timeout=self.timeout, max_retries=0
        )
        self.notify: Callable[[str], None] = _to_stderr
        self.dims: int | None = None
        self.dims = int(self.encode(["probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One endpoint call for `texts` (the Embedder batches them), retried within one
        deadline (module docstring)."""
        batch = [str(text) for text in texts]
        where = f"the embedding endpoint {self.shown_url} (model {self.model!r})"
        started = time.monotonic()
        deadline = started + self.timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                text = self._call(batch, deadline)
            except _Retryable as failure:
                left = deadline - time.monotonic()
                wait = failure.wait if failure.wait is not None else _backoff(attempt)
                if attempt > self.retries or wait >= left or failure.late:
                    raise EmbeddingError(
                        self._gave_up(where, failure, attempt, time.monotonic() - started)
                    ) from None
                self.notify(
                    f"itlr: {where} {failure.what}; retry {attempt} of {self.retries} in "
                    f"{wait:.1f} s ({left:.1f} s left of {self.timeout:g} s, {TIMEOUT_ENV})"
                )
                time.sleep(wait)
                continue
            return parse_embeddings(text, len(batch), self.dims)

    def _call(self, batch: list[str], deadline: float) -> str:
        """One attempt, given the time left: the answer's body, read in chunks so that one
        trickling in past the deadline is cut there; _Retryable for what may pass."""
        import httpx  # the openai client's transport

        openai = self._errors
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Retryable("did not answer in time", late=True, timed_out=True)
        client = self._client.with_options(timeout=left, max_retries=0)
        try:
            with client.embeddings.with_streaming_response.create(
                model=self.model, input=batch, encoding_format="float"
            ) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise _Retryable("was still sending its answer", late=True, timed_out=True)
                return body.decode("utf-8", errors="replace")
        except openai.APITimeoutError:
            raise _Retryable("did not answer in time", timed_out=True) from None
        except openai.APIConnectionError as down:
            raise _Retryable(f"cannot be reached ({_cause(down)})", unreachable=True) from None
        except openai.APIStatusError as refused:
            status = int(refused.status_code)
            if status in (408, 409, 429) or status >= 500:
                raise _Retryable(
                    f"answered {status}", wait=_retry_after(refused), refused=refused
                ) from None
            raise EmbeddingError(self._refusal(refused, 0)) from None
        except httpx.TimeoutException:  # while reading the body: no byte within the time left
            raise _Retryable("did not answer in time", timed_out=True) from None
        except (httpx.HTTPError, OSError) as broken:  # a connection cut while reading the body
            raise _Retryable(f"broke off its answer ({type(broken).__name__})") from None

    def _gave_up(self, where: str, failure: _Retryable, attempts: int, spent: float) -> str:
        tries = f"{attempts} attempt{'s' if attempts > 1 else ''} in {spent:.1f} s"
        if failure.refused is not None:
            return self._refusal(failure.refused, attempts - 1)
        if failure.unreachable:
            return (
                f"cannot reach {where} ({failure.what.removeprefix('cannot be reached ')}, "
                f"{tries}): is it running? check --encoder-url"
            )
        if failure.timed_out:
            return (
                f"{where} did not answer within {self.timeout:g} s ({tries}; {TIMEOUT_ENV} is the "
                f"time for the whole call, retries included): raise {TIMEOUT_ENV}, or check the "
                "server"
            )
        return f"{where} {failure.what} ({tries}): check the server"

    def _refusal(self, refused: Any, retried: int) -> str:
        where = f"the embedding endpoint {self.shown_url} (model {self.model!r})"
        status = int(refused.status_code)
        after = f" after {retried} retries" if retried else ""
        hint = ""
        if status in (404, 405) and not urlsplit(self.url).path.rstrip("/").endswith("/v1"):
            hint = (
                f"; the URL has no /v1, under which OpenAI-compatible servers answer "
                f"(/v1/embeddings): try --encoder-url {self.shown_url}/v1"
            )
        return f"{where} answered {status}{after}: {_reason(refused)}{hint}"


class _Retryable(Exception):
    """One failed attempt that another may pass: what happened, in a few words."""

    def __init__(
        self,
        what: str,
        *,
        wait: float | None = None,
        late: bool = False,
        timed_out: bool = False,
        unreachable: bool = False,
        refused: Any = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.wait = wait  # the server's Retry-After, if it gave one
        self.late = late  # the deadline has passed: no attempt is left
        self.timed_out = timed_out
        self.unreachable = unreachable
        self.refused = refused


def _backoff(attempt: int) -> float:
    """Seconds before retry `attempt`: 0.5 s doubling, at most 8 s."""
    return float(min(8.0, 0.5 * 2 ** (attempt - 1)))


def _retry_after(refused: Any) -> float | None:
    """The seconds a refusal's Retry-After (or retry-after-ms) asks for, if it names them."""
    headers = getattr(getattr(refused, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def shown(url: str) -> str:
    """`url` without a user or password it may carry: errors and metrics are read by others."""
    return redact_url(url)


def _cause(error: BaseException) -> str:
    inner = error.__cause__ or error
    return type(inner).__name__


def _reason(error: Any) -> str:
    """The server's own words, shortened to one line."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            body = body.get("message", body)
    text = str(body if body is not None else getattr(error, "message", error))
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "")
