"""`itlr bench synthetic`: Table 1, Table 2 and Figure 3 of the paper, in one run."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from itlr.calibrations import BUNDLED_HARD_FILTER
from itlr.evaluation.cache import EmbeddingCache, Encoder
from itlr.evaluation.calibration import fit_sigmoid
from itlr.evaluation.methods import (
    Case,
    Dense,
    Logical,
    Method,
    RandomScores,
    SetOps,
)
from itlr.evaluation.metrics import Evaluation, evaluate_run, mean
from itlr.evaluation.runner import VectorCorpus, run_methods
from itlr.evaluation.synthetic import (
    CHAIN_LENGTHS,
    SyntheticQuery,
    TopicBank,
    calibration_docs,
    chain_queries,
    template_queries,
)
from itlr.lexical import LexicalCorpus
from itlr.scoring import PAPER_OPERATORS, Operators, TruthMap

# The paper's truth values: the tables reproduce its method (cosine only), while the
# "itlr-default" row scores with the shipped defaults (hybrid truths over the whole corpus).
PAPER_TRUTH = TruthMap("clamp")

NEGATIONS = (0, 1, 2, 3)
TABLE1_METHODS = (
    "dense",
    "itlr",
    "itlr-default",
    "itlr-paper",
    "itlr-calibrated",
    "setops",
    "itlr-hard",
    "random",
)
GRID_AND = ("product", "sum", "min")
GRID_OR = ("sum", "max")
GRID_NOT = ("complement", "reciprocal")
METRIC = "nDCG@10"


def grid_name(and_: str, or_: str, not_: str) -> str:
    return f"itlr[{and_}/{or_}/{not_}]"


@dataclass(frozen=True)
class SyntheticReport:
    config: dict[str, Any]
    table1: dict[str, dict[str, float]]  # method -> {"0".."3", "all"} -> nDCG@10
    table2: dict[str, dict[str, float]]  # "and/or" -> {"complement", "reciprocal"} -> nDCG@10
    figure3: dict[str, dict[str, dict[str, float]]]  # family -> method -> {length} -> nDCG@10
    metrics: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]]
    timings: dict[str, float]
    calibration: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "metrics": self.metrics,
            "table1": self.table1,
            "table2": self.table2,
            "figure3": self.figure3,
            "calibration": self.calibration,
            "timings": self.timings,
            "per_query": self.per_query,
        }


def _cases(queries: Sequence[SyntheticQuery], offset: int) -> list[Case]:
    cases, row = [], offset
    for query in queries:
        rows = tuple(range(row, row + len(query.docs)))
        row += len(query.docs)
        cases.append(Case(query.id, query.text, query.query, rows))
    return cases


def _qrels(queries: Sequence[SyntheticQuery]) -> dict[str, dict[str, int]]:
    return {q.id: {d.id: int(d.relevant) for d in q.docs} for q in queries}


def run_synthetic(
    encoder: Encoder,
    per_template: int = 100,
    per_chain: int | None = None,
    seed: int = 0,
    hard_filter: float = BUNDLED_HARD_FILTER,
    bank: TopicBank | None = None,
    calibration_per_side: int = 20,
    cache: EmbeddingCache | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> SyntheticReport:
    """Generate, embed (through the cache), score and evaluate the whole synthetic benchmark.

    on_stage(name, total) announces a stage; on_progress(n) advances it by n.
    """
    started = time.perf_counter()
    bank = bank or TopicBank.load(seed=seed)
    per_chain = per_template if per_chain is None else per_chain
    queries = list(template_queries(bank, per_template, seed))
    chains = list(chain_queries(bank, per_chain, seed))
    calibration = {
        t.name: calibration_docs(bank, t, seed, calibration_per_side) for t in bank.topics
    }

    docs = [d for q in (*queries, *chains) for d in q.docs]
    texts = [d.text for d in docs]
    texts += [t.name for t in bank.topics]
    texts += [q.text for q in (*queries, *chains)]
    texts += [d.text for group in calibration.values() for d in group]
    cache = cache or EmbeddingCache(encoder)
    todo = cache.missing(texts)
    if on_stage:
        on_stage("embedding", len(todo))
    encode_started = time.perf_counter()
    vectors = cache.encode(texts, on_progress)
    encode_seconds = time.perf_counter() - encode_started
    vector_of = dict(zip(texts, vectors, strict=True))

    scoring_started = time.perf_counter()
    per_term: dict[str, tuple[float, float]] = {}
    for topic in bank.topics:
        group = calibration[topic.name]
        cosines = np.stack([vector_of[d.text] for d in group]) @ vector_of[topic.name]
        fit = fit_sigmoid(cosines, [d.about for d in group])
        per_term[topic.name] = (fit.tau, fit.lam)
    calibrated = TruthMap("sigmoid", per_term=per_term)

    corpus = VectorCorpus(tuple(d.id for d in docs), np.stack([vector_of[d.text] for d in docs]))
    template_cases = _cases(queries, 0)
    chain_cases = _cases(chains, sum(len(q.docs) for q in queries))

    itlr_calibrated = Logical("itlr-calibrated", truth=calibrated)
    itlr = Logical("itlr", truth=PAPER_TRUTH)
    main: list[Method] = [
        Dense(),
        itlr,
        Logical("itlr-default", lexical_corpus=LexicalCorpus([d.text for d in docs])),
        Logical("itlr-paper", PAPER_OPERATORS, PAPER_TRUTH),
        itlr_calibrated,
        SetOps(share=0.5),
        Logical("itlr-hard", truth=PAPER_TRUTH, hard_filter=hard_filter),
        RandomScores(seed=seed),
    ]
    grid: list[Method] = [
        Logical(grid_name(a, o, n), Operators(a, o, n), PAPER_TRUTH)  # type: ignore[arg-type]
        for a in GRID_AND
        for o in GRID_OR
        for n in GRID_NOT
    ]
    if on_stage:
        on_stage("scoring", len(template_cases) + len(chain_cases))
    runs = run_methods(template_cases, main + grid, corpus, vector_of, on_case=_tick(on_progress))
    chain_methods: list[Method] = [Dense(), itlr, itlr_calibrated]
    chain_runs = run_methods(
        chain_cases, chain_methods, corpus, vector_of, on_case=_tick(on_progress)
    )

    template_qrels, chain_qrels = _qrels(queries), _qrels(chains)
    evaluations: dict[str, Evaluation] = {
        name: evaluate_run(run, template_qrels) for name, run in runs.items()
    }
    chain_evaluations = {name: evaluate_run(run, chain_qrels) for name, run in chain_runs.items()}

    by_negations = {n: [q.id for q in queries if q.negations == n] for n in NEGATIONS}
    table1 = {
        name: {
            **{str(n): _mean(evaluations[name], by_negations[n]) for n in NEGATIONS},
            "all": _mean(evaluations[name], None),
        }
        for name in TABLE1_METHODS
    }
    table2 = {
        f"{a}/{o}": {n: _mean(evaluations[grid_name(a, o, n)], None) for n in GRID_NOT}
        for a in GRID_AND
        for o in GRID_OR
    }
    figure3: dict[str, dict[str, dict[str, float]]] = {}
    for family in ("and-chain", "or-chain"):
        figure3[family] = {}
        for name, evaluation in chain_evaluations.items():
            figure3[family][name] = {
                str(length): _mean(
                    evaluation,
                    [q.id for q in chains if q.template == f"{family}-{length}"],
                )
                for length in CHAIN_LENGTHS
            }

    # Per-query values of the 12 grid variants would multiply the file size for little use.
    per_query = {m.name: evaluations[m.name].per_query for m in main}
    for name, evaluation in chain_evaluations.items():
        per_query[f"{name} (chains)"] = evaluation.per_query
    metrics = {name: e.metrics for name, e in evaluations.items()}
    metrics.update({f"{name} (chains)": e.metrics for name, e in chain_evaluations.items()})
    finished = time.perf_counter()
    return SyntheticReport(
        config={
            "queries_per_template": per_template,
            "queries_per_chain_length": per_chain,
            "templates": 32,
            "template_queries": len(queries),
            "chain_queries": len(chains),
            "documents": len(docs),
            "topics": len(bank.topics),
            "seed": seed,
            "model": encoder.name,
            "hard_filter": hard_filter,
            "calibration_docs_per_side": calibration_per_side,
            "setops_depth": "half of each query's corpus, rounded up",
            "itlr": "product/sum/complement, truth = max(0, cos)",
        },
        table1=table1,
        table2=table2,
        figure3=figure3,
        metrics=metrics,
        per_query=per_query,
        timings={
            "total_s": finished - started,
            "encode_s": encode_seconds,
            "encoded_texts": len(todo),
            "scoring_s": finished - scoring_started,
        },
        calibration={k: {"tau": v[0], "lam": v[1]} for k, v in per_term.items()},
    )


def _mean(evaluation: Evaluation, queries: Sequence[str] | None) -> float:
    value = mean(evaluation.per_query, METRIC, queries)
    return float("nan") if value is None else value


def _tick(on_progress: Callable[[int], None] | None) -> Callable[[], None] | None:
    if on_progress is None:
        return None
    return lambda: on_progress(1)
