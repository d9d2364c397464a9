"""Elasticsearch backend (8.x, 9.x): knn candidates per positive term, one stored Painless script
composing the terms' similarities, optional hard filter, bulk ingestion.

Everything that is not engine-specific is shared with OpenSearch: params, mapping layout, bulk
actions and hits through itlr.engines.dialect; index checks, scripts, ingestion and the
script_score request through itlr.engines.cluster. What differs is the request shape (`knn` query
with `query_vector` / `num_candidates`), the Painless source (no cosineSimilarity class bindings)
and the client.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from itlr.candidates import CandidateSearch
from itlr.engines.cluster import ClusterBackend, error_reason
from itlr.engines.dialect import Dialect, IndexLayout, StoredScript, derive_mapping
from itlr.errors import EngineError, IndexStateError

SCORE_SCRIPT = StoredScript.load("score-es", "itlr_score_elasticsearch.painless")
EXCLUDE_SCRIPT = StoredScript.load("exclude-es", "itlr_exclude_elasticsearch.painless")

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


def unsupported_version(version: str) -> str | None:
    """One line explaining why itlr cannot use this Elasticsearch at all, or None."""
    if Capabilities(version).numbers < (8, 0):
        return (
            f"Elasticsearch {version} is too old for itlr: it needs 8.0+ for indexed "
            'dense_vector fields (8.12+ for `mode="knn"`)'
        )
    return None


# -- client --------------------------------------------------------------------------------


def _client_major() -> int:
    from elasticsearch import __versionstr__

    return int(__versionstr__.split(".", 1)[0])


_COMPAT = re.compile(r"(compatible-with=)(\d+)")


def _transport_class() -> type:
    """A transport that asks the server for its own major version's REST format.

    The 9.x Python client sends `Accept: ...; compatible-with=9`, which an 8.x server refuses
    with a 400 (an 8.x client talking to a 9.x server is fine: servers accept N-1). Rather than
    pin the client, the transport learns the server's version once (a plain-JSON `GET /`, or
    `GET /_nodes/_local` where the root endpoint is missing) and lowers the compatibility
    version in the headers when the server is older than the client.
    """
    from elastic_transport import Transport

    class VersionMatchingTransport(Transport):
        server_version: str | None = None
        _probed = False

        def perform_request(self, method: str, target: str, *, headers: Any = None, **kwargs: Any):  # type: ignore[override]
            if not isinstance(headers, Mapping):
                headers = {}
            if not self._probed:
                self._probed = True
                self.server_version = self._probe(headers)
            major = Capabilities(self.server_version).numbers[0] if self.server_version else None
            if major is not None and major < _client_major():
                headers = {
                    name: _COMPAT.sub(rf"\g<1>{major}", value)
                    if name.lower() in ("accept", "content-type")
                    else value
                    for name, value in headers.items()
                }
            return super().perform_request(method, target, headers=headers, **kwargs)

        def _probe(self, headers: Mapping[str, str]) -> str | None:
            plain = {
                k: v for k, v in headers.items() if k.lower() not in ("accept", "content-type")
            }
            plain["accept"] = "application/json"
            for target in ("/", "/_nodes/_local?filter_path=nodes.*.version"):
                try:
                    # No retries: an unreachable node should fail once, on the real request.
                    response = super().perform_request("GET", target, headers=plain, max_retries=0)
                except Exception:  # the real request will report what is wrong
                    continue
                if response.meta.status >= 300 or not isinstance(response.body, dict):
                    continue
                body = response.body
                if "version" in body:
                    return str(body["version"].get("number") or "") or None
                nodes = body.get("nodes") or {}
                for node in nodes.values():
                    return str(node.get("version") or "") or None
            return None

    return VersionMatchingTransport


def connect(
    url: str,
    user: str | None = None,
    password: str | None = None,
    api_key: str | None = None,
    ca_file: str | None = None,
    verify_certs: bool = True,
    timeout: float = 30.0,
):
    from elastic_transport import OrjsonSerializer
    from elasticsearch import Elasticsearch

    kwargs: dict[str, Any] = {
        "hosts": [url],
        "request_timeout": timeout,
        "transport_class": _transport_class(),
        # 5xx and timeouts are retried by the client; 429 by the bulk helper.
        "retry_on_timeout": True,
        "max_retries": 3,
        # orjson encodes a logical query's vectors 17x faster than the standard library.
        "serializers": {"application/json": OrjsonSerializer()},
    }
    if api_key:
        kwargs["api_key"] = api_key
    elif user is not None:
        kwargs["basic_auth"] = (user, password or "")
    if url.startswith("https"):
        kwargs.update(verify_certs=verify_certs, ssl_show_warn=False)
        if ca_file:
            kwargs["ca_certs"] = ca_file
    return Elasticsearch(**kwargs)


@contextlib.contextmanager
def engine_errors(url: str, index: str) -> Iterator[None]:
    """Client exceptions become one actionable line."""
    import elastic_transport
    from elasticsearch import exceptions as es_errors

    try:
        yield
    except es_errors.AuthenticationException:
        raise EngineError(
            f"Elasticsearch at {url} refused the credentials: check `user`/`password` or `api_key`"
        ) from None
    except es_errors.AuthorizationException as denied:
        raise EngineError(
            f"Elasticsearch at {url} denied the request ({_reason(denied)}): "
            "the user or API key needs read/write on the index and manage on scripts"
        ) from None
    except es_errors.NotFoundError as missing:
        if "index_not_found" in str(missing):
            raise IndexStateError(
                f"index {index!r} does not exist at {url}: create it by "
                "adding documents (`itlr ingest FILE` or `Index.add`)"
            ) from None
        raise EngineError(f"Elasticsearch at {url}: {_reason(missing)}") from None
    except es_errors.UnsupportedProductError:
        raise EngineError(
            f"{url} is not Elasticsearch (the client's product check failed): "
            'use `engine="opensearch"` or `engine="auto"`'
        ) from None
    except es_errors.ApiError as refused:
        reason = _reason(refused)
        if "script_lang not supported [painless]" in reason or "lang [painless]" in reason:
            reason += " (this node has no lang-painless module: use a full distribution)"
        if "media_type_header_exception" in reason:
            reason += (
                " (the Python client is newer than the server and its version could not be "
                "read from GET /: install elasticsearch<9 for an 8.x server)"
            )
        raise EngineError(f"Elasticsearch at {url} refused the request: {reason}") from None
    except (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout) as down:
        raise EngineError(
            f"cannot reach Elasticsearch at {url} ({type(down).__name__}): "
            "is it running? check `url`"
        ) from None
    except elastic_transport.TransportError as failed:
        raise EngineError(f"Elasticsearch at {url}: {failed}") from None


def _reason(error: Any) -> str:
    return error_reason(getattr(error, "body", None), getattr(error, "message", error))


# -- backend ---------------------------------------------------------------------------------


class ElasticsearchBackend(ClusterBackend):
    engine = "elasticsearch"
    vector_type = "dense_vector"

    def __init__(
        self,
        client: Any,
        index: str,
        model: str,
        dims: int,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        url: str = "",
        version: str | None = None,
    ) -> None:
        """`version` shapes the requests (knn query, its `k`); None asks the server when it is
        first needed, or assumes the newest Elasticsearch when there is no client (translate)."""
        super().__init__(client, index, model, dims, layout, inline_script, url)
        self._version = version

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return engine_errors(self.url, self.index)

    @property
    def capabilities(self) -> Capabilities:
        if self._version is None and self.client is not None:
            transport = getattr(self.client, "transport", None)
            if getattr(transport, "server_version", None) is None:
                # Any request makes the transport learn the version; ping never raises.
                self.client.ping()
            self._version = getattr(transport, "server_version", None)
            problem = unsupported_version(self._version) if self._version else None
            if problem:
                raise EngineError(problem)
        return Capabilities(self._version)

    @property
    def dialect(self) -> ElasticsearchDialect:
        return ElasticsearchDialect(self.layout, self.inline_script, self.capabilities)

    # -- index ---------------------------------------------------------------------------

    def _create_index(self, knn_engine: str | None) -> None:
        body = self.dialect.mapping(self.dims, self.model, knn_engine)
        self.client.indices.create(
            index=self.index, settings=body["settings"], mappings=body["mappings"]
        )

    def _mapped_dims(self, vector: dict[str, Any]) -> Any:
        # Since 8.11 dims may be absent until the first vector arrives.
        return vector.get("dims")

    def _check_vector(self, vector: dict[str, Any]) -> None:
        if vector.get("index") is False:
            self._warn(
                f"field {self.layout.vector_field!r} of index {self.index!r} is not indexed for "
                'kNN (index: false): only `mode="exact"` can search it'
            )

    # -- scripts and writes --------------------------------------------------------------

    def _not_found_error(self) -> type[Exception]:
        from elasticsearch import NotFoundError

        return NotFoundError

    def _put_script(self, script: StoredScript) -> None:
        self.client.put_script(id=script.id, script=script.body()["script"])

    def _bulk_helpers(self) -> ModuleType:
        from elasticsearch import helpers

        return helpers

    def _mget(self, ids: list[str]) -> Any:
        return self.client.mget(index=self.index, ids=ids, source=False)


# -- dialect -------------------------------------------------------------------------------


class ElasticsearchDialect(Dialect):
    """Elasticsearch's requests for one server version (`Capabilities`)."""

    engine = "elasticsearch"
    title = "Elasticsearch"
    score_script = SCORE_SCRIPT
    exclude_script = EXCLUDE_SCRIPT
    max_k = MAX_NUM_CANDIDATES
    limit_name = "num_candidates"

    def __init__(
        self,
        layout: IndexLayout | None = None,
        inline_script: bool = False,
        capabilities: Capabilities | None = None,
    ) -> None:
        super().__init__(layout, inline_script)
        self.capabilities = capabilities or Capabilities()

    def _knn(self, vector: np.ndarray, budget: int, filter: dict | None) -> dict[str, Any]:
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

    def knn_clause(self, search: CandidateSearch, filter: dict | None) -> dict[str, Any]:
        return self._knn(search.vector, search.budget, filter)

    def check_knn_mode(self) -> None:
        self.capabilities.refuse_knn_mode()

    def explained_source(self) -> dict[str, Any]:
        source: dict[str, Any] = {"includes": ["*"]}
        if self.capabilities.vectors_left_out_of_source:
            # An index made elsewhere on 9.2+ may keep its vectors out of _source by default.
            source["exclude_vectors"] = False
        return source

    def mapping(self, dims: int, model: str, knn_engine: str | None = None) -> dict[str, Any]:
        """`knn_engine` is an OpenSearch notion (lucene / faiss) and is ignored here."""
        body = derive_mapping("elasticsearch", self.layout, dims, model)
        if self.capabilities.vectors_left_out_of_source:
            # --explain (and any reindexing tool) reads the vectors from _source.
            body["settings"]["index"]["mapping.exclude_source_vectors"] = False
        return body

    def dense_body(
        self, vector: np.ndarray, k: int, filter: dict | None, candidates: int | None
    ) -> dict[str, Any]:
        caps = self.capabilities
        excludes = {"excludes": [self.layout.vector_field]}
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
