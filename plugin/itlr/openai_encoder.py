"""The openai encoder: vectors from an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Azure,
vLLM, Ollama, Infinity, text-embeddings-inference), through the `openai` package.

A deployment whose vectors came from an embedding service must embed query terms with the same
service. The `openai` client does the HTTP: its time-out, and its bounded retries with
exponential back-off on connection errors, 408, 409, 429 and 5xx (honouring Retry-After). What
comes back is checked before anything uses it: valid JSON, one finite, non-zero vector per
input, every one of the same dimension. A bad answer raises EmbeddingError in one line, so
ingestion writes nothing of that batch and a search fails instead of scoring with garbage.
The vectors are scaled to unit length, as the local encoders' are.

`openai` is imported here only, on first use: `import itlr` never loads it.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

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
                TIMEOUT_ENV, DEFAULT_TIMEOUT, least=0.001, meaning="seconds per endpoint call"
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
        self._client = openai.OpenAI(
            base_url=self.url, api_key=key, timeout=self.timeout, max_retries=self.retries
        )
        self.dims: int | None = None
        self.dims = int(self.encode(["probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One endpoint call for `texts` (the Embedder batches them)."""
        batch = [str(text) for text in texts]
        openai = self._errors
        where = f"the embedding endpoint {self.shown_url} (model {self.model!r})"
        try:
            raw = self._client.embeddings.with_raw_response.create(
                model=self.model, input=batch, encoding_format="float"
            )
            text = raw.http_response.text
        except openai.APITimeoutError:
            raise EmbeddingError(
                f"{where} did not answer within {self.timeout:g} s ({self.retries} retries): "
                f"raise {TIMEOUT_ENV}, or check the server"
            ) from None
        except openai.APIConnectionError as down:
            raise EmbeddingError(
                f"cannot reach {where} ({_cause(down)}, {self.retries} retries): is it "
                "running? check --encoder-url"
            ) from None
        except openai.APIStatusError as refused:
            raise EmbeddingError(
                f"{where} answered {refused.status_code}{_after_retries(refused, self.retries)}: "
                f"{_reason(refused)}"
            ) from None
        return parse_embeddings(text, len(batch), self.dims)


def shown(url: str) -> str:
    """`url` without a user or password it may carry: errors and metrics are read by others."""
    return redact_url(url)


def _cause(error: BaseException) -> str:
    inner = error.__cause__ or error
    return type(inner).__name__


def _after_retries(error: Any, retries: int) -> str:
    status = int(getattr(error, "status_code", 0))
    retried = status in (408, 409, 429) or status >= 500
    return f" after {retries} retries" if retried and retries else ""


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
