"""Sigmoid calibration of cosine similarities (paper appendix E).

A term's truth value becomes 1 / (1 + exp(-(cos - tau) * lam)). (tau, lam) come from a logistic
regression of "is this document about the term" on the cosine, fitted on labelled pairs: per term
from the topic bank in the synthetic benchmark, or one global pair per model from a labelled BEIR
folder (`itlr calibrate`), saved as $ITLR_HOME/calibration/<model>.json for later searches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from itlr.calibrations import calibration_path, display_name
from itlr.errors import ConfigurationError
from itlr.scoring import TruthMap

# The hard filter's threshold keeps this share of the judged relevant documents: on judged
# questions with exclusions, it is this quantile of the relevant documents' truth values for the
# excluded terms. A document the filter drops is lost for good, one a soft NOT demotes is not.
HARD_FILTER_KEEP = 0.99

# Inverse strength of the L2 penalty on the standardised slope, as in scikit-learn's default
# LogisticRegression(C=1): it keeps lambda finite when positives and negatives separate perfectly,
# which they often do for 20 + 20 clean documents.
PENALTY_C = 1.0


@dataclass(frozen=True)
class SigmoidFit:
    tau: float
    lam: float
    positives: int
    negatives: int

    def truth_map(self) -> TruthMap:
        return TruthMap("sigmoid", self.tau, self.lam)


def fit_sigmoid(
    cosines: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray
) -> SigmoidFit:
    """Fit tau and lambda by penalised logistic regression (Newton's method)."""
    x = np.asarray(cosines, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    positives, negatives = int((y > 0).sum()), int((y <= 0).sum())
    if x.shape != y.shape or not positives or not negatives:
        raise ConfigurationError(
            f"calibration needs positive and negative examples, got {positives} positive and "
            f"{negatives} negative"
        )
    y = (y > 0).astype(np.float64)
    centre, spread = float(x.mean()), float(x.std()) or 1.0
    z = (x - centre) / spread
    design = np.column_stack([z, np.ones_like(z)])
    weights = np.zeros(2)
    penalty = np.diag([1.0 / PENALTY_C, 0.0])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (p - y) + penalty @ weights
        hessian = design.T @ (design * (p * (1.0 - p))[:, None]) + penalty + 1e-9 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.abs(step).max() < 1e-10:
            break
    slope, intercept = weights
    if slope <= 1e-6:
        raise ConfigurationError(
            "calibration failed: the positive examples are not more similar than the negatives"
        )
    # slope * (cos - centre) / spread + intercept == lam * (cos - tau)
    lam = slope / spread
    tau = centre - intercept * spread / slope
    return SigmoidFit(float(tau), float(lam), positives, negatives)


def hard_filter_threshold(relevant_truths: Sequence[float]) -> float:
    """The threshold that keeps HARD_FILTER_KEEP of the relevant documents: the quantile of
    their (clamped) truth values for the terms their questions exclude."""
    values = np.clip(np.asarray(relevant_truths, dtype=np.float64), 0.0, 1.0)
    if values.size == 0:
        raise ConfigurationError(
            "no judged question excludes anything: a hard-filter threshold needs questions with "
            'a NOT (rewrite them first: `rewrite="rules"`)'
        )
    return float(np.quantile(values, HARD_FILTER_KEEP))


def save_calibration(
    model: str | None, fit: SigmoidFit, source: str = "", hard_filter: float | None = None
) -> Path:
    path = calibration_path(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "model": display_name(model),
        **fit.truth_map().to_dict(),
        **({"hard_filter": hard_filter} if hard_filter is not None else {}),
        "positives": fit.positives,
        "negatives": fit.negatives,
        "source": source,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return path


def calibration_pairs(
    qrels: dict[str, dict[str, int]],
    negatives: dict[str, frozenset[str]],
    corpus_ids: Sequence[str],
    seed: int = 0,
    max_positives: int = 5000,
) -> list[tuple[str, str, int]]:
    """(query id, doc id, label) pairs from judgments.

    Positives are judged relevant documents. Negatives are documents judged non-relevant (score
    0) or explicitly negative, topped up with random unjudged documents, assumed non-relevant, until
    there are as many negatives as positives.
    """
    rng = random.Random(seed)
    pairs: list[tuple[str, str, int]] = []
    judged_negative: list[tuple[str, str, int]] = []
    for qid in sorted(qrels):
        for docid, score in sorted(qrels[qid].items()):
            (pairs if score > 0 else judged_negative).append((qid, docid, int(score > 0)))
        judged_negative.extend((qid, d, 0) for d in sorted(negatives.get(qid, ())))
    rng.shuffle(pairs)
    pairs = pairs[:max_positives]
    rng.shuffle(judged_negative)
    chosen = judged_negative[: len(pairs)]
    queries = sorted({q for q, _, _ in pairs})
    attempts = 0
    while len(chosen) < len(pairs) and corpus_ids and attempts < 20 * len(pairs):
        attempts += 1
        qid, docid = rng.choice(queries), rng.choice(corpus_ids)
        if docid not in qrels.get(qid, {}):
            chosen.append((qid, docid, 0))
    return pairs + chosen
