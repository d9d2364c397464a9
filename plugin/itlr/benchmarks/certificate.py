"""knn mode with and without the certificate against exact mode, per query shape: how often the
top 10 agrees, what it costs, and how the certificate ended (itlr.certificate)."""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from itlr.benchmarks.plans import SHAPES, query_shape
from itlr.benchmarks.reports import chosen_engines, machine, throwaway_opensearch
from itlr.benchmarks.text_corpus import grown_pairs, random_queries, recall_corpus
from itlr.embed import Embedder, get_embedder
from itlr.engines.embedded import EmbeddedBackend
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Hit
from itlr.scoring import TruthMap


def grown_vectors(base: np.ndarray, passages: int | None) -> np.ndarray:
    """The base passages' vectors, then one per joined pair: the normalised sum of the pair's
    vectors. Encoding 100k joined passages takes an hour here; the sum keeps what matters for
    candidate recall (each passage recurs in many documents, vectors clustered by topic)."""
    pairs = grown_pairs(len(base), passages)
    if not pairs:
        return base
    first, second = (np.array(side) for side in zip(*pairs, strict=True))
    joined = base[first] + base[second]
    joined /= np.linalg.norm(joined, axis=1, keepdims=True)
    return np.vstack([base, joined]).astype(np.float32)


def agreement(found: Sequence[Hit], truth: Sequence[Hit]) -> float:
    """Share of ranks at which knn mode scores as high as exact mode (ties count as equal)."""
    scores = [h.score for h in found] + [-np.inf] * (len(truth) - len(found))
    return float(
        np.mean(
            [
                mine >= theirs.score - 1e-6 * max(1.0, abs(theirs.score))
                for mine, theirs in zip(scores, truth, strict=False)
            ]
        )
    )


def _index(
    path: Path, ids: list[str], texts: list[str], vectors: np.ndarray, embedder: Embedder
) -> EmbeddedBackend:
    """The benchmark's index at `path`, reused when an earlier run (`--keep`) left it complete:
    building a 100k-row graph takes minutes."""
    if path.exists():
        index = EmbeddedBackend.open(path)
        if index.count() == len(ids) and (index.get(ids[-1]) or {}).get("text") == texts[-1]:
            return index
        index.close()
        shutil.rmtree(path)
    index = EmbeddedBackend.create(path, embedder.name, embedder.dims)
    index.add(ids, texts, vectors)
    return index


Variant = Callable[[Query], SearchOptions]
# Per query shape and variant: (score agreement, fastest ms, how the certificate ended) per query.
Rows = dict[str, dict[str, list[tuple[float, float, bool | None]]]]


def measure(
    backend: Any,
    sample: list[Query],
    term_vectors: dict[str, np.ndarray],
    variants: dict[str, Variant],
    repeats: int,
) -> Rows:
    """Every variant of every query on one backend, each held to exact mode with its own truth
    values on the same backend."""
    rows: Rows = {}
    for query in sample:
        shape = query_shape(query)
        qv = np.stack([term_vectors[t] for t in query.terms])
        exact: dict[str, Any] = {}
        for name, options in variants.items():
            chosen = options(query)
            kind = chosen.truth.kind
            if kind not in exact:
                exact[kind] = backend.search(
                    query, qv, SearchOptions(k=10, mode="exact", truth=chosen.truth)
                )
            if not exact[kind]:
                continue
            timings = []
            for _ in range(repeats):
                started = time.perf_counter()
                found = backend.search(query, qv, chosen)
                timings.append(time.perf_counter() - started)
            cell = rows.setdefault(shape, {}).setdefault(name, [])
            cell.append((agreement(found, exact[kind]), min(timings) * 1000, found.exact))
    return rows


def table(rows: Rows, variants: dict[str, Variant]) -> list[str]:
    """One row per shape and variant. "proved, below exact": queries whose top k came back
    proved exact though some rank scores below exact mode's (a graph search missed a
    neighbour it should have returned: a proof is as sure as the graph's recall)."""
    lines = [
        "| shape | queries | variant | score agreement | p50 ms | proved | proved, below exact "
        "| not proved | not asked |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in SHAPES:
        for name in variants:
            cell = rows.get(shape, {}).get(name)
            if not cell:
                continue
            scores, millis, exact = zip(*cell, strict=True)
            lines.append(
                f"| {shape} | {len(cell)} | {name} | {np.mean(scores):.3f} | "
                f"{statistics.median(millis):.2f} | {sum(e is True for e in exact)} | "
                f"{sum(e is True and a < 1 for a, e in zip(scores, exact, strict=True))} | "
                f"{sum(e is False for e in exact)} | {sum(e is None for e in exact)} |"
            )
    return lines


def certificate_report(
    passages: int | None = None,
    queries: int = 300,
    repeats: int = 3,
    keep: Path | None = None,
    url: str | None = None,
    engines: str = "embedded,opensearch",
    merged: bool = False,
) -> list[str]:
    """The report; `engines` chooses which are measured (OpenSearch only with `url`), and
    `merged` force-merges the OpenSearch index to one segment first: one HNSW graph per shard,
    as a long-lived index ends up, where a freshly loaded one has several graphs whose
    neighbours are joined (more of them, so better recall)."""
    chosen = chosen_engines(engines)
    embedder = get_embedder()
    base_count = len(recall_corpus(None)[0])
    documents, vocabulary = recall_corpus(passages)
    base = embedder.encode([d.text for d in documents[:base_count]])
    vectors = grown_vectors(np.asarray(base, dtype=np.float32), passages)
    # The grown documents' texts are their pairs' texts joined: what hybrid truths read.
    ids = [d.id for d in documents]
    texts = [d.text for d in documents]
    term_vectors = dict(zip(vocabulary, embedder.encode(vocabulary), strict=True))
    sample = random_queries(vocabulary, queries, random.Random(3))
    budget = SearchOptions().candidate_budget
    cosine = TruthMap("clamp")
    variants: dict[str, Variant] = {
        # The search without the certificate: one round of the default budget, and one
        # combined search for an anchored query (what `auto` plans when nothing is certified).
        "one round, no certificate": lambda query: SearchOptions(
            k=10, max_candidates=budget, plan="combined" if query.anchored else "auto"
        ),
        "with certificate (default: hybrid truths)": lambda query: SearchOptions(k=10),
        "with certificate, cosine truths": lambda query: SearchOptions(k=10, truth=cosine),
    }
    corpus = f"{len(ids):,} documents" + (
        f" ({len(base):,} real passages, the rest joined pairs of them: texts joined, vectors "
        "the normalised sum)"
        if passages
        else " (real passages)"
    )
    lines = [
        f"### Certificate (`itlr bench certificate --queries {queries}"
        + (f" --passages {passages}" if passages else "")
        + (" --url URL" if url else "")
        + (f" --engines {engines}" if chosen != {"embedded", "opensearch"} else "")
        + (" --merged" if merged else "")
        + "`)",
        "",
        f"Machine: {machine()}. {corpus}. Each variant is held to exact mode with its own truth "
        "values.",
        "",
    ]
    if "embedded" in chosen:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(keep or scratch) / f"cert-{len(ids)}"
            index = _index(path, ids, texts, vectors, embedder)
            graph = "an HNSW graph" if index.uses_ann() else "exact scans"
            lines += [f"Embedded engine ({graph} for candidates):", ""]
            lines += table(measure(index, sample, term_vectors, variants, repeats), variants)
    if url and "opensearch" in chosen:
        with throwaway_opensearch(url, "certificate", embedder.name, embedder.dims) as backend:
            for start in range(0, len(ids), 2000):
                chunk = slice(start, start + 2000)
                backend.add(ids[chunk], texts[chunk], vectors[chunk])
            backend.refresh()
            if merged:
                backend.client.indices.forcemerge(
                    index=backend.index_name, max_num_segments=1, request_timeout=1800
                )
            segments = "one segment, force-merged" if merged else "segments as loaded"
            lines += ["", f"OpenSearch (one shard, Lucene HNSW, {segments}):", ""]
            lines += table(measure(backend, sample, term_vectors, variants, repeats), variants)
    return lines


__all__ = ["certificate_report", "grown_vectors"]
