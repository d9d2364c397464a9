"""`itlr eval`: every method on a BEIR folder, scored exactly in process (the memory engine) or
on a cluster index (engine_runs.EngineRunner)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from itlr.errors import ConfigurationError, QuerySyntaxError
from itlr.evaluation.cache import EmbeddingCache, Encoder
from itlr.evaluation.calibration import (
    SigmoidFit,
    calibration_pairs,
    fit_sigmoid,
    hard_filter_threshold,
)
from itlr.evaluation.datasets import BeirDataset, EvalQuery
from itlr.evaluation.engine_runs import EngineRunner, IndexSync
from itlr.evaluation.methods import Case, Method
from itlr.evaluation.metrics import METRIC_NAMES, evaluate_run, mean
from itlr.evaluation.runner import VectorCorpus, run_methods
from itlr.query import Not, Query, Term, parse, walk
from itlr.rewrite import METHODS as REWRITE_METHODS

REWRITES = ("none", *REWRITE_METHODS)
# question -> (logical query, what the rewriter reports about it)
Rewriter = Callable[[str], tuple[Query, dict[str, Any]]]


@dataclass(frozen=True)
class ResolvedQuery:
    case: Case
    source: str  # where the logical form came from
    negations: int
    rewrite: dict[str, Any] | None = None


@dataclass(frozen=True)
class EvalResult:
    dataset: str
    metrics: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]]
    queries: dict[str, dict[str, Any]]
    by_negations: dict[str, dict[str, float]]
    config: dict[str, Any]
    timings: dict[str, float]
    # What loading the corpus into a cluster index did; None in process.
    index_sync: IndexSync | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "config": self.config,
            "metrics": self.metrics,
            "by_negations": self.by_negations,
            "timings": self.timings,
            "queries": self.queries,
            "per_query": self.per_query,
        }


def rewriter_for(method: str, llm_config: Any = None) -> Rewriter | None:
    """A function question -> logical query, from itlr.rewrite; None for --rewrite none."""
    if method not in REWRITES:
        raise ConfigurationError(f"unknown `rewrite` {method!r}: choose none, rules or llm")
    if method == "none":
        return None
    try:
        from itlr.rewrite import rewrite_for_search
    except ImportError:
        raise ConfigurationError(
            f'`rewrite="{method}"` needs itlr.rewrite, which this installation lacks: '
            'use `rewrite="none"` (queries are then parsed as logical queries)'
        ) from None

    def rewrite(text: str) -> tuple[Query, dict[str, Any]]:
        result = rewrite_for_search(text, method, llm_config)
        info = {
            "method": result.method,
            "fallback": result.fallback,
            "warnings": list(result.warnings),
        }
        return result.query, info

    return rewrite


def resolve(query: EvalQuery, rewriter: Rewriter | None) -> ResolvedQuery:
    """The logical form to evaluate: rewritten, given in the dataset, or the text parsed."""
    info = None
    if rewriter is not None:
        logical, info = rewriter(query.text)
        source = "rewrite"
    elif query.logical:
        logical, source = parse(query.logical), "dataset"
    else:
        try:
            logical, source = parse(query.text), "parsed text"
        except QuerySyntaxError:
            # Natural-language text need not be a valid logical query: then it is one term.
            logical, source = Query(Term(query.text.strip() or query.text)), "text as one term"
    negations = sum(isinstance(node, Not) for node in walk(logical.root))
    return ResolvedQuery(Case(query.id, query.text, logical), source, negations, info)


def evaluate_beir(
    dataset: BeirDataset,
    encoder: Encoder,
    methods: Sequence[Method],
    rewriter: Rewriter | None = None,
    depth: int = 1000,
    cache: EmbeddingCache | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    config: dict[str, Any] | None = None,
    engine: EngineRunner | None = None,
) -> EvalResult:
    """Every method on every query, then the metrics.

    With `engine` the corpus is loaded into its index (only the missing documents, with the
    vectors computed here) and the methods the engine can run are run there; the rest, and
    everything without `engine`, are scored in process.
    """
    started = time.perf_counter()
    if engine is not None:
        engine.check_depth(depth)  # before any time goes into encoding
    resolved = [resolve(q, rewriter) for q in dataset.queries]
    cases = [r.case for r in resolved]
    doc_texts = [d.text for d in dataset.corpus]
    texts = doc_texts + [c.text for c in cases] + [t for c in cases for t in c.query.terms]
    cache = cache or EmbeddingCache(encoder)
    todo = cache.missing(texts)
    if on_stage:
        on_stage("embedding", len(todo))
    vectors = cache.encode(texts, on_progress)
    encoded = time.perf_counter()
    corpus = VectorCorpus(tuple(d.id for d in dataset.corpus), vectors[: len(doc_texts)])
    text_vectors = dict(zip(texts[len(doc_texts) :], vectors[len(doc_texts) :], strict=True))

    sync: IndexSync | None = None
    engine_config: dict[str, Any] = {"computed_in_process": [m.name for m in methods]}
    if engine is not None:
        if on_stage:
            on_stage("indexing", len(dataset.corpus))
        sync = engine.sync(dataset.corpus, corpus.vectors, on_progress)
        engine_config = {**engine.describe(methods, depth), "index_sync": sync.to_dict()}
    indexed = time.perf_counter()

    if on_stage:
        on_stage("scoring", len(cases))
    tick = (lambda: on_progress(1)) if on_progress else None
    if engine is not None:
        runs = engine.run(cases, methods, corpus, text_vectors, depth=depth, on_case=tick)
    else:
        runs = run_methods(cases, methods, corpus, text_vectors, depth=depth, on_case=tick)
    evaluations = {
        name: evaluate_run(run, dataset.qrels, dataset.negatives) for name, run in runs.items()
    }
    groups: dict[int, list[str]] = {}
    for r in resolved:
        groups.setdefault(min(r.negations, 3), []).append(r.case.id)
    by_negations = {
        name: {
            f"{n}{'+' if n == 3 else ''} NOT ({len(ids)} queries)": mean(
                e.per_query, "nDCG@10", ids
            )
            or 0.0
            for n, ids in sorted(groups.items())
        }
        for name, e in evaluations.items()
    }
    queries = {
        r.case.id: {
            "text": r.case.text,
            "query": str(r.case.query),
            "source": r.source,
            **({"rewrite": r.rewrite} if r.rewrite is not None else {}),
            "negations": r.negations,
            "relevant": sum(s > 0 for s in dataset.qrels.get(r.case.id, {}).values()),
            "negatives": len(dataset.negatives.get(r.case.id, ())),
        }
        for r in resolved
    }
    finished = time.perf_counter()
    return EvalResult(
        dataset=str(dataset.path),
        metrics={name: e.metrics for name, e in evaluations.items()},
        per_query={name: e.per_query for name, e in evaluations.items()},
        queries=queries,
        by_negations=by_negations,
        config={
            **(config or {}),
            **engine_config,
            "model": encoder.name,
            "documents": len(dataset.corpus),
            "queries": len(cases),
            "depth": depth,
            "metric_names": list(METRIC_NAMES),
        },
        timings={
            "total_s": finished - started,
            "encode_s": encoded - started,
            "encoded_texts": float(len(todo)),
            "index_s": indexed - encoded,
            "scoring_s": finished - indexed,
        },
        index_sync=sync,
    )


def calibrate_dataset(
    dataset: BeirDataset, encoder: Encoder, cache: EmbeddingCache | None = None, seed: int = 0
) -> SigmoidFit:
    """One global (tau, lambda) for the encoder from the dataset's judgments.

    Each pair is (query text, document): judged relevant = 1; judged non-relevant, explicitly
    negative or a random unjudged document = 0 (see calibration_pairs).
    """
    cache = cache or EmbeddingCache(encoder)
    ids = [d.id for d in dataset.corpus]
    pairs = calibration_pairs(dataset.qrels, dataset.negatives, ids, seed=seed)
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    pairs = [p for p in pairs if p[1] in position]
    texts = {q.id: q.text for q in dataset.queries}
    needed_docs = sorted({position[d] for _, d, _ in pairs})
    doc_vectors = dict(
        zip(needed_docs, cache.encode([dataset.corpus[i].text for i in needed_docs]), strict=True)
    )
    query_ids = sorted({q for q, _, _ in pairs})
    query_vectors = dict(zip(query_ids, cache.encode([texts[q] for q in query_ids]), strict=True))
    cosines = [float(query_vectors[q] @ doc_vectors[position[d]]) for q, d, _ in pairs]
    return fit_sigmoid(cosines, [label for _, _, label in pairs])


def calibrate_hard_filter(
    dataset: BeirDataset,
    encoder: Encoder,
    rewriter: Rewriter | None = None,
    cache: EmbeddingCache | None = None,
) -> float:
    """The hard-filter threshold that keeps HARD_FILTER_KEEP of the dataset's relevant documents
    (see calibration.hard_filter_threshold): each judged question's logical form (rewritten,
    given, or parsed as in `itlr eval`) against its relevant documents."""
    cache = cache or EmbeddingCache(encoder)
    position = {doc.id: i for i, doc in enumerate(dataset.corpus)}
    pairs: list[tuple[str, int]] = []
    for query in dataset.queries:
        excluded = resolve(query, rewriter).case.query.excluded_terms
        relevant = [d for d, score in dataset.qrels.get(query.id, {}).items() if score > 0]
        pairs.extend((term, position[d]) for term in excluded for d in relevant if d in position)
    rows = sorted({row for _, row in pairs})
    doc_vectors = dict(zip(rows, cache.encode([dataset.corpus[r].text for r in rows]), strict=True))
    terms = sorted({term for term, _ in pairs})
    term_vectors = dict(zip(terms, cache.encode(terms), strict=True))
    return hard_filter_threshold([float(term_vectors[t] @ doc_vectors[r]) for t, r in pairs])
