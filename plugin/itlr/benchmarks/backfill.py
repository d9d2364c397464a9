"""Back-fill throughput against ingestion of the same documents, on one OpenSearch: the
back-fill reads text already in the cluster and writes partial updates, ingestion sends whole
documents; both should spend nearly all their time in the encoder."""

from __future__ import annotations

import time
import uuid

from itlr.backfill import backfill
from itlr.benchmarks.ingest import measure_ingest
from itlr.benchmarks.reports import machine, throwaway_opensearch
from itlr.documents import read_jsonl
from itlr.embed import Embedder, get_embedder
from itlr.engines.connection import Connection
from itlr.engines.layout import IndexLayout
from itlr.engines.opensearch import OpenSearchBackend
from itlr.records import Document
from itlr.resources import data_file


def _plain_index(url: str, documents: list[Document], embedder: Embedder) -> OpenSearchBackend:
    """An index as another tool makes it: text and a field, no vectors, no itlr mapping."""
    connection = Connection.from_env(url)
    client = connection.opensearch(timeout=120)
    name = f"itlr-backfill-bench-{uuid.uuid4().hex[:8]}"
    client.indices.create(
        index=name,
        body={
            "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
            "mappings": {"properties": {"body": {"type": "text"}, "topic": {"type": "keyword"}}},
        },
    )
    from opensearchpy import helpers

    actions = (
        {"_index": name, "_id": d.id, "body": d.text, "topic": str(d.fields.get("topic", ""))}
        for d in documents
    )
    helpers.bulk(client, actions, refresh=True)
    layout = IndexLayout("vec", "body")
    return OpenSearchBackend(
        client, name, embedder.name, embedder.dims, layout=layout, url=connection.url
    )


def backfill_report(url: str, copies: int = 3) -> list[str]:
    """docs/s of `itlr backfill` and of `itlr ingest` on the same passages, and the encoder's
    share of each one's wall time."""
    embedder = get_embedder()
    base = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    documents = [Document(f"{d.id}-{c}", d.text, d.fields) for c in range(copies) for d in base]
    embedder.encode(["warm-up"])  # the first call pays for lazy initialisation
    backend = _plain_index(url, documents, embedder)
    try:
        started = time.perf_counter()
        report = backfill(backend, embedder, "body")
        seconds = time.perf_counter() - started
    finally:
        backend.client.indices.delete(index=backend.index_name)
    with throwaway_opensearch(url, "ingest", embedder.name, embedder.dims) as target:
        ingested = measure_ingest("opensearch", target, embedder, documents)
    rows = [
        ("itlr backfill (in place)", report.embedded, seconds, report.encode_seconds),
        ("itlr ingest", ingested.documents, ingested.seconds, ingested.encode_seconds),
    ]
    lines = [
        f"### Back-fill (`itlr bench backfill --url URL --copies {copies}`)",
        "",
        f"Machine: {machine()}. {len(documents)} demo passages, batch size 64, bundled MiniLM "
        "on CPU, OpenSearch on the same machine.",
        "",
        "| route | docs | seconds | docs/s | encoder share |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, count, wall, encode in rows:
        lines.append(
            f"| {name} | {count} | {wall:.1f} | {count / wall:.1f} | {encode / wall:.1%} |"
        )
    return lines
