"""A cluster index = the engine's dialect (itlr.engines.dialect: every request body) + a client
(itlr.engines.connection: I/O, errors as one line), alike for OpenSearch and Elasticsearch. Here:
index checks, counting, stored scripts and coverage; the backend holds two collaborators built
with it: `searches` (itlr.engines.cluster_search; knn mode's certified rounds in
itlr.engines.cluster_certified) and `writes` (itlr.engines.cluster_writes: bulk ingestion,
resumption).

What differs between the engines is passed in whole as `EngineSpecifics` (each engine module
has one): its dialect and its `operations` (itlr.engines.operations: the requests ingestion,
back-fill and the follower compose, with the error context manager), the vector field's mapping,
and the client call whose shape differs (`_msearch`). The stored scripts are checked through
the cluster client layer (itlr.engines.cluster_client), alike for both.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from itlr.engines.cluster_client import ClientTransport, run
from itlr.engines.cluster_reads import (
    DOC_ID,
    check_scripts,
    count_coverage,
    tiebreak_for,
    vector_dims,
)
from itlr.engines.cluster_search import ClusterSearch
from itlr.engines.cluster_writes import ClusterWrites
from itlr.engines.coverage import CoverageCache
from itlr.engines.dialect import Dialect
from itlr.engines.integrity import (
    SCRIPT_CHECK_SECONDS,
    PipelineMismatch,
)
from itlr.engines.layout import IndexLayout, filter_fields, mapped_fields
from itlr.engines.operations import ClusterOperations
from itlr.engines.remembered_stats import RememberedStats
from itlr.errors import EngineError, IndexStateError
from itlr.hash_guard import verify_hash_guard
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.query import Query
from itlr.records import Document
from itlr.renamed import renamed
from itlr.results import Coverage, Hit, SearchResult


class EngineSpecifics(Protocol):
    """What differs between the cluster engines, given to a ClusterBackend whole (each engine
    module has one): its requests' bodies (the dialect), the call shapes of the requests it
    shares with the other (operations), its vector field's mapping, and the few client calls
    the backend makes itself."""

    # The engine's name, and the mapping type of its vector field.
    name: str
    vector_type: str

    def dialect(self, layout: IndexLayout, inline_script: bool) -> Dialect: ...

    def operations(self, client: Any, url: str) -> ClusterOperations: ...

    def vector_warning(self, vector: dict[str, Any], field: str, index: str) -> str | None:
        """Why the vector field's mapping limits the searches, or None."""

    def msearch(self, client: Any, lines: list[dict[str, Any]]) -> Any:
        """`_msearch` of header/body line pairs."""


class ClusterBackend:
    """A remote index on an OpenSearch-like cluster; `specifics` are its engine's."""

    def __init__(
        self,
        client: Any,
        index_name: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
        *,
        specifics: EngineSpecifics,
    ) -> None:
        self.specifics = specifics
        self.engine = specifics.name
        self.vector_type = specifics.vector_type
        self.client = client
        self.index_name = index_name
        self.model = model
        self.dims = dims
        self.layout = layout or IndexLayout()
        self.inline_script = inline_script
        self.url = url or "the cluster"
        # What opening the index noticed (about the index, never about one search: those travel
        # with their hits), each once, so the list is as long as the index has problems.
        self.warnings: list[str] = []
        # When the stored scripts (and itlr's pipeline, when the index uses it) were last found
        # to be itlr's (time.monotonic()); compared again every `script_check_seconds` and after
        # any failed search, so a script replaced on the cluster is refused within that time.
        self._scripts_checked_at = math.inf if inline_script else -math.inf
        self.script_check_seconds = SCRIPT_CHECK_SECONDS
        # The mapping's field paths, once check_index has read them.
        self.mapped: set[str] | None = None
        # Hybrid truths' statistics as last counted: a search may be built from them.
        self.remembered = RememberedStats()
        # An index itlr did not make (no `_meta.itlr`): documents keep their shape, and itlr's
        # fields are mapped before the first write. None until the mapping has been read.
        self.foreign: bool | None = None
        self.top_fields: frozenset[str] = frozenset()
        # How many documents have a text but no vector, counted at most every few seconds.
        self.coverage_cache = CoverageCache()
        # The prompts the index records in _meta.itlr (None: it records none, not itlr's);
        # a new index is created with the ones set here (itlr.prompts).
        self.prompts: Prompts | None = None

        self.searches = ClusterSearch(self)
        self.writes = ClusterWrites(self)

    def errors(self) -> contextlib.AbstractContextManager[None]:
        """Client exceptions become one actionable line."""
        return self.operations.errors(self.index_name)

    def _create_index(self, knn_engine: str | None) -> None:
        body = self.dialect.mapping(self.dims, self.model, knn_engine, self.prompts)
        self.operations.create_index(self.index_name, body["settings"], body["mappings"])

    def mapped_dims(self, vector: dict[str, Any]) -> int | None:
        """The dimension count the mapping records, or None when it records none yet."""
        return vector_dims(vector)

    @cached_property
    def dialect(self) -> Dialect:
        """The engine's requests for this index (pure; no client), built on first use: the
        layout and the engine version do not change while the backend lives."""
        return self.specifics.dialect(self.layout, self.inline_script)

    @cached_property
    def transport(self) -> ClientTransport:
        """The sync face of the cluster client layer over this backend's client."""
        return ClientTransport(self.client)

    @cached_property
    def operations(self) -> ClusterOperations:
        """The cluster requests that ingestion, back-fill and the follower compose."""
        return self.specifics.operations(self.client, self.url)

    # -- index ---------------------------------------------------------------------------

    def ensure_index(self, knn_engine: str | None = None) -> bool:
        """Create the index from mappings/<engine>.json if missing; True if created."""
        with self.errors():
            if self.client.indices.exists(index=self.index_name):
                mappings = self._mappings()
                self._learn_shape(mappings)
                if self.foreign and self.layout.vector_field not in self.top_fields:
                    # Made elsewhere, no vector yet: mapped before the first write.
                    self._adopt_mapping(mappings.get("properties", {}))
                    return False
                self.check_index()
                return False
            self._create_index(knn_engine)
            self.foreign, self.writes.ready = False, True
            return True

    def _mappings(self) -> dict[str, Any]:
        return self.operations.mapping(self.index_name)

    def read_shape(self) -> None:
        """Learn whether itlr made the index, and its top fields, from its mapping."""
        self._learn_shape(self._mappings())

    def _learn_shape(self, mappings: dict[str, Any]) -> None:
        self.foreign = "itlr" not in (mappings.get("_meta") or {})
        self.top_fields = frozenset(mappings.get("properties", {}))

    def check_index(self) -> None:
        """Refuse an index whose vectors cannot match the model; warn about another model."""
        mappings = self._mappings()
        self._learn_shape(mappings)
        vector = mappings.get("properties", {}).get(self.layout.vector_field)
        if vector is None or vector.get("type") != self.vector_type:
            raise IndexStateError(
                f"index {self.index_name!r} has no {self.vector_type} field "
                f"{self.layout.vector_field!r}: name the right one with `vector_field`"
            )
        dims = self.mapped_dims(vector)
        if dims is not None and int(dims) != self.dims:
            raise IndexStateError(
                f"index {self.index_name!r} field {self.layout.vector_field!r} holds {dims}-dim "
                f"vectors but model {self.model!r} makes {self.dims}-dim ones: choose the matching "
                "`model`"
            )
        self._adopt_mapping(mappings.get("properties", {}))
        meta = mappings.get("_meta", {}).get("itlr")
        self.prompts = Prompts.from_meta(meta) if isinstance(meta, dict) else None
        meta_model = mappings.get("_meta", {}).get("itlr", {}).get("model")
        if meta_model and meta_model != self.model:
            self._warn(
                f"index {self.index_name!r} records model {meta_model!r} in _meta, but searching "
                f"with {self.model!r}: scores will be meaningless unless they share a vector space"
            )
        warning = self.specifics.vector_warning(vector, self.layout.vector_field, self.index_name)
        if warning is not None:
            self._warn(warning)

    def _adopt_mapping(self, properties: dict[str, Any]) -> None:
        """Learn the mapped fields (filter warnings) and the tie-break sort key the index
        offers: itlr's `doc_id` where mapped, else what the engine can sort on."""
        self.mapped = mapped_fields(properties)
        tiebreak = tiebreak_for(properties, type(self.dialect).fallback_tiebreak)
        if self.layout.tiebreak == DOC_ID and tiebreak != DOC_ID:
            self.layout = replace(self.layout, tiebreak=tiebreak)
            # The cached dialect was built for the layout before the mapping was read.
            vars(self).pop("dialect", None)

    def filter_warnings(self, options: SearchOptions) -> list[str]:
        """A filter on a field the mapping lacks matches nothing: say so."""
        if not options.filter or self.mapped is None:
            return []
        return [
            f"the filter names field {name!r}, which index {self.index_name!r} does not map: "
            "it matches no document"
            for name in sorted(filter_fields(options.filter) - self.mapped)
        ]

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            warnings.warn(message, stacklevel=3)

    def count(self) -> int:
        with self.errors():
            self.client.indices.refresh(index=self.index_name)
            return int(self.client.count(index=self.index_name)["count"])

    def refresh(self) -> None:
        self.remembered.written()  # what was written shows now: count again
        self.coverage_cache.forget()
        with self.errors():
            self.client.indices.refresh(index=self.index_name)

    # -- scripts -------------------------------------------------------------------------

    def install_scripts(self, repair: bool = True) -> list[str]:
        """Register the stored scripts (idempotent); returns the ids newly (re)installed. A
        stored script whose source is not the packaged file is overwritten when `repair`
        (what `itlr install` asks for), else refused with the command that repairs it."""
        with self.errors():
            check = run(check_scripts(self.dialect, self.url, repair=repair), self.transport)
        if check.foreign is not None:
            raise check.foreign
        self._scripts_checked_at = time.monotonic()
        return check.stored

    def verify_integrity(self) -> None:
        """Before a search, when the last check is `script_check_seconds` old (or a search
        failed since): the stored scripts are itlr's (ScriptMismatch naming `itlr install`
        otherwise; a missing one is stored again), and so is the hash-guard pipeline when the
        index uses it (a deleted one is stored again; a foreign one is a warning: it changes
        no score, but `itlr backfill --follow` would miss rewritten texts)."""
        if time.monotonic() - self._scripts_checked_at < self.script_check_seconds:
            return
        self.install_scripts(repair=False)
        try:
            verify_hash_guard(self)
        except PipelineMismatch as foreign:
            self._warn(str(foreign))
        except EngineError:
            pass  # a user who may not read settings or pipelines: the scripts were checked

    def integrity_unsure(self) -> None:
        """A search failed: compare the scripts (and the pipeline) again before the next."""
        if not self.inline_script:
            self._scripts_checked_at = -math.inf

    # -- coverage ------------------------------------------------------------------------

    def coverage(self) -> Coverage:
        """How many documents have a text but no vector (no search can find them), how many
        wait to be embedded again, and what a follower recorded: one count and one mapping
        read, reused for a few seconds."""

        def count() -> Coverage:
            layout = self.layout
            with self.errors():
                operation = count_coverage(self.index_name, layout.vector_field, layout.text_field)
                return run(operation, self.transport)

        return self.coverage_cache.get(self.index_name, count)

    # -- searches and writes: the collaborators' -----------------------------------------

    def search(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> SearchResult:
        return self.searches.search(query, term_vectors, options)

    def build_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
        statistics: CorpusStats | None = None,
    ) -> dict[str, Any]:
        return self.searches.build_request(query, term_vectors, options, statistics)

    def term_statistics(self, query: Query) -> CorpusStats:
        return self.searches.term_statistics(query)

    lexical_stats = renamed("term_statistics", "ClusterBackend.lexical_stats")

    def search_vector(
        self,
        vector: np.ndarray,
        k: int,
        filter: dict[str, Any] | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        return self.searches.search_vector(vector, k, filter, candidates)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return self.writes.writing()

    def prepare_writes(self) -> None:
        self.writes.prepare_writes()

    def check_replacements(
        self,
        fields: dict[str, dict[str, Any]],
        stored: Mapping[str, tuple[str | None, dict[str, Any]]],
    ) -> None:
        self.writes.check_replacements(fields, stored)

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> dict[str, str]:
        return self.writes.add(ids, texts, vectors, fields)

    def delete(self, ids: Sequence[str]) -> int:
        return self.writes.delete(ids)

    def compact(self) -> tuple[int, int]:
        return self.writes.compact()

    def bulk(self, actions: Iterable[dict[str, Any]], chunk_size: int = 500) -> dict[str, str]:
        return self.writes.bulk(actions, chunk_size)

    def existing_ids(self, ids: list[str]) -> set[str]:
        return self.writes.existing_ids(ids)

    def fingerprints(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        return self.writes.fingerprints(ids)

    def written_fields(self, documents: Sequence[Document]) -> list[dict[str, Any]]:
        return self.writes.written_fields(documents)

    def stored_documents(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        return self.writes.stored_documents(ids)

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        return self.writes.stored_vectors(ids)
