"""Engines that store vectors and run logical queries: embedded, OpenSearch, Elasticsearch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from itlr.options import Hit, SearchOptions
from itlr.query import Query


class Backend(Protocol):
    """What the retriever, the ingestion pipeline and the evaluation need from an engine."""

    model: str
    dims: int

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> dict[str, str] | None:
        """Store documents; a cluster returns {id: reason} for those it refused."""
        ...

    def existing_ids(self, ids: list[str]) -> set[str]: ...

    def count(self) -> int: ...

    def search(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> list[Hit]: ...

    def search_vector(
        self, vector: np.ndarray, k: int, filter: dict | None = None, candidates: int | None = None
    ) -> list[Hit]: ...


class ClusterIndex(Backend, Protocol):
    """An index on a cluster (engines.cluster.ClusterBackend): named, reachable, refreshable."""

    engine: str
    index: str
    url: str

    def refresh(self) -> None: ...
