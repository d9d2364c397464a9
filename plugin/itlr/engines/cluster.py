"""A cluster index = the engine's dialect (itlr.engines.dialect: every request body) + a client
(itlr.engines.connection: I/O, errors as one line): index checks, counting, stored scripts, bulk ingestion, resumption
and search, alike for OpenSearch and Elasticsearch.

Each engine module subclasses `ClusterBackend` and fills in the small hooks where the clients
differ (which `helpers` module, how put_script / mget are called, the client's NotFoundError,
the error context manager) and names its dialect.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from functools import cached_property
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from itlr.engines.dialect import Dialect, IndexLayout, StoredScript, bulk_actions
from itlr.errors import IndexStateError
from itlr.options import Hit, Hits, SearchOptions
from itlr.query import Query


class ClusterBackend:
    """A remote index on an OpenSearch-like cluster; subclasses supply the engine specifics."""

    engine: ClassVar[str]
    # The mapping type of the vector field, and the key holding its dimension count.
    vector_type: ClassVar[str]

    def __init__(
        self,
        client: Any,
        index: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
    ) -> None:
        self.client = client
        self.index = index
        self.model = model
        self.dims = dims
        self.layout = layout or IndexLayout()
        self.inline_script = inline_script
        self.url = url or "the cluster"
        # What opening the index noticed (about the index, never about one search: those travel
        # with their hits), each once, so the list is as long as the index has problems.
        self.warnings: list[str] = []
        self._scripts_ready = inline_script

    # -- engine hooks ----------------------------------------------------------------------

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Client exceptions become one actionable line."""
        raise NotImplementedError

    def _create_index(self, knn_engine: str | None) -> None:
        raise NotImplementedError

    def _mapped_dims(self, vector: dict[str, Any]) -> Any:
        """The dimension count the mapping records, or None when it records none yet."""
        raise NotImplementedError

    def _check_vector(self, vector: dict[str, Any]) -> None:
        """Further engine-specific checks of the vector field's mapping."""

    def _not_found_error(self) -> type[Exception]:
        raise NotImplementedError

    def _put_script(self, script: StoredScript) -> None:
        raise NotImplementedError

    def _bulk_helpers(self) -> ModuleType:
        raise NotImplementedError

    def _mget(self, ids: list[str]) -> Any:
        raise NotImplementedError

    # -- index ---------------------------------------------------------------------------

    def ensure_index(self, knn_engine: str | None = None) -> bool:
        """Create the index from mappings/<engine>.json if missing; True if created."""
        with self._errors():
            if self.client.indices.exists(index=self.index):
                self.check_index()
                return False
            self._create_index(knn_engine)
            return True

    def check_index(self) -> None:
        """Refuse an index whose vectors cannot match the model; warn about another model."""
        with self._errors():
            mapping = self.client.indices.get_mapping(index=self.index)
        (index_mapping,) = dict(mapping).values()
        mappings = index_mapping["mappings"]
        vector = mappings.get("properties", {}).get(self.layout.vector_field)
        if vector is None or vector.get("type") != self.vector_type:
            raise IndexStateError(
                f"index {self.index!r} has no {self.vector_type} field "
                f"{self.layout.vector_field!r}: name the right one with `vector_field`"
            )
        dims = self._mapped_dims(vector)
        if dims is not None and int(dims) != self.dims:
            raise IndexStateError(
                f"index {self.index!r} field {self.layout.vector_field!r} holds {dims}-dim vectors "
                f"but model {self.model!r} makes {self.dims}-dim ones: choose the matching `model`"
            )
        meta_model = mappings.get("_meta", {}).get("itlr", {}).get("model")
        if meta_model and meta_model != self.model:
            self._warn(
                f"index {self.index!r} records model {meta_model!r} in _meta, but searching with "
                f"{self.model!r}: scores will be meaningless unless they share a vector space"
            )
        self._check_vector(vector)

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, stacklevel=3)

    def count(self) -> int:
        with self._errors():
            self.client.indices.refresh(index=self.index)
            return int(self.client.count(index=self.index)["count"])

    def refresh(self) -> None:
        with self._errors():
            self.client.indices.refresh(index=self.index)

    # -- scripts -------------------------------------------------------------------------

    def install_scripts(self) -> list[str]:
        """Register the stored scripts (idempotent); returns the ids newly installed."""
        not_found = self._not_found_error()
        installed = []
        with self._errors():
            for script in (self.dialect.score_script, self.dialect.exclude_script):
                try:
                    self.client.get_script(id=script.id)
                except not_found:
                    self._put_script(script)
                    installed.append(script.id)
        self._scripts_ready = True
        return installed

    # -- writes --------------------------------------------------------------------------

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> dict[str, str]:
        """Bulk-index documents; returns {id: reason} for documents the engine refused."""
        helpers = self._bulk_helpers()
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dims:
            raise IndexStateError(
                f"vectors have shape {vectors.shape}, index {self.index!r} wants (n, {self.dims})"
            )
        actions = bulk_actions(self.index, self.layout, ids, texts, vectors, fields)
        failures: dict[str, str] = {}
        with self._errors():
            # streaming_bulk retries 429s with exponential backoff; the client retries 5xx.
            for ok, item in helpers.streaming_bulk(
                self.client,
                actions,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=5,
                initial_backoff=1,
                max_backoff=30,
            ):
                if not ok:
                    (result,) = item.values()
                    error = result.get("error", {})
                    reason = error.get("reason", str(error)) if isinstance(error, dict) else error
                    failures[str(result.get("_id"))] = str(reason)
        return failures

    def existing_ids(self, ids: list[str]) -> set[str]:
        if not ids:
            return set()
        with self._errors():
            found = self._mget(ids)
        return {d["_id"] for d in found["docs"] if d.get("found")}

    # -- search --------------------------------------------------------------------------

    @cached_property
    def dialect(self) -> Dialect:
        """The engine's requests for this index (pure; no client), built on first use: the
        layout and the engine version do not change while the backend lives."""
        return self._make_dialect()

    def _make_dialect(self) -> Dialect:
        raise NotImplementedError

    def build_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
    ) -> dict[str, Any]:
        """The search body: script_score over kNN candidates (or every document)."""
        return self.dialect.search_body(query, term_vectors, options)

    def search(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
    ) -> Hits:
        """The ranked hits, carrying this search's warnings (a capped candidate budget)."""
        body, notes = self.dialect.search_request(query, term_vectors, options)
        if not self._scripts_ready:
            self.install_scripts()
        return Hits(self._hits(body, query, term_vectors, options), notes)

    def _hits(
        self,
        body: dict[str, Any],
        query: Query | None,
        term_vectors: np.ndarray | None,
        options: SearchOptions | None,
    ) -> list[Hit]:
        """Run a search body; hits with truths when the query is given and vectors come back."""
        with self._errors():
            # A ranking from the shards that happened to answer (a node dying mid-search) looks
            # like any other: refuse it, so the client's retry asks the re-routed cluster.
            response = self.client.search(
                index=self.index, body=body, allow_partial_search_results=False
            )
        return self.dialect.hits(dict(response), query, term_vectors, options)

    def search_vector(
        self, vector: np.ndarray, k: int, filter: dict | None = None, candidates: int | None = None
    ) -> list[Hit]:
        """Plain kNN on one vector: the dense baseline. `candidates`: neighbours the graph search
        gathers before the top k are kept (default k)."""
        return self._hits(self.dialect.dense_body(vector, k, filter, candidates), None, None, None)
