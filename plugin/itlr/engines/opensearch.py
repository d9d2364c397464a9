"""OpenSearch backend: kNN candidates per positive term, one stored Painless script composing
the terms' similarities, optional hard filter, bulk ingestion."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from itlr.engines.remote import (
    IndexLayout,
    StoredScript,
    bulk_actions,
    derive_mapping,
    exclusion_params,
    hits_from_response,
    score_params,
)
from itlr.errors import EngineError, IndexStateError
from itlr.query import Query
from itlr.search import Hit, SearchOptions

SCORE_SCRIPT = StoredScript.load("score", "itlr_score_opensearch.painless")
EXCLUDE_SCRIPT = StoredScript.load("exclude", "itlr_exclude_opensearch.painless")


@contextlib.contextmanager
def engine_errors(url: str, index: str) -> Iterator[None]:
    """Client exceptions become one actionable line."""
    from opensearchpy import exceptions as os_errors

    try:
        yield
    except os_errors.ConnectionError as down:
        raise EngineError(
            f"cannot reach OpenSearch at {url} ({type(down.info).__name__ if down.info else 'connection refused'}): "
            "is it running? check --url"
        ) from None
    except os_errors.AuthenticationException:
        raise EngineError(
            f"OpenSearch at {url} refused the credentials: check --user/--password or --api-key"
        ) from None
    except os_errors.NotFoundError as missing:
        if "index_not_found" in str(missing.error):
            raise IndexStateError(
                f"index {index!r} does not exist at {url}: create it with "
                f"`itlr ingest FILE --engine opensearch --url {url} --index {index}`"
            ) from None
        raise EngineError(f"OpenSearch at {url}: {_reason(missing)}") from None
    except os_errors.TransportError as refused:
        raise EngineError(f"OpenSearch at {url} refused the request: {_reason(refused)}") from None


def _reason(error: Any) -> str:
    info = getattr(error, "info", None)
    if isinstance(info, dict):
        cause = info.get("error", {})
        if isinstance(cause, dict):
            root = (cause.get("root_cause") or [{}])[0]
            caused = cause.get("caused_by") or {}
            return (
                f"{root.get('type') or cause.get('type')}: "
                f"{caused.get('reason') or root.get('reason') or cause.get('reason')}"
            )
    return str(getattr(error, "error", error))


def connect(
    url: str,
    user: str | None = None,
    password: str | None = None,
    ca_file: str | None = None,
    verify_certs: bool = True,
    timeout: float = 30.0,
):
    from opensearchpy import OpenSearch

    kwargs: dict[str, Any] = {"hosts": [url], "timeout": timeout}
    if user is not None:
        kwargs["http_auth"] = (user, password or "")
    if url.startswith("https"):
        kwargs.update(use_ssl=True, verify_certs=verify_certs, ssl_show_warn=False)
        if ca_file:
            kwargs["ca_certs"] = ca_file
    return OpenSearch(**kwargs)


class OpenSearchBackend:
    engine = "opensearch"

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
        self.warnings: list[str] = []
        self._scripts_ready = inline_script

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return engine_errors(self.url, self.index)

    # -- index ---------------------------------------------------------------------------

    def ensure_index(self, knn_engine: str | None = None) -> bool:
        """Create the index from mappings/opensearch.json if missing; True if created."""
        with self._errors():
            if self.client.indices.exists(index=self.index):
                self.check_index()
                return False
            body = derive_mapping("opensearch", self.layout, self.dims, self.model, knn_engine)
            self.client.indices.create(index=self.index, body=body)
            return True

    def check_index(self) -> None:
        """Refuse an index whose vectors cannot match the model; warn about another model."""
        with self._errors():
            mapping = self.client.indices.get_mapping(index=self.index)
        (index_mapping,) = mapping.values()
        mappings = index_mapping["mappings"]
        vector = mappings.get("properties", {}).get(self.layout.vector_field)
        if vector is None or vector.get("type") != "knn_vector":
            raise IndexStateError(
                f"index {self.index!r} has no knn_vector field {self.layout.vector_field!r}: "
                "name the right one with --vector-field"
            )
        dims = int(vector.get("dimension", 0))
        if dims != self.dims:
            raise IndexStateError(
                f"index {self.index!r} field {self.layout.vector_field!r} holds {dims}-dim vectors "
                f"but model {self.model!r} makes {self.dims}-dim ones: choose the matching --model"
            )
        meta_model = mappings.get("_meta", {}).get("itlr", {}).get("model")
        if meta_model and meta_model != self.model:
            message = (
                f"index {self.index!r} records model {meta_model!r} in _meta, but searching with "
                f"{self.model!r}: scores will be meaningless unless they share a vector space"
            )
            self.warnings.append(message)
            warnings.warn(message, stacklevel=2)

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
        from opensearchpy import NotFoundError

        installed = []
        with self._errors():
            for script in (SCORE_SCRIPT, EXCLUDE_SCRIPT):
                try:
                    self.client.get_script(id=script.id)
                except NotFoundError:
                    self.client.put_script(id=script.id, body=script.body())
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
        from opensearchpy import helpers

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
            found = self.client.mget(index=self.index, body={"ids": ids}, _source=False)
        return {d["_id"] for d in found["docs"] if d.get("found")}

    # -- search --------------------------------------------------------------------------

    def build_request(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
    ) -> dict[str, Any]:
        """The search body: script_score over kNN candidates (or every document)."""
        field = self.layout.vector_field
        term_vectors = np.asarray(term_vectors, dtype=np.float32)
        user_filter = [options.filter] if options.filter else []
        must_not: list[dict[str, Any]] = []
        if options.hard_filter is not None:
            for term in query.excluded_terms:
                params = exclusion_params(query, term_vectors, options, self.layout, term)
                script = EXCLUDE_SCRIPT.reference(params, self.inline_script)
                must_not.append(
                    {
                        "script_score": {
                            "query": {"match_all": {}},
                            "script": script,
                            "min_score": options.hard_filter,
                        }
                    }
                )
        if options.exclude_lexical:
            must_not += [
                {"match_phrase": {self.layout.text_field: t}} for t in query.excluded_terms
            ]
        inner: dict[str, Any] = {"filter": user_filter, "must_not": must_not}
        if options.mode == "knn" and query.has_positive_term:
            should = []
            for term in query.positive_terms:
                knn: dict[str, Any] = {
                    "vector": term_vectors[query.terms.index(term)].tolist(),
                    "k": options.candidate_budget,
                }
                if options.filter:
                    knn["filter"] = options.filter
                should.append({"knn": {field: knn}})
            inner.update(should=should, minimum_should_match=1)
        else:
            inner["must"] = [{"match_all": {}}]
        params = score_params(query, term_vectors, options, self.layout)
        return {
            "size": options.k,
            "query": {
                "script_score": {
                    "query": {"bool": inner},
                    "script": SCORE_SCRIPT.reference(params, self.inline_script),
                }
            },
            "sort": [{"_score": "desc"}, {"doc_id": "asc"}],
            "track_scores": True,
            # With explain the hits' vectors come back so truths can be shown; never otherwise.
            "_source": {"includes": ["*"]} if options.explain else {"excludes": [field]},
        }

    def search(
        self,
        query: Query,
        term_vectors: np.ndarray,
        options: SearchOptions,
    ) -> list[Hit]:
        if not self._scripts_ready:
            self.install_scripts()
        body = self.build_request(query, term_vectors, options)
        with self._errors():
            response = self.client.search(index=self.index, body=body)
        return hits_from_response(response, query, term_vectors, options, self.layout)

    def search_vector(self, vector: np.ndarray, k: int, filter: dict | None = None) -> list[Hit]:
        """Plain kNN on one vector: the dense baseline."""
        knn: dict[str, Any] = {"vector": np.asarray(vector, dtype=np.float32).tolist(), "k": k}
        if filter:
            knn["filter"] = filter
        body = {
            "size": k,
            "query": {"knn": {self.layout.vector_field: knn}},
            "_source": {"excludes": [self.layout.vector_field]},
        }
        with self._errors():
            response = self.client.search(index=self.index, body=body)
        return hits_from_response(response, None, None, None, self.layout)
