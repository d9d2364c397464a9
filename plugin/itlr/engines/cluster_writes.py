"""The writes of a cluster index (ClusterBackend, itlr.engines.cluster): bulk ingestion and
deletion through its operations (itlr.engines.operations), an index itlr did not make prepared
and guarded before the first write, and what resumption reads back (ids, content hashes, stored
vectors)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from itlr.engines.bulk import bulk_actions, shaped_bulk_actions
from itlr.engines.coverage import CoverageCache
from itlr.engines.dialect import Dialect
from itlr.engines.foreign import add_itlr_fields
from itlr.engines.layout import IndexLayout, own_fields
from itlr.engines.operations import ClusterOperations
from itlr.engines.remembered_stats import RememberedStats
from itlr.errors import ConfigurationError, IndexStateError
from itlr.fingerprint import HASH_FIELD, content_hash


class ClusterWrites:
    """The write methods of ClusterBackend, which supplies everything declared here (named,
    not imported: the backend imports this module)."""

    engine: ClassVar[str]
    index_name: str
    model: str
    dims: int
    layout: IndexLayout
    foreign: bool | None
    remembered: RememberedStats
    coverage_cache: CoverageCache
    _writes_ready: bool
    check_index: Callable[[], None]
    _mappings: Callable[[], dict[str, Any]]
    _learn_shape: Callable[[dict[str, Any]], None]

    @property
    def dialect(self) -> Dialect:
        raise NotImplementedError  # ClusterBackend's

    @property
    def operations(self) -> ClusterOperations:
        raise NotImplementedError  # ClusterBackend's

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: the cluster orders concurrent writers itself."""
        return contextlib.nullcontext()

    def prepare_writes(self) -> None:
        """Before the first write into an index itlr did not make: map the vector, the text
        field (if missing) and itlr's own fields explicitly, or refuse in one line (a vector
        field of another type or dimension, `index.knn` off on OpenSearch, a field itlr writes
        mapped with another type) before anything is written."""
        if self._writes_ready:
            return
        if self.foreign is None:
            self._learn_shape(self._mappings())
        if self.foreign:
            text = {self.layout.text_field: {"type": "text"}}
            add_itlr_fields(self, self.dims, self.model, also=text)
            self.check_index()  # learn the mapping as it is now
        self._writes_ready = True

    def check_replacements(
        self,
        fields: dict[str, dict[str, Any]],
        stored: Mapping[str, tuple[str | None, dict[str, Any]]],
    ) -> None:
        """Refuse, in one line, to replace a stored document of an index itlr did not make
        with one that lacks some of its fields: a replace writes the whole document, so they
        would be lost."""
        if not self.foreign:
            return
        for doc_id, new in fields.items():
            if doc_id not in stored:
                continue
            lost = sorted(set(stored[doc_id][1]) - set(new))
            if lost:
                names = ", ".join(repr(name) for name in lost[:5])
                more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
                raise IndexStateError(
                    f"document {doc_id!r} of index {self.index_name!r} has fields {names}{more} "
                    "that the new copy lacks, and replacing it would drop them: give the whole "
                    "document (every field it holds); refused before writing it"
                )

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> dict[str, str]:
        """Bulk-index documents; returns {id: reason} for documents the engine refused."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dims:
            raise IndexStateError(
                f"vectors have shape {vectors.shape}, index {self.index_name!r} wants "
                f"(n, {self.dims})"
            )
        self.prepare_writes()
        hashes = [content_hash(t, self.model) for t in texts]
        if self.foreign:
            actions = shaped_bulk_actions(
                self.index_name, self.layout, ids, texts, vectors, fields, hashes
            )
        else:
            actions = bulk_actions(
                self.index_name, self.layout, ids, texts, vectors, fields, hashes
            )
        return self.bulk(actions)

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id; returns how many existed."""
        actions = [{"_op_type": "delete", "_index": self.index_name, "_id": str(i)} for i in ids]
        failures = self.bulk(actions)
        return len(actions) - len(failures)

    def compact(self) -> tuple[int, int]:
        """Refused: a cluster merges its own segments (the request that asks it is named)."""
        raise ConfigurationError(
            f"{self.engine} compacts its own segments: `compact` is for embedded indexes "
            "(on a cluster, POST /INDEX/_forcemerge?only_expunge_deletes=true)"
        )

    def bulk(self, actions: Iterable[dict[str, Any]], chunk_size: int = 500) -> dict[str, str]:
        """Send bulk actions (a generator streams them); returns the failed ids' reasons."""
        failures = self.operations.bulk(actions, self.index_name, chunk_size)
        # A count made while the actions went in may have missed some: count again after.
        self.remembered.written()
        self.coverage_cache.forget()
        return failures

    def existing_ids(self, ids: list[str]) -> set[str]:
        return set(self.operations.mget(self.index_name, ids, False))

    def fingerprints(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (content hash, fields)} of the stored ids; a document written without a hash
        (by an older itlr or another tool) has hash "" and is embedded again."""
        if self.foreign:
            # The document's own fields are the top of its _source (all but the vector).
            found = self.operations.mget(self.index_name, ids, excludes=[self.layout.vector_field])
            return {
                i: (str(source.get(HASH_FIELD, "")), own_fields(source, self.layout))
                for i, source in found.items()
            }
        found = self.operations.mget(self.index_name, ids, [HASH_FIELD, self.layout.metadata_field])
        return {
            i: (
                str(source.get(HASH_FIELD, "")),
                dict(source.get(self.layout.metadata_field) or {}),
            )
            for i, source in found.items()
        }

    def stored_documents(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (text, fields)} of the stored ids (an update or a patch merges into them): a
        foreign index's fields are the top of its _source, itlr's its metadata object."""
        found = self.operations.mget(self.index_name, ids, excludes=[self.layout.vector_field])
        text = self.layout.text_field
        return {
            i: (
                str(source.get(text, "")),
                own_fields(source, self.layout)
                if self.foreign
                else dict(source.get(self.layout.metadata_field) or {}),
            )
            for i, source in found.items()
        }

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        """The stored vectors of these ids, in order (a fields-only update reuses them)."""
        field = self.layout.vector_field
        by_id = {
            i: s[field] for i, s in self.operations.mget(self.index_name, ids, [field]).items()
        }
        return np.asarray([by_id[i] for i in ids], dtype=np.float32)
