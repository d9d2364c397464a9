"""The markdown reports `itlr bench latency|recall|ingest|store|encode` print: each measures in
one run on one machine and returns its lines, ready for docs/benchmarks.md."""

from __future__ import annotations

import platform
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itlr.candidates import PLANS
from itlr.errors import ConfigurationError

if TYPE_CHECKING:
    from itlr.benchmarks.latency import EmbeddedRun, Timing
    from itlr.engines import Backend
    from itlr.query import Query


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def timing_table(timings: Sequence[Timing], reference: Timing) -> list[str]:
    rows = ["| measurement | p50 ms | p95 ms | p50 / plain kNN |", "|---|---:|---:|---:|"]
    for timing in timings:
        rows.append(
            f"| {timing.name} | {timing.p50_ms:.2f} | {timing.p95_ms:.2f} | "
            f"{timing.ratio_to(reference):.2f}x |"
        )
    return rows


def embedded_summary(run: EmbeddedRun) -> list[str]:
    """Build cost, size and the ratios the goals speak of, for one embedded run."""
    by_name = {t.name: t for t in run.timings}
    plain, knn3 = by_name["plain kNN (1 vector)"], by_name["itlr 3-term, knn mode"]
    exact3 = by_name["itlr 3-term, exact mode"]
    per_million = 1_000_000 / run.count
    graph = (
        f"HNSW graph built in {run.graph_seconds:.1f} s "
        f"({run.graph_seconds * per_million:.0f} s per million), "
        f"{run.graph_bytes / 1e6:.0f} MB on disk"
        if run.graph_seconds is not None
        else "no HNSW graph (below the threshold: exact candidates)"
    )
    return [
        ("Built by an earlier run (`--keep`), which recorded: " if run.reused else "")
        + f"Store written in {run.store_seconds:.1f} s; {graph}; index directory "
        f"{run.disk_bytes / 1e6:.0f} MB ({run.disk_bytes * per_million / 1e9:.2f} GB per "
        f"million); process RSS after the run {run.rss_bytes / 1e9:.2f} GB.",
        "",
        f"3-term knn mode / plain kNN: {knn3.ratio_to(plain):.2f}x; 3-term exact / knn mode: "
        f"{exact3.p50_ms / knn3.p50_ms:.1f}x; 3-term exact scoring / one memory pass: "
        f"{exact3.p50_ms / run.floor.p50_ms:.2f}x",
    ]


@contextmanager
def throwaway_opensearch(
    url: str, purpose: str, model: str, dims: int, shards: int = 1, replicas: int = 0
) -> Iterator[Any]:
    """A fresh OpenSearch index for one measurement, deleted afterwards whatever happens."""
    import uuid

    from itlr.engines.connection import Connection
    from itlr.engines.opensearch import OpenSearchBackend

    name = f"itlr-{purpose}-{uuid.uuid4().hex[:8]}"
    connection = Connection.from_env(url)
    backend = OpenSearchBackend(
        connection.opensearch(timeout=120), name, model, dims, url=connection.url
    )
    body = backend.dialect.mapping(dims, model)
    body["settings"]["index"].update(number_of_shards=shards, number_of_replicas=replicas)
    backend.client.indices.create(index=name, body=body)
    backend.client.cluster.health(index=name, wait_for_status="green")
    try:
        yield backend
    finally:
        backend.client.indices.delete(index=name)


def fill_with_random(backend: Any, count: int, dims: int) -> None:
    from itlr.benchmarks.latency import random_texts, random_unit

    step = 2000
    for start in range(0, count, step):
        vectors = random_unit(min(step, count - start), dims, seed=start)
        ids = [f"r{start + i}" for i in range(len(vectors))]
        backend.add(ids, random_texts(len(ids), seed=start), vectors)
    # One segment, so that latency does not depend on how the merges happened to go.
    backend.client.indices.forcemerge(
        index=backend.index_name, max_num_segments=1, request_timeout=600
    )
    backend.refresh()


def chosen_engines(engines: str) -> set[str]:
    """The engines a benchmark's `--engines` names (comma-separated), checked."""
    chosen = {e.strip() for e in engines.split(",") if e.strip()}
    if not chosen <= {"embedded", "opensearch"}:
        raise ConfigurationError(f"unknown engine(s) {sorted(chosen)}: embedded, opensearch")
    return chosen


def latency_report(
    docs: str = "10000,100000",
    url: str | None = None,
    repeats: int = 50,
    dims: int = 384,
    engines: str = "embedded,opensearch",
    keep: Path | None = None,
) -> list[str]:
    """Plain kNN vs logical queries (1, 3, 5 terms; knn and exact mode), p50/p95, same index.

    Vectors are random unit vectors: latency does not depend on what they mean. `keep`: a
    folder where the embedded indexes stay, and are reused by the next run."""
    from itlr.benchmarks.latency import measure_backend, measure_embedded, request_parts

    chosen = chosen_engines(engines)

    lines = [
        f"### Latency (`itlr bench latency --docs {docs} --repeats {repeats}"
        + (f" --engines {engines}" if chosen != {"embedded", "opensearch"} else "")
        + (" --url URL" if url else "")
        + (" --keep DIR" if keep else "")
        + "`)",
        "",
        f"Machine: {machine()}.",
        "",
    ]
    for count in (int(n) for n in docs.split(",")):
        if "embedded" in chosen:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                run = measure_embedded(count, dims, repeats, keep)
            else:
                with tempfile.TemporaryDirectory() as folder:
                    run = measure_embedded(count, dims, repeats, Path(folder))
            lines += [f"**Embedded engine, {count:,} random {dims}-dim vectors**", ""]
            lines += timing_table([run.floor, *run.timings], run.timings[0])
            lines += ["", *embedded_summary(run), ""]
        if url and "opensearch" in chosen:
            with throwaway_opensearch(url, "bench", "random", dims) as backend:
                fill_with_random(backend, count, dims)
                timings = measure_backend(
                    backend, dims, repeats, extra=request_parts(backend, dims)
                )
            lines += [
                f"**OpenSearch at {url}, {count:,} random {dims}-dim vectors (lucene HNSW, 1 segment)**",
                "",
            ]
            lines += timing_table(timings, timings[0])
            knn3 = next(t for t in timings if t.name == "itlr 3-term, knn mode")
            fastest = min(
                (t for t in timings if t.name.startswith("plain kNN")), key=lambda t: t.p50_ms
            )
            lines += [
                "",
                f"3-term knn mode / fastest plain kNN ({fastest.name}): "
                f"{knn3.ratio_to(fastest):.2f}x (p50s); {knn3.paired_ratio_to(fastest):.2f}x "
                "(median of the two timed in the same round)",
                "",
            ]
    return lines


def shards_report(
    url: str, docs: int = 100_000, shards: str = "1,3", replicas: int = 1, repeats: int = 50
) -> list[str]:
    """The same random index with 1 and with several primary shards (and replicas) on one
    cluster: p50 / p95 of plain kNN and the 3-term query, knn and exact mode."""
    from itlr.benchmarks.latency import (
        POOL,
        QUERIES,
        random_unit,
        time_interleaved,
        vector_pool,
    )
    from itlr.options import SearchOptions
    from itlr.query import parse

    dims = 384
    counts = [int(n) for n in shards.split(",") if n.strip()]
    lines = [
        f"### Shards (`itlr bench shards --url URLS --docs {docs} --shards {shards} "
        f"--replicas {replicas} --repeats {repeats}`)",
        "",
        f"Machine: {machine()}; cluster at {url}.",
        "",
        "| primaries | replicas | measurement | p50 ms | p95 ms |",
        "|---:|---:|---|---:|---:|",
    ]
    pool = random_unit(POOL, dims, seed=99)
    query = parse(QUERIES[3])
    drawn = vector_pool(query, dims)
    for count in counts:
        with throwaway_opensearch(url, "shards", "random", dims, count, replicas) as backend:
            fill_with_random(backend, docs, dims)
            backend.client.cluster.health(index=backend.index_name, wait_for_status="green")
            # `...`: each lambda binds its backend (and mode) as defaulted parameters.
            calls: dict[str, Callable[..., object]] = {
                "plain kNN (1 vector)": lambda i, b=backend: b.search_vector(pool[i % POOL], 10),
                **{
                    f"itlr 3-term, {mode} mode": (
                        lambda i, b=backend, mode=mode: b.search(
                            query, drawn[i % POOL], SearchOptions(k=10, mode=mode)
                        )
                    )
                    for mode in ("knn", "exact")
                },
            }
            for timing in time_interleaved(calls, repeats):
                lines.append(
                    f"| {count} | {replicas} | {timing.name} | {timing.p50_ms:.2f} | "
                    f"{timing.p95_ms:.2f} |"
                )
    return lines


def recall_report(
    budgets: str = "10,20,50,100,200",
    queries: int = 100,
    plans: str = ",".join(PLANS),
    url: str | None = None,
    passages: int | None = None,
) -> list[str]:
    """Top-10 overlap of knn mode with exact mode per candidate budget, on real text.

    Below `ANN_MIN_ROWS` passages the embedded engine's per-term candidates are exact, so it
    measures only what the union of candidates misses; past it (`passages`), and on
    OpenSearch, it adds what the HNSW graph misses."""
    import random

    import numpy as np

    from itlr.benchmarks.latency import CandidateRecall, candidate_recall
    from itlr.benchmarks.plans import recall_by_plan_and_shape
    from itlr.benchmarks.text_corpus import random_queries, recall_corpus
    from itlr.embed import get_embedder
    from itlr.engines.embedded import EmbeddedBackend

    embedder = get_embedder()
    documents, vocabulary = recall_corpus(passages)
    ids = [d.id for d in documents]
    texts = [d.text for d in documents]
    vectors = embedder.encode(texts)
    term_vectors = dict(zip(vocabulary, embedder.encode(vocabulary), strict=True))
    sample = random_queries(vocabulary, queries, random.Random(3))
    sizes = [int(b) for b in budgets.split(",")]

    def vectors_for(query: Query) -> np.ndarray:
        return np.stack([term_vectors[t] for t in query.terms])

    anchored = [q for q in sample if q.anchored]
    groups = {
        f"anchored ({len(anchored)})": anchored,
        f"not anchored ({len(sample) - len(anchored)})": [q for q in sample if not q.anchored],
    }

    compared = [p.strip() for p in plans.split(",") if p.strip()]
    unknown = [p for p in compared if p not in PLANS]
    if unknown:
        raise ConfigurationError(f"unknown plan(s) {unknown}: choose from {list(PLANS)}")

    def measure(backend: Backend) -> dict[str, dict[int, CandidateRecall]]:
        return {
            name: candidate_recall(backend, vectors_for, group, sizes)
            for name, group in groups.items()
            if group
        }

    rows: dict[str, dict[str, dict[int, CandidateRecall]]] = {}
    by_plan: dict[str, dict[tuple[str, str], tuple[int, dict[int, CandidateRecall]]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        index = EmbeddedBackend.create(Path(folder) / "recall", embedder.name, embedder.dims)
        index.add(ids, texts, vectors)
        rows["embedded"] = measure(index)
        by_plan["embedded"] = recall_by_plan_and_shape(
            index,
            vectors_for,
            sample,
            sizes,
            compared,  # type: ignore[arg-type]
        )
    if url:
        with throwaway_opensearch(url, "recall", embedder.name, embedder.dims) as backend:
            backend.add(ids, texts, vectors)
            backend.refresh()
            rows["OpenSearch (lucene HNSW)"] = measure(backend)
            by_plan["OpenSearch (lucene HNSW)"] = recall_by_plan_and_shape(
                backend,
                vectors_for,
                sample,
                sizes,
                compared,  # type: ignore[arg-type]
            )
    lines = [
        f"### Candidate recall (`itlr bench recall --budgets {budgets} --queries {queries}"
        + (f" --passages {passages}" if passages else "")
        + (" --url URL" if url else "")
        + "`)",
        "",
        f"{len(documents)} real-text passages (demo corpus + topic bank sentences"
        + (", and pairs of them joined" if passages else "")
        + "), "
        f"{queries} random logical queries over {len(vocabulary)} phrases, top-10, "
        "knn mode against exact mode on the same engine.",
        "",
        "Score agreement: the share of the top-10 ranks where knn mode returns a document "
        "scoring as high as exact mode's at that rank (tied documents, often at score 0 "
        "when fewer than 10 documents satisfy the query at all, are equally right). "
        "Id overlap: the two top-10 id sets compared, ties broken by id. Anchored queries "
        "need a positive term to score well (`Query.anchored`); the others (a NOT under "
        "an OR) warn that knn mode may miss documents.",
        "",
        "| engine | queries | measure | " + " | ".join(str(b) for b in sizes) + " |",
        "|---|---|---|" + "---:|" * len(sizes),
    ]
    for engine_name, measured in rows.items():
        for group, recall in measured.items():
            for label, attribute in (("score agreement", "scores"), ("id overlap", "ids")):
                values = " | ".join(f"{getattr(recall[b], attribute):.3f}" for b in sizes)
                lines.append(f"| {engine_name} | {group} | {label} | {values} |")
    lines += [
        "",
        "Score agreement per candidate plan and query shape (`itlr.candidates`; the budget "
        "is per positive term, shared among a plan's searches):",
        "",
        "| engine | shape | queries | plan | " + " | ".join(str(b) for b in sizes) + " |",
        "|---|---|---:|---|" + "---:|" * len(sizes),
    ]
    for engine_name, table in by_plan.items():
        for (shape, plan), (count, recall) in table.items():
            values = " | ".join(f"{recall[b].scores:.3f}" for b in sizes)
            lines.append(f"| {engine_name} | {shape} | {count} | {plan} | {values} |")
    return lines


def ingest_report(url: str | None = None, copies: int = 3) -> list[str]:
    """Documents per second and the share of wall time outside the encoder."""
    from itlr.benchmarks.ingest import measure_ingest
    from itlr.documents import read_jsonl
    from itlr.embed import get_embedder
    from itlr.engines.embedded import EmbeddedBackend
    from itlr.records import Document
    from itlr.resources import data_file

    embedder = get_embedder()
    base = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    documents = [Document(f"{d.id}-{c}", d.text, d.fields) for c in range(copies) for d in base]
    measurements = []
    with tempfile.TemporaryDirectory() as folder:
        index = EmbeddedBackend.create(Path(folder) / "ingest", embedder.name, embedder.dims)
        measurements.append(measure_ingest("embedded", index, embedder, documents))
    if url:
        with throwaway_opensearch(url, "ingest", embedder.name, embedder.dims) as backend:
            measurements.append(measure_ingest("opensearch", backend, embedder, documents))
    lines = [
        f"### Ingestion (`itlr bench ingest --copies {copies}"
        + (" --url URL" if url else "")
        + "`)",
        "",
        f"Machine: {machine()}. {len(documents)} demo passages, batch size 64, bundled MiniLM on CPU.",
        "",
        "| engine | docs | seconds | docs/s | encoder share | outside the encoder |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in measurements:
        lines.append(
            f"| {m.engine} | {m.documents} | {m.seconds:.1f} | {m.docs_per_second:.1f} | "
            f"{1 - m.engine_share:.1%} | {m.engine_share:.1%} |"
        )
    return lines


def store_report(rows: int = 20_000, batch_size: int = 64) -> list[str]:
    """What the embedded engine's crash-safe commit per batch costs (no model involved)."""
    from itlr.benchmarks.store import measure_store

    m = measure_store(rows, batch_size)
    lines = [
        f"### Embedded store (`itlr bench store --rows {rows} --batch-size {batch_size}`)",
        "",
        f"Machine: {machine()}. {m.dims}-dim random vectors, short texts, median of 3 runs.",
        "",
        "| rows | batch | write s | ms per batch (commit) | reopen s |",
        "|---:|---:|---:|---:|---:|",
        f"| {m.rows} | {m.batch_size} | {m.write_seconds:.2f} | {m.ms_per_batch:.1f} | "
        f"{m.open_seconds:.2f} |",
    ]
    return lines


def encode_report() -> list[str]:
    """Encoding T terms in one batch vs one call per term vs the original question."""
    from itlr.benchmarks.ingest import measure_term_encoding
    from itlr.embed import get_embedder

    embedder = get_embedder()
    question = "What are the benefits of vitamin D for the immune system and mood, other than bone health or muscle strength?"
    terms = ["benefits of vitamin D", "immune system", "mood", "bone health", "muscle strength"]
    rows = []
    for count in (1, 3, 5):
        m = measure_term_encoding(embedder, terms[:count], question)
        rows.append(
            f"| {count} | {m.batched_ms:.1f} | {m.one_by_one_ms:.1f} | {m.question_ms:.1f} |"
        )
    lines = [
        "### Term encoding (`itlr bench encode`)",
        "",
        f"Machine: {machine()}. Median of 20 runs.",
        "",
        "| terms | one batch ms | one call per term ms | whole question once ms |",
        "|---:|---:|---:|---:|",
        *rows,
    ]
    return lines
