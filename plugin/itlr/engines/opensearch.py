"""OpenSearch: its dialect (the k-NN plugin's `knn` clause, the OpenSearch Painless scripts) and
its backend (opensearch-py's helpers and calls; the client comes from itlr.engines.connection)."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

import numpy as np

from itlr.candidates import CandidateSearch
from itlr.engines.cluster import ClusterBackend
from itlr.engines.connection import opensearch_errors
from itlr.engines.dialect import Dialect
from itlr.engines.layout import IndexLayout
from itlr.engines.operations import ClusterOperations
from itlr.engines.painless import StoredScript

SCORE_SCRIPT = StoredScript.load("score", "itlr_score.painless", "opensearch")
EXCLUDE_SCRIPT = StoredScript.load("exclude", "itlr_exclude.painless", "opensearch")


class OpenSearchDialect(Dialect):
    engine = "opensearch"
    title = "OpenSearch"
    score_script = SCORE_SCRIPT
    exclude_script = EXCLUDE_SCRIPT
    max_k = 10_000  # the k-NN plugin refuses a larger k
    # OpenSearch still sorts on _id (fielddata on it is on by default, if deprecated).
    fallback_tiebreak = "_id"

    def knn_clause(self, search: CandidateSearch, filter: dict[str, Any] | None) -> dict[str, Any]:
        knn: dict[str, Any] = {
            "vector": np.asarray(search.vector, dtype=np.float32).tolist(),
            # The plugin refuses the whole search above max_k; the capped-budget warning says so.
            "k": min(search.budget, self.max_k),
        }
        if filter:
            knn["filter"] = filter
        return {"knn": {self.layout.vector_field: knn}}

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict[str, Any] | None, candidates: int | None
    ) -> dict[str, Any]:
        knn: dict[str, Any] = {
            "vector": np.asarray(vector, dtype=np.float32).tolist(),
            "k": max(k, candidates or k),
        }
        if filter:
            knn["filter"] = filter
        return {
            "size": k,
            "query": {"knn": {self.layout.vector_field: knn}},
            "_source": {"excludes": self.unshown},
        }


class OpenSearchOperations(ClusterOperations):
    """opensearch-py's call shapes: request bodies as `body=`."""

    def errors(self, index: str) -> contextlib.AbstractContextManager[None]:
        return opensearch_errors(self.url, index)

    def vector_field_refusal(self, index: str, field: str) -> str | None:
        if str(self.settings(index).get("knn", "false")).lower() == "true":
            return None
        return (
            f"index {index!r} was created without `index.knn: true`, so OpenSearch cannot add "
            f"the knn_vector field {field!r} in place: back-fill into a new index with "
            "`--into NEW_INDEX` (and `--alias NAME` to switch readers over), or in place for "
            "exact searches only with `--exact-only`"
        )

    def _helpers(self) -> ModuleType:
        from opensearchpy import helpers

        return helpers

    def _create(self, index: str, settings: dict[str, Any], mappings: dict[str, Any]) -> None:
        self.client.indices.create(index=index, body={"settings": settings, "mappings": mappings})

    def _mget(self, index: str, ids: list[str], source: list[str] | bool) -> Any:
        return self.client.mget(index=index, body={"ids": ids}, _source=source)

    def _mget_excluding(self, index: str, ids: list[str], excludes: list[str]) -> Any:
        return self.client.mget(index=index, body={"ids": ids}, _source_excludes=excludes)

    def _mget_docs(self, index: str, docs: list[dict[str, Any]], source: list[str] | bool) -> Any:
        return self.client.mget(index=index, body={"docs": docs}, _source=source)

    def _count(self, index: str, query: dict[str, Any]) -> Any:
        return self.client.count(index=index, body={"query": query})

    def _put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body={"properties": properties})

    def _put_settings(self, index: str, settings: dict[str, Any]) -> None:
        self.client.indices.put_settings(index=index, body=settings)

    def _put_meta(self, index: str, meta: dict[str, Any]) -> None:
        self.client.indices.put_mapping(index=index, body={"_meta": meta})

    def _put_pipeline(self, pipeline_id: str, body: dict[str, Any]) -> None:
        self.client.ingest.put_pipeline(id=pipeline_id, body=body)

    def _update_aliases(self, actions: list[dict[str, Any]]) -> None:
        self.client.indices.update_aliases(body={"actions": actions})

    def _simulate(self, pipeline_id: str, docs: list[dict[str, Any]]) -> Any:
        return self.client.ingest.simulate(id=pipeline_id, body={"docs": docs})


class OpenSearchSpecifics:
    """OpenSearch's part of a cluster backend (itlr.engines.cluster.EngineSpecifics)."""

    name = "opensearch"
    vector_type = "knn_vector"

    def dialect(self, layout: IndexLayout, inline_script: bool) -> OpenSearchDialect:
        return OpenSearchDialect(layout, inline_script)

    def operations(self, client: Any, url: str) -> OpenSearchOperations:
        return OpenSearchOperations(client, url)

    def vector_warning(self, vector: dict[str, Any], field: str, index: str) -> str | None:
        if "method" in vector or "model_id" in vector:
            return None
        return (
            f"field {field!r} of index {index!r} is not built for ANN search (no `method`: "
            'back-filled with --exact-only): only `mode="exact"` can search it'
        )

    def msearch(self, client: Any, lines: list[dict[str, Any]]) -> Any:
        return client.msearch(body=lines)


OPENSEARCH = OpenSearchSpecifics()


class OpenSearchBackend(ClusterBackend):
    """A cluster backend with OpenSearch's specifics (a constructor: nothing is overridden)."""

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
        super().__init__(
            client, index_name, model, dims, layout, inline_script, url, specifics=OPENSEARCH
        )
