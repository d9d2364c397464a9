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
from itlr.engines.dialect import Dialect, StoredScript

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

    def knn_clause(self, search: CandidateSearch, filter: dict | None) -> dict[str, Any]:
        knn: dict[str, Any] = {
            "vector": np.asarray(search.vector, dtype=np.float32).tolist(),
            # The plugin refuses the whole search above max_k; the capped-budget warning says so.
            "k": min(search.budget, self.max_k),
        }
        if filter:
            knn["filter"] = filter
        return {"knn": {self.layout.vector_field: knn}}

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict | None, candidates: int | None
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


class OpenSearchBackend(ClusterBackend):
    engine = "opensearch"
    vector_type = "knn_vector"

    def _make_dialect(self) -> OpenSearchDialect:
        return OpenSearchDialect(self.layout, self.inline_script)

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return opensearch_errors(self.url, self.index)

    def _create_index(self, knn_engine: str | None) -> None:
        body = self.dialect.mapping(self.dims, self.model, knn_engine, self.prompts)
        self.client.indices.create(index=self.index, body=body)

    def _mapped_dims(self, vector: dict[str, Any]) -> int:
        return int(vector.get("dimension", 0))

    def _not_found_error(self) -> type[Exception]:
        from opensearchpy import NotFoundError

        return NotFoundError

    def _put_script(self, script: StoredScript) -> None:
        self.client.put_script(id=script.id, body=script.body())

    def _bulk_helpers(self) -> ModuleType:
        from opensearchpy import helpers

        return helpers

    def _mget(self, ids: list[str], fields: list[str] | None = None) -> Any:
        return self.client.mget(index=self.index, body={"ids": ids}, _source=fields or False)

    def _mget_excluding(self, ids: list[str], excludes: list[str]) -> Any:
        return self.client.mget(index=self.index, body={"ids": ids}, _source_excludes=excludes)

    def _msearch(self, lines: list[dict[str, Any]]) -> Any:
        return self.client.msearch(body=lines)
