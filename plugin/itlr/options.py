"""What every engine takes and returns: search options and hits."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from itlr.candidates import DEFAULT_PLAN, PLANS, Plan
from itlr.errors import ConfigurationError
from itlr.scoring import DEFAULT_NOT_STRENGTH, SEARCH_OPERATORS, Operators, TruthMap

Mode = Literal["knn", "exact"]
# The default deepest budget, as a multiple of the first: conjunctions on a 100k corpus of
# repetitive text needed 20x the default to find their exact top 10 (docs/benchmarks.md).
CAP_FACTOR = 20


@dataclass(frozen=True)
class SearchOptions:
    """How to run a logical query.

    mode:        knn gathers candidates with kNN searches (see plan) and rescores their union
                 exactly; exact scores every document.
    candidates:  kNN budget per positive term (default max(100, 10 * k)) of the first round.
    max_candidates: the deepest budget per positive term knn mode may reach (default 20 x
                 candidates): an anchored query deepens its kNN searches in rounds until a bound
                 proves that no document outside the candidates can beat its k-th hit
                 (itlr.certificate); if this depth stops it first, the result says exact: false.
    hard_filter: drop documents whose truth for a root-level NOT term is >= this threshold.
    exclude_lexical: drop documents whose text contains a root-level NOT term as a phrase
                 (OpenSearch / Elasticsearch only).
    plan:        which kNN searches gather the candidates (itlr.candidates): auto (default),
                 per-term, per-branch or combined.
    filter:      an engine query (JSON DSL) that every hit must match.
    explain:     return each hit's per-term truth values (the embedded engine always does).
    from_:       hits to skip before the first one returned (the engines' `from`).
    search_after: the sort values of the last hit of the previous page (clusters only; the
                 engines' `search_after`).
    source_fields: which of a document's own fields to return; None returns every field but the
                 vectors, () none.
    highlight:   return fragments of the text field that match the positive terms' words.
    """

    k: int = 10
    mode: Mode = "knn"
    candidates: int | None = None
    max_candidates: int | None = None
    plan: Plan = DEFAULT_PLAN
    hard_filter: float | None = None
    exclude_lexical: bool = False
    ops: Operators = SEARCH_OPERATORS
    truth: TruthMap = field(default_factory=TruthMap)
    filter: dict[str, Any] | None = None
    explain: bool = False
    from_: int = 0
    search_after: tuple[Any, ...] | None = None
    source_fields: tuple[str, ...] | None = None
    highlight: bool = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigurationError(f"`k` must be at least 1, got {self.k}")
        if self.from_ < 0:
            raise ConfigurationError(f"`from_` must be 0 or more, got {self.from_}")
        if self.search_after is not None and self.from_:
            raise ConfigurationError("give `from_` or `search_after`, not both")
        if self.mode not in ("knn", "exact"):
            raise ConfigurationError(f"unknown `mode` {self.mode!r}: choose knn or exact")
        if self.plan not in PLANS:
            raise ConfigurationError(f"unknown `plan` {self.plan!r}: choose one of {list(PLANS)}")
        if self.candidates is not None and self.candidates < 1:
            raise ConfigurationError(f"`candidates` must be at least 1, got {self.candidates}")
        if self.max_candidates is not None and self.max_candidates < self.candidate_budget:
            raise ConfigurationError(
                f"`max_candidates` ({self.max_candidates}) is below the first round's "
                f"budget ({self.candidate_budget}): raise it or lower `candidates`"
            )
        if self.hard_filter is not None and not 0.0 <= self.hard_filter <= 1.0:
            raise ConfigurationError(
                f"`hard_filter` is a truth threshold in [0, 1], got {self.hard_filter}"
            )

    @property
    def candidate_budget(self) -> int:
        return self.candidates if self.candidates is not None else max(100, 10 * self.k)

    @property
    def candidate_cap(self) -> int:
        """The deepest budget per positive term the certificate's rounds may reach."""
        if self.max_candidates is not None:
            return self.max_candidates
        return CAP_FACTOR * self.candidate_budget

    def candidate_rounds(self, limit: int | None = None) -> list[int]:
        """The budgets per positive term of the rounds: x4 each time, up to the cap."""
        cap = self.candidate_cap if limit is None else min(self.candidate_cap, limit)
        budgets = [min(self.candidate_budget, cap)]
        while budgets[-1] < cap:
            budgets.append(min(cap, budgets[-1] * 4))
        return budgets


def search_options(
    *,
    k: int = 10,
    mode: str = "knn",
    candidates: int | None = None,
    max_candidates: int | None = None,
    plan: str = DEFAULT_PLAN,
    hard_filter: float | None = None,
    and_: str = "product",
    or_: str = "sum",
    not_: str = "complement",
    not_strength: float = DEFAULT_NOT_STRENGTH,
    truth: str = "clamp",
    tau: float = 0.5,
    lam: float = 10.0,
    filter: dict[str, Any] | None = None,
    exclude_lexical: bool = False,
    explain: bool = False,
    from_: int = 0,
    search_after: list[Any] | tuple[Any, ...] | None = None,
    source_fields: list[str] | tuple[str, ...] | None = None,
    highlight: bool = False,
    model: str | None = None,
) -> SearchOptions:
    """SearchOptions from plain names and values: what `itlr search`, the front door and the
    HTTP service accept. `truth="calibrated"` loads the sigmoid `itlr calibrate` saved for
    `model`."""
    for name, value in (("tau", tau), ("lam", lam), ("hard_filter", hard_filter)):
        if value is not None and not math.isfinite(value):
            # A request carrying NaN or Infinity is not JSON any engine accepts.
            raise ConfigurationError(f"`{name}` must be a finite number, not {value}")
    if filter is not None and not isinstance(filter, dict):
        raise ConfigurationError(
            '`filter` must be a JSON object, e.g. {"term": {"metadata.lang": "en"}}'
        )
    return SearchOptions(
        k=k,
        mode=mode,  # type: ignore[arg-type]
        candidates=candidates,
        max_candidates=max_candidates,
        plan=plan,  # type: ignore[arg-type]
        hard_filter=hard_filter,
        ops=Operators(and_, or_, not_, not_strength=not_strength),  # type: ignore[arg-type]
        truth=truth_map(truth, tau, lam, model),
        filter=filter,
        exclude_lexical=exclude_lexical,
        explain=explain,
        from_=from_,
        search_after=tuple(search_after) if search_after is not None else None,
        source_fields=tuple(source_fields) if source_fields is not None else None,
        highlight=highlight,
    )


def truth_map(truth: str, tau: float, lam: float, model: str | None) -> TruthMap:
    if truth != "calibrated":
        return TruthMap(truth, tau, lam)  # type: ignore[arg-type]
    from itlr.evaluation.calibration import load_calibration

    calibrated = load_calibration(model)
    if calibrated is None:
        raise ConfigurationError(
            "no calibration saved for this model: run `itlr calibrate DATASET` first, "
            'or use `truth="sigmoid"` with `tau` and `lam`'
        )
    return calibrated


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    truths: dict[str, float]
    text: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    # Fragments of the text field per field name (options.highlight).
    highlights: dict[str, list[str]] = field(default_factory=dict)
    # How the score was computed, as a tree that adds up to it (options.explain).
    explanation: dict[str, Any] | None = None
    # The sort values a `search_after` continues from (clusters).
    sort: list[Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": self.id,
            "score": self.score,
            "truths": self.truths,
            "text": self.text,
            "fields": self.fields,
        }
        if self.highlights:
            payload["highlights"] = self.highlights
        if self.explanation is not None:
            payload["explanation"] = self.explanation
        if self.sort is not None:
            payload["sort"] = self.sort
        return payload


class Hits(list[Hit]):
    """A backend's ranked hits plus what this one search noticed (a capped budget, a filter on
    a field no document has). A list, so callers that only rank keep working; the Retriever
    carries the warnings into SearchResult, so nothing accumulates on a long-lived backend."""

    def __init__(
        self,
        hits: Iterable[Hit] = (),
        warnings: Iterable[str] = (),
        exact: bool | None = None,
    ) -> None:
        super().__init__(hits)
        self.warnings: tuple[str, ...] = tuple(warnings)
        # True: no document outside the scored ones can beat the k-th hit (exact mode, or knn
        # mode with a certificate); False: the depth cap stopped the proof; None: not asked
        # (a query that is not anchored).
        self.exact = exact
