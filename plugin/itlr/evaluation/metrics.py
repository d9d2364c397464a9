"""Retrieval metrics, computed by ir-measures (pytrec_eval underneath).

Reported names, with what ir-measures calls them:
    nDCG@10       nDCG@10
    MRR@10        RR@10   (renamed to the name the issue and most papers use)
    MAP           AP      (mean over queries of average precision over the whole run)
    R@100         R@100
    NegRecall@10  ir-measures R@10 against the explicit negative judgments taken as the relevant
                  ones: the share of a query's explicit negatives that reach its top 10. Lower
                  is better. Only queries with at least one explicit negative count.

Means are over every judged query: a query a method retrieves nothing for scores 0, where
ir-measures on its own would silently skip it (it only sees queries present in the run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from itlr.extras import missing_extra

try:
    import ir_measures
    from ir_measures import AP, RR, R, nDCG
except ImportError as absent:
    raise missing_extra("eval", absent) from None

Run = Mapping[str, Mapping[str, float]]

MEASURES = {"nDCG@10": nDCG @ 10, "MRR@10": RR @ 10, "MAP": AP, "R@100": R @ 100}
NEG_RECALL = "NegRecall@10"
METRIC_NAMES = (*MEASURES, NEG_RECALL)


@dataclass(frozen=True)
class Evaluation:
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]


def _per_query(
    measures: Iterable[ir_measures.Measure],
    qrels: Mapping[str, Mapping[str, int]],
    run: Run,
    names: Mapping[ir_measures.Measure, str],
) -> dict[str, dict[str, float]]:
    values: dict[str, dict[str, float]] = {}
    judged_run = {q: dict(docs) for q, docs in run.items() if q in qrels and docs}
    if not judged_run:
        return values
    for metric in ir_measures.iter_calc(list(measures), qrels, judged_run):
        values.setdefault(metric.query_id, {})[names[metric.measure]] = float(metric.value)
    return values


def evaluate_run(
    run: Run,
    qrels: Mapping[str, Mapping[str, int]],
    negatives: Mapping[str, Iterable[str]] | None = None,
) -> Evaluation:
    """Per-query and mean metrics of one method's run."""
    by_measure = {measure: name for name, measure in MEASURES.items()}
    qrels = {q: dict(docs) for q, docs in qrels.items()}
    per_query = _per_query(MEASURES.values(), qrels, run, by_measure)
    for qid in qrels:
        values = per_query.setdefault(qid, {})
        for name in MEASURES:
            values.setdefault(name, 0.0)

    negative_qrels = {q: {d: 1 for d in docs} for q, docs in (negatives or {}).items() if docs}
    negative_qrels = {q: docs for q, docs in negative_qrels.items() if q in qrels}
    if negative_qrels:
        found = _per_query([R @ 10], negative_qrels, run, {R @ 10: NEG_RECALL})
        for qid in negative_qrels:
            per_query[qid][NEG_RECALL] = found.get(qid, {}).get(NEG_RECALL, 0.0)

    per_query = {
        q: {n: values[n] for n in METRIC_NAMES if n in values} for q, values in per_query.items()
    }
    metrics = {name: mean(per_query, name) for name in METRIC_NAMES}
    return Evaluation({k: v for k, v in metrics.items() if v is not None}, per_query)


def mean(
    per_query: Mapping[str, Mapping[str, float]],
    name: str,
    queries: Iterable[str] | None = None,
) -> float | None:
    """The mean of one metric over the given queries (all by default) that have it."""
    chosen = per_query if queries is None else queries
    values = [per_query[q][name] for q in chosen if name in per_query.get(q, {})]
    return sum(values) / len(values) if values else None
