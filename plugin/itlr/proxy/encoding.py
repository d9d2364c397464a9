"""The proxy's term vectors: the process's embedder (or the one an index config names), the
term cache in front of it, and one encode at a time, since every request shares the model.

The cache's entries are scoped by the indexes a search resolved to for its caller
(`SearchTarget.indexes`): a term one index's users searched is not a cache hit (a faster answer)
for another index's users (itlr.term_cache)."""

from __future__ import annotations

import threading

import anyio.to_thread
import numpy as np

from itlr.embed import Embedder, get_embedder
from itlr.errors import EngineError, IndexStateError
from itlr.proxy import stages
from itlr.proxy.upstream import IndexVectors, SearchTarget
from itlr.term_cache import cache_for


class TermEncoding:
    def __init__(self, embedder: Embedder | None) -> None:
        self._embedder = embedder
        # One encode at a time: the model is shared by every request of the process.
        self._encode_lock = threading.Lock()

    def embedder_for(self, vectors: IndexVectors) -> Embedder:
        """The proxy's embedder, or the one an index config names for the index."""
        if vectors.encoder is not None:
            return get_embedder(vectors.model, vectors.encoder, vectors.encoder_url)
        if self._embedder is None:
            self._embedder = get_embedder(vectors.model)
        if self._embedder.name != vectors.model:
            raise EngineError(
                f"the index was embedded with {vectors.model!r} but the proxy runs "
                f"{self._embedder.name!r}: start it with the index's `model`"
            )
        return self._embedder

    def encode(self, vectors: IndexVectors, terms: list[str], scope: str) -> np.ndarray:
        with self._encode_lock:
            embedder = self.embedder_for(vectors)

        def encode(missing: list[str]) -> np.ndarray:
            with self._encode_lock:
                return embedder.encode(missing)

        # Cached terms (itlr.term_cache) wait for no one; only the encoder's calls take turns.
        with stages.span("encode (cache + model)"):
            return cache_for(embedder.cache_name).encode(terms, encode, embedder.dims, scope)

    def cached(self, vectors: IndexVectors, terms: list[str], scope: str) -> np.ndarray | None:
        """The vectors when every term is in the term cache, else None. Microseconds, so it
        runs on the event loop: a repeated query skips the hand-off to a worker thread."""
        embedder = self._embedder  # a plain read: the lock may be held by a running encode
        if embedder is None or embedder.name != vectors.model or vectors.encoder is not None:
            return None
        with stages.span("encode (cache + model)"):
            return cache_for(embedder.cache_name).cached(terms, scope)

    async def vectors(self, searched: SearchTarget, target: str, terms: list[str]) -> np.ndarray:
        model = searched.vectors.model
        # The prompted text is the cache's key too, so prompts never share a vector.
        terms = [searched.vectors.query_prompt + term for term in terms]
        scope = ",".join(searched.indexes) or target
        vectors = self.cached(searched.vectors, terms, scope)
        if vectors is None:
            encoded_before = stages.get("encode (cache + model)")
            with stages.span("thread hand-off"):
                vectors = await anyio.to_thread.run_sync(
                    self.encode, searched.vectors, terms, scope
                )
            # The span holds the encode (timed in the worker thread): keep the hand-off alone.
            stages.add("thread hand-off", encoded_before - stages.get("encode (cache + model)"))
        mapped = searched.vectors.dims
        if mapped and vectors.shape[1] != mapped:
            # The engine would refuse each kNN clause with a long error of its own.
            raise IndexStateError(
                f"index {target!r} field {searched.vectors.layout.vector_field!r} holds "
                f"{mapped}-dim vectors but model {model!r} makes {vectors.shape[1]}-dim ones: "
                "start the proxy with the matching --model (or the index config's `model`)"
            )
        return vectors
