"""An index made without itlr, through the engine's REST API alone: text `body`, a `year` and a
`topic`, and (where asked) a `vec` vector field mapped by hand. The foreign-index and back-fill
tests build on it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

TOPICS = ("nutrition", "sleep", "sport")


def documents(corpus: list[Any], count: int) -> list[dict[str, Any]]:
    """`count` documents from the demo corpus, with fields of the index's own."""
    return [
        {"_id": doc.id, "body": doc.text, "year": 2000 + n % 25, "topic": TOPICS[n % 3]}
        for n, doc in enumerate(corpus[:count])
    ]


def vector_mapping(engine: str, dims: int) -> dict[str, Any]:
    if engine == "opensearch":
        return {
            "type": "knn_vector",
            "dimension": dims,
            "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"},
        }
    return {"type": "dense_vector", "dims": dims, "index": True, "similarity": "cosine"}


def create_index(
    url: str,
    engine: str,
    docs: list[dict[str, Any]],
    *,
    knn: bool = True,
    vector_dims: int | None = None,
    prefix: str = "itlr-foreign",
) -> str:
    """Create and `_bulk`-load an index by hand; returns its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    properties: dict[str, Any] = {
        "body": {"type": "text"},
        "year": {"type": "integer"},
        "topic": {"type": "keyword"},
    }
    if vector_dims is not None:
        properties["vec"] = vector_mapping(engine, vector_dims)
    settings: dict[str, Any] = {"number_of_shards": 1, "number_of_replicas": 0}
    if engine == "opensearch" and knn:
        settings["knn"] = True
    body = {"settings": {"index": settings}, "mappings": {"properties": properties}}
    answer = httpx.put(f"{url}/{name}", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    bulk(url, name, docs)
    return name


def bulk(url: str, name: str, docs: list[dict[str, Any]]) -> None:
    if not docs:
        return
    lines = []
    for doc in docs:
        source = {k: v for k, v in doc.items() if k != "_id"}
        lines += [json.dumps({"index": {"_index": name, "_id": doc["_id"]}}), json.dumps(source)]
    answer = httpx.post(
        f"{url}/_bulk?refresh=true",
        content="\n".join(lines) + "\n",
        headers={"content-type": "application/x-ndjson"},
        timeout=120,
    )
    assert answer.status_code == 200 and not answer.json()["errors"], answer.text[:500]


def all_sources(url: str, name: str) -> dict[str, dict[str, Any]]:
    """Every document's whole _source, vectors included, by id."""
    httpx.post(f"{url}/{name}/_refresh", timeout=60)
    answer = httpx.post(
        f"{url}/{name}/_search", json={"size": 10_000, "query": {"match_all": {}}}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    return {hit["_id"]: hit["_source"] for hit in answer.json()["hits"]["hits"]}


def delete_index(url: str, name: str) -> None:
    httpx.delete(f"{url}/{name}", timeout=60)
