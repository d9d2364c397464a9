"""`itlr eval` on a cluster index (OpenSearch, Elasticsearch) instead of in process.

The corpus is loaded into the index from the vectors the evaluation already computed (nothing
is encoded twice), then each query runs through the engine's own request paths:

dense            search_vector: the engine's plain kNN on the query text's vector (approximate,
                 HNSW), the baseline a user of the cluster would get.
itlr, itlr-hard, itlr-calibrated
                 backend.search: the stored Painless script, with the method's operators, truth
                 mapping and hard filter, `--mode knn` (the candidate plan's kNN candidates, rescored
                 exactly) or `--mode exact` (every document scored).
setops, random   baselines that need every document's cosine to every term: no single engine
                 request computes them, so they are computed in process from the same vectors
                 (runner.run_methods) and listed as such in results.json.

The runs keep run_methods' format: a document's run score is depth - rank, so the engine's
order (score descending, ties by document id) is the one evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from itlr.engines import ClusterIndex
from itlr.errors import ConfigurationError
from itlr.evaluation.methods import Case, Dense, Logical, Method
from itlr.evaluation.runner import Runs, VectorCorpus, run_methods
from itlr.ingest import ingest
from itlr.options import Mode, SearchOptions
from itlr.records import Document
from itlr.results import Hit
from itlr.urls import redact_url

# OpenSearch's k-NN plugin refuses k above 10000 and Elasticsearch caps num_candidates there;
# 10000 is also both engines' default index.max_result_window, the most hits one request returns.
MAX_ENGINE_K = 10_000
# Documents per existence check + bulk request while loading the corpus.
SYNC_BATCH = 500


@dataclass
class IndexSync:
    """What loading the corpus into the index did."""

    index: str
    created: bool = False
    added: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    count: int = 0  # documents in the index afterwards

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PrecomputedVectors:
    """An encoder that answers from vectors the evaluation already computed, so that loading
    the corpus goes through `itlr.ingest` (resumable, failures reported) without re-encoding."""

    def __init__(self, documents: Sequence[Document], vectors: np.ndarray) -> None:
        self._by_text = {d.text: v for d, v in zip(documents, vectors, strict=True)}

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        # The evaluation embedded the passages itself, with whatever prompt its model wants.
        return np.stack([self._by_text[t] for t in texts])


def default_index_name(dataset: Path | str, model: str) -> str:
    """`itlr-eval-<dataset folder>-<model>`, made a valid OpenSearch/Elasticsearch index name.

    Index names must be lowercase, without spaces or any of \\/*?"<>|,#: and at most 255 bytes.
    Only the model's last path component is used, to keep the name readable; the index's _meta
    records the full model name, and opening it with another model warns.
    """

    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "x"

    folder = Path(dataset).resolve().name or "dataset"
    model_name = model.rstrip("/").rsplit("/", 1)[-1]
    return f"itlr-eval-{slug(folder)}-{slug(model_name)}"[:200]


def check_depth(depth: int) -> None:
    """Refuse a depth no single engine request can return."""
    if depth > MAX_ENGINE_K:
        raise ConfigurationError(
            f"`depth` {depth} is more hits than one cluster request returns "
            f"(index.max_result_window and the kNN k stop at {MAX_ENGINE_K})"
        )


def runs_on_engine(method: Method) -> bool:
    """Whether the engine itself can run the method (otherwise it is computed in process)."""
    return isinstance(method, Dense | Logical)


@dataclass
class EngineRunner:
    """Runs the evaluation's methods on a cluster index.

    candidates: the kNN budget per positive term in knn mode; None = SearchOptions' default
    max(100, 10 * depth), capped at MAX_ENGINE_K.
    index_created: whether the caller has just created the index (for the report).
    """

    backend: ClusterIndex
    mode: Mode = "knn"
    candidates: int | None = None
    index_created: bool = False
    batch_size: int = SYNC_BATCH

    def __post_init__(self) -> None:
        if self.mode not in ("knn", "exact"):
            raise ConfigurationError(f"unknown mode {self.mode!r}: choose knn or exact")
        if self.candidates is not None and not 1 <= self.candidates <= MAX_ENGINE_K:
            raise ConfigurationError(
                f"`candidates` must be between 1 and {MAX_ENGINE_K} (the engines' largest kNN "
                f"k), got {self.candidates}"
            )

    def check_depth(self, depth: int) -> None:
        check_depth(depth)

    def candidate_budget(self, depth: int) -> int:
        if self.candidates is not None:
            return self.candidates
        return min(SearchOptions(k=depth).candidate_budget, MAX_ENGINE_K)

    def describe(self, methods: Sequence[Method], depth: int) -> dict[str, Any]:
        """The engine part of results.json's config (the URL without credentials)."""
        return {
            "engine": self.backend.engine,
            "url": redact_url(self.backend.url),
            "index": self.backend.index_name,
            "mode": self.mode,
            "candidates": self.candidate_budget(depth) if self.mode == "knn" else None,
            "computed_in_process": [m.name for m in methods if not runs_on_engine(m)],
        }

    # -- the corpus ------------------------------------------------------------------------

    def sync(
        self,
        documents: Sequence[Document],
        vectors: np.ndarray,
        on_progress: Callable[[int], None] | None = None,
    ) -> IndexSync:
        """Add the documents the index lacks, with their already computed vectors.

        Through `itlr.ingest`, so resumable as `itlr ingest` is: ids already in the index are
        skipped, never rewritten. Refused documents come back in IndexSync.failed with the
        engine's reason.
        """
        if len(documents) != len(vectors):
            raise ValueError("one vector per document")
        report = ingest(
            documents,
            self.backend,
            PrecomputedVectors(documents, vectors),
            batch_size=self.batch_size,
            on_batch=on_progress,
        )
        # Searches must see every document just added.
        self.backend.refresh()
        return IndexSync(
            self.backend.index_name,
            created=self.index_created,
            added=report.added,
            skipped=report.skipped,
            failed=report.failed,
            count=self.backend.count(),
        )

    # -- the runs --------------------------------------------------------------------------

    def run(
        self,
        cases: Sequence[Case],
        methods: Sequence[Method],
        corpus: VectorCorpus,
        text_vectors: Mapping[str, np.ndarray],
        depth: int,
        on_case: Callable[[], None] | None = None,
    ) -> Runs:
        """{method: {query id: {doc id: depth - rank}}}, like runner.run_methods."""
        self.check_depth(depth)
        if any(case.rows is not None for case in cases):
            raise ConfigurationError(
                "queries with their own small corpus (the synthetic benchmark) cannot run on a "
                "cluster index: use the memory engine"
            )
        on_engine = [m for m in methods if runs_on_engine(m)]
        in_process = [m for m in methods if not runs_on_engine(m)]
        found = run_methods(cases, in_process, corpus, text_vectors, depth) if in_process else {}
        runs: Runs = {m.name: found.get(m.name, {}) for m in methods}
        budget = self.candidate_budget(depth)
        for case in cases:
            term_vectors = np.stack([text_vectors[t] for t in case.query.terms])
            for method in on_engine:
                hits = self._hits(method, case, term_vectors, text_vectors, depth, budget)
                runs[method.name][case.id] = ranked_run(hits, depth)
            if on_case:
                on_case()
        return runs

    def _hits(
        self,
        method: Method,
        case: Case,
        term_vectors: np.ndarray,
        text_vectors: Mapping[str, np.ndarray],
        depth: int,
        budget: int,
    ) -> list[Hit]:
        if isinstance(method, Dense):
            return self.backend.search_vector(text_vectors[case.text], depth)
        assert isinstance(method, Logical)
        options = SearchOptions(
            k=depth,
            mode=self.mode,
            candidates=budget,
            hard_filter=method.hard_filter,
            hard_filter_rule=method.hard_filter_rule,
            ops=method.ops,
            truth=method.truth,
        )
        return self.backend.search(case.query, term_vectors, options).hits


def ranked_run(hits: Sequence[Hit], depth: int) -> dict[str, float]:
    """Hits as run scores depth - rank.

    The logical requests already sort by (_score desc, doc_id asc); the plain kNN request does
    not, so ties are settled here the same way, as run_methods settles them in process.
    """
    ordered = sorted(hits, key=lambda hit: (-hit.score, hit.id))[:depth]
    return {hit.id: float(depth - rank) for rank, hit in enumerate(ordered)}
