"""An on-disk cache of embeddings, so that re-running an evaluation does not re-encode anything.

Layout: $ITLR_HOME/cache/embeddings/<model slug>/<chunk>.npz, each chunk holding `keys` (the
sha256 of model name + text, hex) and `vectors` (float32 unit vectors). A run appends one chunk
per block of new texts; chunks are written to a temporary name and renamed, so two runs at once
or an interrupted run never leave a half-written chunk behind.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from itlr.paths import itlr_home, model_slug

CHUNK = 2048


class Encoder(Protocol):
    name: str
    dims: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def text_key(model: str, text: str) -> str:
    return hashlib.sha256(f"{model}\n{text}".encode()).hexdigest()


class EmbeddingCache:
    """Encodes texts through `encoder`, reusing every vector it has seen before for that model."""

    def __init__(self, encoder: Encoder, root: Path | None = None) -> None:
        self.encoder = encoder
        # int8 vectors are kept apart from the model's own (itlr.embed.Embedder.cache_name).
        self.model = getattr(encoder, "cache_name", encoder.name)
        self.root = (root or itlr_home() / "cache" / "embeddings") / model_slug(self.model)
        self._vectors: dict[str, np.ndarray] = {}
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if not self.root.is_dir():
            return
        for chunk in sorted(self.root.glob("*.npz")):
            try:
                with np.load(chunk) as data:
                    keys, vectors = data["keys"], data["vectors"]
            except (OSError, ValueError, KeyError):
                continue  # an unreadable chunk only costs a re-encode
            if vectors.ndim != 2 or vectors.shape[1] != self.encoder.dims:
                continue
            for key, vector in zip(keys.tolist(), vectors, strict=True):
                self._vectors[key] = vector

    def missing(self, texts: Sequence[str]) -> list[str]:
        """Distinct texts that would have to be encoded."""
        self._load()
        seen: dict[str, None] = {}
        for text in texts:
            if text_key(self.model, text) not in self._vectors:
                seen.setdefault(text)
        return list(seen)

    def encode(
        self, texts: Sequence[str], on_progress: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """(len(texts), dims) float32 unit vectors, in the order given."""
        todo = self.missing(texts)
        for start in range(0, len(todo), CHUNK):
            block = todo[start : start + CHUNK]
            vectors = np.asarray(self.encoder.encode(block), dtype=np.float32)
            keys = [text_key(self.model, t) for t in block]
            self._save(keys, vectors)
            self._vectors.update(zip(keys, vectors, strict=True))
            if on_progress:
                on_progress(len(block))
        if not texts:
            return np.zeros((0, self.encoder.dims), dtype=np.float32)
        return np.stack([self._vectors[text_key(self.model, t)] for t in texts])

    def _save(self, keys: list[str], vectors: np.ndarray) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24]
            tmp = self.root / f".{name}.{os.getpid()}.tmp.npz"
            np.savez(tmp, keys=np.array(keys), vectors=vectors)
            os.replace(tmp, self.root / f"{name}.npz")
        except OSError:
            pass  # a read-only home only costs speed on the next run
