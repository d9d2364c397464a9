"""A cluster index = the engine's dialect (itlr.engines.dialect: every request body) + a client
(itlr.engines.connection: I/O, errors as one line), alike for OpenSearch and Elasticsearch. Here:
the engine hooks, index checks, counting, stored scripts and coverage; the writes (bulk
ingestion, resumption) in itlr.engines.cluster_writes and the searches in
itlr.engines.cluster_search (knn mode's certified rounds in itlr.engines.cluster_certified),
both mixed into `ClusterBackend`.

Each engine module subclasses `ClusterBackend` and fills in the small hooks where the clients
differ (how put_script is called, the client's NotFoundError) and names its dialect and its
`operations` (itlr.engines.operations: the requests ingestion, back-fill and the follower
compose, with the error context manager).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import replace
from functools import cached_property
from typing import Any, ClassVar

from itlr.engines.cluster_search import ClusterSearch
from itlr.engines.cluster_writes import ClusterWrites
from itlr.engines.coverage import CoverageCache, coverage_body, parse_coverage
from itlr.engines.dialect import Dialect
from itlr.engines.integrity import ScriptMismatch, check_stored
from itlr.engines.layout import IndexLayout, filter_fields, mapped_fields
from itlr.engines.operations import ClusterOperations
from itlr.engines.painless import StoredScript
from itlr.engines.remembered_stats import RememberedStats
from itlr.errors import IndexStateError
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.results import Coverage


class ClusterBackend(ClusterSearch, ClusterWrites):
    """A remote index on an OpenSearch-like cluster; subclasses supply the engine specifics."""

    engine: ClassVar[str]
    # The mapping type of the vector field, and the key holding its dimension count.
    vector_type: ClassVar[str]

    def __init__(
        self,
        client: Any,
        index_name: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
    ) -> None:
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
        self._scripts_ready = inline_script
        # The mapping's field paths, once check_index has read them.
        self.mapped: set[str] | None = None
        # Hybrid truths' statistics as last counted: a search may be built from them.
        self.remembered = RememberedStats()
        # An index itlr did not make (no `_meta.itlr`): documents keep their shape, and itlr's
        # fields are mapped before the first write. None until the mapping has been read.
        self.foreign: bool | None = None
        self.top_fields: frozenset[str] = frozenset()
        self._writes_ready = False
        # How many documents have a text but no vector, counted at most every few seconds.
        self.coverage_cache = CoverageCache()
        # The prompts the index records in _meta.itlr (None: it records none, not itlr's);
        # a new index is created with the ones set here (itlr.prompts).
        self.prompts: Prompts | None = None

    # -- engine hooks ----------------------------------------------------------------------

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Client exceptions become one actionable line."""
        return self.operations.errors(self.index_name)

    def _create_index(self, knn_engine: str | None) -> None:
        body = self.dialect.mapping(self.dims, self.model, knn_engine, self.prompts)
        self.operations.create_index(self.index_name, body["settings"], body["mappings"])

    def mapped_dims(self, vector: dict[str, Any]) -> Any:
        """The dimension count the mapping records, or None when it records none yet."""
        raise NotImplementedError

    def _check_vector(self, vector: dict[str, Any]) -> None:
        """Further engine-specific checks of the vector field's mapping."""

    def _not_found_error(self) -> type[Exception]:
        raise NotImplementedError

    def _put_script(self, script: StoredScript) -> None:
        raise NotImplementedError

    @cached_property
    def dialect(self) -> Dialect:
        """The engine's requests for this index (pure; no client), built on first use: the
        layout and the engine version do not change while the backend lives."""
        return self._make_dialect()

    def _make_dialect(self) -> Dialect:
        raise NotImplementedError

    @cached_property
    def operations(self) -> ClusterOperations:
        """The cluster requests that ingestion, back-fill and the follower compose."""
        return self._make_operations()

    def _make_operations(self) -> ClusterOperations:
        raise NotImplementedError

    def _msearch(self, lines: list[dict[str, Any]]) -> Any:
        """`_msearch` of header/body line pairs."""
        raise NotImplementedError

    # -- index ---------------------------------------------------------------------------

    def ensure_index(self, knn_engine: str | None = None) -> bool:
        """Create the index from mappings/<engine>.json if missing; True if created."""
        with self._errors():
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
            self.foreign, self._writes_ready = False, True
            return True

    def _mappings(self) -> dict[str, Any]:
        return self.operations.mapping(self.index_name)

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
        self._check_vector(vector)

    def _adopt_mapping(self, properties: dict[str, Any]) -> None:
        """Learn the mapped fields (filter warnings) and the tie-break sort key the index
        offers: itlr's `doc_id` where mapped, else what the engine can sort on."""
        self.mapped = mapped_fields(properties)
        if self.layout.tiebreak == "doc_id" and "doc_id" not in properties:
            tiebreak = type(self.dialect).fallback_tiebreak
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
        with self._errors():
            self.client.indices.refresh(index=self.index_name)
            return int(self.client.count(index=self.index_name)["count"])

    def refresh(self) -> None:
        self.remembered.written()  # what was written shows now: count again
        self.coverage_cache.forget()
        with self._errors():
            self.client.indices.refresh(index=self.index_name)

    # -- scripts -------------------------------------------------------------------------

    def install_scripts(self, repair: bool = True) -> list[str]:
        """Register the stored scripts (idempotent); returns the ids newly (re)installed. A
        stored script whose source is not the packaged file is overwritten when `repair`
        (what `itlr install` asks for), else refused with the command that repairs it."""
        not_found = self._not_found_error()
        installed = []
        with self._errors():
            for script in (self.dialect.score_script, self.dialect.exclude_script):
                try:
                    found = self.client.get_script(id=script.id)
                except not_found:
                    found = None
                if found is not None:
                    try:
                        check_stored(script, found, self.url)
                        continue
                    except ScriptMismatch:
                        if not repair:
                            raise
                self._put_script(script)
                installed.append(script.id)
        self._scripts_ready = True
        return installed

    # -- coverage ------------------------------------------------------------------------

    def coverage(self) -> Coverage:
        """How many documents have a text but no vector (no search can find them): one count,
        reused for a few seconds."""

        def count() -> Coverage:
            body = coverage_body(self.layout.vector_field, self.layout.text_field)
            with self._errors():
                response = self.client.search(index=self.index_name, body=body)
            return parse_coverage(self.index_name, dict(response))

        return self.coverage_cache.get(self.index_name, count)
