"""The writes of a cluster index, a collaborator a ClusterBackend (itlr.engines.cluster) holds
as `writes`: bulk ingestion and deletion through its operations (itlr.engines.operations), an index itlr did not make prepared
and guarded before the first write, and what resumption reads back (ids, content hashes, stored
vectors)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from itlr.engines.bulk import bulk_actions
from itlr.engines.coverage import CoverageCache
from itlr.engines.dialect import Dialect
from itlr.engines.foreign import add_itlr_fields
from itlr.engines.layout import IndexLayout, own_fields
from itlr.engines.operations import ClusterOperations
from itlr.engines.remembered_stats import RememberedStats
from itlr.errors import ConfigurationError, EngineError, IndexStateError
from itlr.fingerprint import HASH_FIELD, PREVIOUS_HASH_FIELD
from itlr.hash_guard import PIPELINE_ID
from itlr.records import Document
from itlr.transform import ItlrFields


class WrittenIndex(Protocol):
    """What the writes read of the index they write: the backend's public state (whether
    itlr made the index is known once its mapping is read), and its mapping checks."""

    engine: str
    index_name: str
    model: str
    dims: int
    layout: IndexLayout
    foreign: bool | None
    remembered: RememberedStats
    coverage_cache: CoverageCache

    @property
    def dialect(self) -> Dialect: ...

    @property
    def operations(self) -> ClusterOperations: ...

    def check_index(self) -> None: ...

    def read_shape(self) -> None: ...


class ClusterWrites:
    """The writes of one cluster index, built with the index they write."""

    def __init__(self, index: WrittenIndex) -> None:
        self.index = index
        # Whether an index itlr did not make has been prepared for writes (prepare_writes).
        self.ready = False
        # The ingest pipelines a write runs (itlr's hash guard aside); None: not read yet.
        self._pipelines: tuple[str, ...] | None = None

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: the cluster orders concurrent writers itself."""
        return contextlib.nullcontext()

    def prepare_writes(self) -> None:
        """Before the first write into an index itlr did not make: map the vector, the text
        field (if missing) and itlr's own fields explicitly, or refuse in one line (a vector
        field of another type or dimension, `index.knn` off on OpenSearch, a field itlr writes
        mapped with another type) before anything is written."""
        self._pipelines = None  # read again for this run of writes
        if self.ready:
            return
        if self.index.foreign is None:
            self.index.read_shape()
        if self.index.foreign:
            text = {self.index.layout.text_field: {"type": "text"}}
            add_itlr_fields(self.index, self.index.dims, self.index.model, also=text)
            self.index.check_index()  # learn the mapping as it is now
        self.ready = True

    def check_replacements(
        self,
        fields: dict[str, dict[str, Any]],
        stored: Mapping[str, tuple[str | None, dict[str, Any]]],
    ) -> None:
        """Refuse, in one line, to replace a stored document of an index itlr did not make
        with one that lacks some of its fields: a replace writes the whole document, so they
        would be lost."""
        if not self.index.foreign:
            return
        for doc_id, new in fields.items():
            if doc_id not in stored:
                continue
            lost = sorted(set(stored[doc_id][1]) - set(new))
            if lost:
                names = ", ".join(repr(name) for name in lost[:5])
                more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
                raise IndexStateError(
                    f"document {doc_id!r} of index {self.index.index_name!r} has fields {names}{more} "
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
        if vectors.ndim != 2 or vectors.shape[1] != self.index.dims:
            raise IndexStateError(
                f"vectors have shape {vectors.shape}, index {self.index.index_name!r} wants "
                f"(n, {self.index.dims})"
            )
        self.prepare_writes()
        index, layout, model = self.index.index_name, self.index.layout, self.index.model
        shaped = bool(self.index.foreign)
        return self.bulk(
            bulk_actions(index, layout, ids, texts, vectors, fields, model, shaped=shaped)
        )

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id; returns how many existed."""
        actions = [
            {"_op_type": "delete", "_index": self.index.index_name, "_id": str(i)} for i in ids
        ]
        failures = self.bulk(actions)
        return len(actions) - len(failures)

    def compact(self) -> tuple[int, int]:
        """Refused: a cluster merges its own segments (the request that asks it is named)."""
        raise ConfigurationError(
            f"{self.index.engine} compacts its own segments: `compact` is for embedded indexes "
            "(on a cluster, POST /INDEX/_forcemerge?only_expunge_deletes=true)"
        )

    def bulk(self, actions: Iterable[dict[str, Any]], chunk_size: int = 500) -> dict[str, str]:
        """Send bulk actions (a generator streams them); returns the failed ids' reasons."""
        failures = self.index.operations.bulk(actions, self.index.index_name, chunk_size)
        # A count made while the actions went in may have missed some: count again after.
        self.index.remembered.written()
        self.index.coverage_cache.forget()
        return failures

    def existing_ids(self, ids: list[str]) -> set[str]:
        return set(self.index.operations.mget(self.index.index_name, ids, False))

    def fingerprints(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (content hash, fields)} of the stored ids; a document written without a hash
        (by an older itlr or another tool) has hash "" and is embedded again.

        Under itlr's hash guard (itlr.hash_guard) a document itlr wrote holds its hash as
        `itlr_hash_was`: it counts when the stored text still has that hash (the vector is
        the stored text's), so a re-run finds the document unchanged."""
        text = self.index.layout.text_field
        if self.index.foreign:
            # The document's own fields are the top of its _source (all but the vector).
            found = self.index.operations.mget(
                self.index.index_name, ids, excludes=[self.index.layout.vector_field]
            )
            return {
                i: (self._stored_hash(source), own_fields(source, self.index.layout))
                for i, source in found.items()
            }
        wanted = [HASH_FIELD, PREVIOUS_HASH_FIELD, text, self.index.layout.metadata_field]
        found = self.index.operations.mget(self.index.index_name, ids, wanted)
        return {
            i: (self._stored_hash(source), dict(source.get(self.index.layout.metadata_field) or {}))
            for i, source in found.items()
        }

    def _stored_hash(self, source: dict[str, Any]) -> str:
        own = source.get(HASH_FIELD)
        if own:
            return str(own)
        moved = source.get(PREVIOUS_HASH_FIELD)
        text = source.get(self.index.layout.text_field)
        if moved and isinstance(text, str) and ItlrFields(self.index.model).digest(text) == moved:
            return str(moved)
        return ""

    def written_fields(self, documents: Sequence[Document]) -> list[dict[str, Any]]:
        """Each document's fields as the index will hold them once written: the index's
        ingest pipelines (its default and final pipeline; itlr's hash guard, which only moves
        `itlr_hash`, aside) applied by the engine's own simulation, one request per pipeline
        for the batch. As given where there is no pipeline, or where the engine could not
        simulate it (a caller without the privilege to)."""
        given = [dict(d.fields) for d in documents]
        pipelines = self._ingest_pipelines()
        if not pipelines or not documents:
            return given
        text, metadata = self.index.layout.text_field, self.index.layout.metadata_field
        sources: list[dict[str, Any] | None] = [
            {**d.fields, text: d.text} if self.index.foreign else {text: d.text, metadata: d.fields}
            for d in documents
        ]
        ids = [d.id for d in documents]
        for pipeline in pipelines:
            try:
                sources = self.index.operations.simulate(
                    pipeline, self.index.index_name, ids, sources
                )
            except EngineError:
                return given
        return [
            fields
            if source is None
            else own_fields(source, self.index.layout)
            if self.index.foreign
            else dict(source.get(metadata) or {})
            for fields, source in zip(given, sources, strict=True)
        ]

    def _ingest_pipelines(self) -> tuple[str, ...]:
        """The pipelines a write into the index runs, read once per run of writes."""
        if self._pipelines is None:
            settings = self.index.operations.settings(self.index.index_name)
            named = (settings.get("default_pipeline"), settings.get("final_pipeline"))
            self._pipelines = tuple(
                # itlr's hash guard only moves `itlr_hash`, never a field of the document's
                # own, so a write's fields need no simulation of it.
                str(p)
                for p in named
                if p and p not in ("_none", PIPELINE_ID)
            )
        return self._pipelines

    def stored_documents(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (text, fields)} of the stored ids (an update or a patch merges into them): a
        foreign index's fields are the top of its _source, itlr's its metadata object."""
        found = self.index.operations.mget(
            self.index.index_name, ids, excludes=[self.index.layout.vector_field]
        )
        text = self.index.layout.text_field
        return {
            i: (
                str(source.get(text, "")),
                own_fields(source, self.index.layout)
                if self.index.foreign
                else dict(source.get(self.index.layout.metadata_field) or {}),
            )
            for i, source in found.items()
        }

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        """The stored vectors of these ids, in order (a fields-only update reuses them)."""
        field = self.index.layout.vector_field
        by_id = {
            i: s[field]
            for i, s in self.index.operations.mget(self.index.index_name, ids, [field]).items()
        }
        return np.asarray([by_id[i] for i in ids], dtype=np.float32)
