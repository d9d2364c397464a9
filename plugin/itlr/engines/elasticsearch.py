"""Elasticsearch backend (8.x, 9.x): kNN candidates as the query's candidate plan gathers them
(itlr.candidates), one stored Painless script composing the terms' similarities, optional hard
filter, bulk ingestion.

Everything that is not engine-specific is shared with OpenSearch: the request builder
(itlr.engines.dialect) and what it builds from beside it (script params, mapping layout, bulk
actions, hits); index checks, scripts, ingestion and the script_score request through
itlr.engines.cluster. What differs is the request shape (`knn` query with `query_vector` /
`num_candidates`), the Painless source (no cosineSimilarity class bindings) and the client.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from itlr.candidates import CandidateSearch
from itlr.engines.cluster import ClusterBackend
from itlr.engines.cluster_client import run
from itlr.engines.cluster_reads import server_version
from itlr.engines.connection import elasticsearch_errors
from itlr.engines.dialect import Dialect
from itlr.engines.layout import IndexLayout, derive_mapping
from itlr.engines.operations import ClusterOperations
from itlr.engines.painless import StoredScript
from itlr.errors import EngineError
from itlr.prompts import Prompts

SCORE_SCRIPT = StoredScript.load("score-es", "itlr_score.painless", "elasticsearch")
EXCLUDE_SCRIPT = StoredScript.load("exclude-es", "itlr_exclude.painless", "elasticsearch")

# num_candidates may not exceed this (a hard limit of the knn query).
MAX_NUM_CANDIDATES = 10_000


@dataclass(frozen=True)
class Capabilities:
    """What a given Elasticsearch version can run. `None` version: assume the newest."""

    version: str | None = None

    @property
    def numbers(self) -> tuple[int, int]:
        if not self.version:
            return (99, 0)
        match = re.match(r"(\d+)\.(\d+)", self.version)
        return (int(match.group(1)), int(match.group(2))) if match else (99, 0)

    @property
    def knn_query(self) -> bool:
        """The `knn` query (usable inside bool / script_score) arrived in 8.12."""
        return self.numbers >= (8, 12)

    @property
    def knn_query_k(self) -> bool:
        """The knn query's own `k` arrived in 8.15; later releases default it to `size`."""
        return self.numbers >= (8, 15)

    @property
    def knn_section(self) -> bool:
        """The top-level `knn` search section (8.4+): enough for plain dense retrieval."""
        return self.numbers >= (8, 4)

    @property
    def vectors_left_out_of_source(self) -> bool:
        """From 9.2 new indices keep vectors out of _source unless asked not to."""
        return self.numbers >= (9, 2)

    def refuse_knn_mode(self) -> None:
        if not self.knn_query:
            raise EngineError(
                f"Elasticsearch {self.version} has no knn query (it arrived in 8.12), so "
                '`mode="knn"` cannot gather candidates for rescoring: use `mode="exact"`, '
                "or upgrade"
            )


def version_refusal(version: str) -> str | None:
    """One line explaining why itlr cannot use this Elasticsearch at all, or None."""
    if Capabilities(version).numbers < (8, 0):
        return (
            f"Elasticsearch {version} is too old for itlr: it needs 8.0+ for indexed "
            'dense_vector fields (8.12+ for `mode="knn"`)'
        )
    return None


# -- backend ---------------------------------------------------------------------------------


class ElasticsearchOperations(ClusterOperations):
    """elasticsearch-py's call shapes: request bodies as keyword arguments."""

    def errors(self, index: str) -> contextlib.AbstractContextManager[None]:
        return elasticsearch_errors(self.url, index)

    def _helpers(self) -> ModuleType:
        from elasticsearch import helpers

        return helpers

    def _create(self, index: str, settings: dict[str, Any], mappings: dict[str, Any]) -> None:
        self.client.indices.create(index=index, settings=settings, mappings=mappings)

    def _mget(self, index: str, ids: list[str], source: list[str] | bool) -> Any:
        return self.client.mget(index=index, ids=ids, source=source)

    def _mget_excluding(self, index: str, ids: list[str], excludes: list[str]) -> Any:
        return self.client.mget(index=index, ids=ids, source_excludes=excludes)

    def _mget_docs(self, index: str, docs: list[dict[str, Any]], source: list[str] | bool) -> Any:
        return self.client.mget(index=index, docs=docs, source=source)

    def _count(self, index: str, query: dict[str, Any]) -> Any:
        return self.client.count(index=index, query=query)

    def _put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, properties=properties)

    def _put_settings(self, index: str, settings: dict[str, Any]) -> None:
        self.client.indices.put_settings(index=index, settings=settings)

    def _put_meta(self, index: str, meta: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, meta=meta)

    def _put_pipeline(self, pipeline_id: str, body: dict[str, Any]) -> None:
        self.client.ingest.put_pipeline(id=pipeline_id, **body)

    def _update_aliases(self, actions: list[dict[str, Any]]) -> None:
        self.client.indices.update_aliases(actions=actions)

    def _simulate(self, pipeline_id: str, docs: list[dict[str, Any]]) -> Any:
        return self.client.ingest.simulate(id=pipeline_id, docs=docs)


class ElasticsearchSpecifics:
    """Elasticsearch's part of a cluster backend (itlr.engines.cluster.EngineSpecifics): its
    requests are shaped for the server's version, which `capabilities` reads when first
    needed."""

    name = "elasticsearch"
    vector_type = "dense_vector"

    def __init__(self, capabilities: Callable[[], Capabilities]) -> None:
        self.capabilities = capabilities

    def dialect(self, layout: IndexLayout, inline_script: bool) -> ElasticsearchDialect:
        return ElasticsearchDialect(layout, inline_script, self.capabilities())

    def operations(self, client: Any, url: str) -> ElasticsearchOperations:
        return ElasticsearchOperations(client, url)

    def vector_warning(self, vector: dict[str, Any], field: str, index: str) -> str | None:
        if vector.get("index") is not False:
            return None
        return (
            f"field {field!r} of index {index!r} is not indexed for kNN (index: false): only "
            '`mode="exact"` can search it'
        )

    def msearch(self, client: Any, lines: list[dict[str, Any]]) -> Any:
        return client.msearch(searches=lines)


class ElasticsearchBackend(ClusterBackend):
    """A cluster backend with Elasticsearch's specifics, for one server version."""

    def __init__(
        self,
        client: Any,
        index_name: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
        version: str | None = None,
    ) -> None:
        """`version` shapes the requests (knn query, its `k`); None asks the server when it is
        first needed, or assumes the newest Elasticsearch when there is no client (translate)."""
        self._version = version
        self._version_unknown = False
        specifics = ElasticsearchSpecifics(lambda: self.capabilities)
        super().__init__(
            client, index_name, model, dims, layout, inline_script, url, specifics=specifics
        )

    @property
    def capabilities(self) -> Capabilities:
        if self._version is None and self.client is not None and not self._version_unknown:
            with self.errors():
                self._version = run(server_version(), self.transport)
            if self._version is None:
                self._version_unknown = True
                self._warn(
                    f"cannot read the version of {self.url} as this user (GET / and the node "
                    "info need the cluster privilege `monitor`): requests are shaped for the "
                    "newest Elasticsearch"
                )
            problem = version_refusal(self._version) if self._version else None
            if problem:
                raise EngineError(problem)
        return Capabilities(self._version)


# -- dialect -------------------------------------------------------------------------------


class ElasticsearchDialect(Dialect):
    """Elasticsearch's requests for one server version (`Capabilities`)."""

    engine = "elasticsearch"
    title = "Elasticsearch"
    score_script = SCORE_SCRIPT
    exclude_script = EXCLUDE_SCRIPT
    max_k = MAX_NUM_CANDIDATES
    limit_name = "num_candidates"
    # Elasticsearch 8 refuses to sort on _id (indices.id_field_data.enabled is off); the index
    # order of documents is total within one shard and a fixed index state.
    fallback_tiebreak = "_doc"

    def __init__(
        self,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        capabilities: Capabilities | None = None,
    ) -> None:
        super().__init__(layout, inline_script)
        self.capabilities = capabilities or Capabilities()

    def _knn(
        self, vector: np.ndarray, budget: int, filter: dict[str, Any] | None
    ) -> dict[str, Any]:
        """One `knn` query clause that yields `budget` nearest neighbours per shard."""
        budget = min(budget, MAX_NUM_CANDIDATES)
        knn: dict[str, Any] = {
            "field": self.layout.vector_field,
            "query_vector": np.asarray(vector, dtype=np.float32).tolist(),
            # Extra candidates keep HNSW recall high; `k` (8.15+) is how many come back.
            "num_candidates": min(MAX_NUM_CANDIDATES, max(budget, 2 * budget)),
        }
        if self.capabilities.knn_query_k:
            # Without `k`, newer releases keep only `size` neighbours per clause.
            knn["k"] = budget
        else:
            # Before 8.15 a knn query returns num_candidates neighbours per shard.
            knn["num_candidates"] = budget
        if filter:
            knn["filter"] = filter
        return {"knn": knn}

    def knn_clause(self, search: CandidateSearch, filter: dict[str, Any] | None) -> dict[str, Any]:
        return self._knn(search.vector, search.budget, filter)

    def check_knn_mode(self) -> None:
        self.capabilities.refuse_knn_mode()

    def explained_source(self) -> dict[str, Any]:
        source: dict[str, Any] = {"includes": ["*"]}
        if self.capabilities.vectors_left_out_of_source:
            # An index made elsewhere on 9.2+ may keep its vectors out of _source by default.
            source["exclude_vectors"] = False
        return source

    def mapping(
        self, dims: int, model: str, knn_engine: str | None = None, prompts: Prompts | None = None
    ) -> dict[str, Any]:
        """`knn_engine` is an OpenSearch notion (lucene / faiss) and is ignored here."""
        body = derive_mapping("elasticsearch", self.layout, dims, model, prompts=prompts)
        if self.capabilities.vectors_left_out_of_source:
            # --explain (and any reindexing tool) reads the vectors from _source.
            body["settings"]["index"]["mapping.exclude_source_vectors"] = False
        return body

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict[str, Any] | None, candidates: int | None
    ) -> dict[str, Any]:
        caps = self.capabilities
        excludes = {"excludes": self.unshown}
        if caps.knn_query:
            return {
                "size": k,
                "query": self._knn(vector, max(k, candidates or k), filter),
                "_source": excludes,
            }
        if caps.knn_section:
            knn = self._knn(vector, k, filter)["knn"]
            knn["k"] = k
            knn["num_candidates"] = min(MAX_NUM_CANDIDATES, max(k, 2 * k))
            return {"size": k, "knn": knn, "_source": excludes}
        raise EngineError(
            f"Elasticsearch {caps.version} has no kNN search (it arrived in 8.4): upgrade"
        )
