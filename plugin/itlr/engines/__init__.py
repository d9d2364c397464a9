"""Engines that store vectors and run logical queries: embedded, OpenSearch, Elasticsearch.

`Backend` is the whole contract between an engine and its callers (the front door, ingestion,
the retriever, the evaluation): every engine implements every method. Where one only means
something on some engines, the others answer honestly (nothing to refresh, no coverage to count)
or refuse in one line; callers never ask whether a method exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Hit, SearchResult

if TYPE_CHECKING:
    from itlr.prompts import Prompts
    from itlr.records import Document
    from itlr.results import Coverage

# {id: (content hash, fields)} of stored documents; a hash of None or "" is embedded again.
StoredState = Mapping[str, tuple[str | None, dict[str, Any]]]


class Backend(Protocol):
    """What the front door (itlr.Index), ingestion, the retriever and the evaluation need from
    an engine."""

    @property
    def engine(self) -> str:
        """embedded, opensearch or elasticsearch."""
        ...

    @property
    def model(self) -> str:
        """The model whose vectors (and content hashes, itlr.fingerprint) the index holds."""
        ...

    @property
    def dims(self) -> int: ...

    @property
    def warnings(self) -> Sequence[str]:
        """What opening the index noticed (never about one search: those travel with its
        result)."""
        ...

    @property
    def foreign(self) -> bool | None:
        """Whether its documents keep a shape of their own (a cluster index itlr did not make:
        no `_meta.itlr`); None until its mapping has been read."""
        ...

    @property
    def top_fields(self) -> frozenset[str]:
        """The fields at the top of a foreign index's mapping."""
        ...

    @property
    def prompts(self) -> Prompts | None:
        """The prompts the index records (itlr.prompts); None when it records none."""
        ...

    # -- writes ----------------------------------------------------------------------------

    def writing(self) -> contextlib.AbstractContextManager[Any]:
        """Be the index's only writer for the block, where the engine has writers to exclude."""
        ...

    def prepare_writes(self) -> None:
        """Make the index ready for itlr's writes (a foreign one: its mapping), or refuse."""
        ...

    def check_replacements(self, fields: dict[str, dict[str, Any]], stored: StoredState) -> None:
        """Refuse a replace that would drop fields a stored document holds."""
        ...

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> dict[str, str] | None:
        """Store documents; a cluster returns {id: reason} for those it refused."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id; how many existed."""
        ...

    def existing_ids(self, ids: list[str]) -> set[str]: ...

    def fingerprints(self, ids: list[str]) -> StoredState:
        """{id: (content hash, fields)} of the stored ids."""
        ...

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        """The stored vectors of these ids, in order (a fields-only update reuses them)."""
        ...

    def stored_documents(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (text, fields)} of the stored ids (an update or a patch merges into them)."""
        ...

    def written_fields(self, documents: Sequence[Document]) -> list[dict[str, Any]]:
        """Each document's fields as the index will hold them once written (a cluster's
        ingest pipelines applied), to compare with what it holds."""
        ...

    def refresh(self) -> None:
        """Make what was written visible to the next search."""
        ...

    def compact(self) -> tuple[int, int]:
        """Drop the rows of replaced and deleted documents: (rows before, after)."""
        ...

    # -- reads -----------------------------------------------------------------------------

    def count(self) -> int: ...

    def coverage(self) -> Coverage | None:
        """How many documents have a text but no vector; None where every document has one."""
        ...

    def search(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> SearchResult:
        """Run a logical query whose terms (query.terms order) are embedded as term_vectors."""
        ...

    def search_vector(
        self,
        vector: np.ndarray,
        k: int,
        filter: dict[str, Any] | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        """Plain dense retrieval on one vector: the baseline."""
        ...


class ClusterIndex(Backend, Protocol):
    """An index on a cluster (engines.cluster.ClusterBackend): named and reachable."""

    index_name: str
    url: str


__all__ = ["Backend", "ClusterIndex", "StoredState"]
