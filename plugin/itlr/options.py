"""What every engine takes: search options (what it returns is in itlr.results)."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from itlr import json_values
from itlr.candidates import DEFAULT_PLAN, PLANS, Plan
from itlr.errors import ConfigurationError
from itlr.hard_filter import (
    DEFAULT_HARD_FILTER_RULE,
    HARD_FILTER_RULES,
    HardFilter,
    HardFilterRule,
)
from itlr.limits import LIMITS
from itlr.scoring import (
    DEFAULT_LEXICAL_SHARE,
    DEFAULT_NOT_EVIDENCE,
    DEFAULT_NOT_STRENGTH,
    SEARCH_OPERATORS,
    AndName,
    NotEvidence,
    NotName,
    Operators,
    OrName,
    TruthMap,
    TruthName,
)

Mode = Literal["knn", "exact"]
# The default deepest budget, as a multiple of the first: conjunctions on a 100k corpus of
# repetitive text needed 20x the default to find their exact top 10 (docs/benchmarks.md).
CAP_FACTOR = 20
# The most hits one search may ask for, whatever front end it came through.
MAX_K = 10_000


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
                 The embedded engine past its graph threshold scores every row instead of a
                 second round (allowed when this is above the first round's budget).
    hard_filter: drop documents whose evidence for a root-level NOT term is >= this threshold
                 (itlr.hard_filter; the cosine for hybrid truths, else the truth value) ...
    hard_filter_rule: ... and, with "relative" (the default), above the document's best evidence
                 for a positive term of the query, so a NOT term that repeats what the query
                 asks for cannot drop its answer; "absolute" drops on the threshold alone.
    exclude_lexical: drop documents whose text contains a root-level NOT term as a phrase
                 (OpenSearch / Elasticsearch only).
    plan:        which kNN searches gather the candidates (itlr.candidates): auto (default),
                 per-term, per-branch or combined.
    filter:      an engine query (JSON DSL) that every hit must match.
    explain:     explain each hit's score as a tree that adds up to it (Hit.explanation,
                 itlr.explain); per-term truths come with every embedded hit regardless.
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
    hard_filter_rule: HardFilterRule = DEFAULT_HARD_FILTER_RULE
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
        # Whole numbers in the bounds every front end has (the service's schema, the CLI's
        # flags), for options built in code too: a NaN or a float is no count of hits.
        _whole("k", self.k, 1, MAX_K)
        _whole("from_", self.from_, 0, None)
        for name in ("candidates", "max_candidates"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 1, None)
        if self.search_after is not None and self.from_:
            raise ConfigurationError("give `from_` or `search_after`, not both")
        if self.mode not in ("knn", "exact"):
            raise ConfigurationError(f"unknown `mode` {self.mode!r}: choose knn or exact")
        if self.plan not in PLANS:
            raise ConfigurationError(f"unknown `plan` {self.plan!r}: choose one of {list(PLANS)}")
        if self.max_candidates is not None and self.max_candidates < self.candidate_budget:
            raise ConfigurationError(
                f"`max_candidates` ({self.max_candidates}) is below the first round's "
                f"budget ({self.candidate_budget}): raise it or lower `candidates`"
            )
        if self.hard_filter is not None and not 0.0 <= self.hard_filter <= 1.0:
            raise ConfigurationError(
                f"`hard_filter` is a truth threshold in [0, 1], got {self.hard_filter}"
            )
        if self.hard_filter_rule not in HARD_FILTER_RULES:
            raise ConfigurationError(
                f"unknown `hard_filter_rule` {self.hard_filter_rule!r}: choose one of "
                f"{list(HARD_FILTER_RULES)}"
            )

    @property
    def hard(self) -> HardFilter | None:
        """The hard filter these options ask for (None: off)."""
        if self.hard_filter is None:
            return None
        return HardFilter(self.hard_filter, self.hard_filter_rule)

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


_TRUTH = TruthMap()


def _whole(name: str, value: Any, least: int, most: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigurationError(f"`{name}` must be a whole number, got {value!r}")
    if value < least:
        bound = "0 or more" if least == 0 else f"at least {least}"
        raise ConfigurationError(f"`{name}` must be {bound}, got {value}")
    if most is not None and value > most:
        raise ConfigurationError(f"`{name}` must be at most {most:,}, got {value:,}")


def search_options(
    *,
    k: int = SearchOptions.k,
    mode: str = SearchOptions.mode,
    candidates: int | None = SearchOptions.candidates,
    max_candidates: int | None = SearchOptions.max_candidates,
    plan: str = SearchOptions.plan,
    hard_filter: float | None = SearchOptions.hard_filter,
    hard_filter_rule: str = SearchOptions.hard_filter_rule,
    and_: str = SEARCH_OPERATORS.and_,
    or_: str = SEARCH_OPERATORS.or_,
    not_: str = SEARCH_OPERATORS.not_,
    not_strength: float = SEARCH_OPERATORS.not_strength,
    truth: str = _TRUTH.kind,
    tau: float = _TRUTH.tau,
    lam: float = _TRUTH.lam,
    lexical: float = _TRUTH.lexical,
    not_evidence: str = _TRUTH.not_evidence,
    filter: dict[str, Any] | None = SearchOptions.filter,
    exclude_lexical: bool = SearchOptions.exclude_lexical,
    explain: bool = SearchOptions.explain,
    from_: int = SearchOptions.from_,
    search_after: list[Any] | tuple[Any, ...] | None = SearchOptions.search_after,
    source_fields: list[str] | tuple[str, ...] | None = SearchOptions.source_fields,
    highlight: bool = SearchOptions.highlight,
    model: str | None = None,
) -> SearchOptions:
    """SearchOptions from plain names and values: what `itlr search`, the front door and the
    HTTP service accept. `truth="calibrated"` loads the sigmoid `itlr calibrate` saved for
    `model`. `truth="hybrid"` mixes in lexical evidence: `lexical` is its share of a positive
    term's truth, `not_evidence` what NOT terms use (lexical, cosine, mixed, max: itlr.scoring)."""
    for name, value in (
        ("tau", tau),
        ("lam", lam),
        ("hard_filter", hard_filter),
        ("lexical", lexical),
    ):
        if value is not None and not math.isfinite(value):
            # A request carrying NaN or Infinity is not JSON any engine accepts.
            raise ConfigurationError(f"`{name}` must be a finite number, not {value}")
    if filter is not None and not isinstance(filter, dict):
        raise ConfigurationError(
            '`filter` must be a JSON object, e.g. {"term": {"metadata.lang": "en"}}'
        )
    if search_after is not None and not isinstance(search_after, list | tuple):
        raise ConfigurationError(
            "`search_after` must be a list: the `sort` values of the previous page's last hit"
        )
    if isinstance(source_fields, str) or (
        source_fields is not None and not all(isinstance(f, str) and f for f in source_fields)
    ):
        raise ConfigurationError(
            '`source_fields` must be a list of field names, e.g. ["title", "year"]'
        )
    # Every JSON-valued option is checked where it enters, whichever front end it came from.
    json_values.check(filter, "filter")
    json_values.check(search_after, "search_after")
    json_values.check(source_fields, "source_fields")
    if filter is not None:
        LIMITS.check_filter(filter)
    return SearchOptions(
        k=k,
        mode=mode,  # type: ignore[arg-type]
        candidates=candidates,
        max_candidates=max_candidates,
        plan=plan,  # type: ignore[arg-type]
        hard_filter=hard_filter,
        hard_filter_rule=hard_filter_rule,  # type: ignore[arg-type]
        ops=Operators(and_, or_, not_, not_strength=not_strength),  # type: ignore[arg-type]
        truth=truth_map(truth, tau, lam, model, lexical, not_evidence),
        filter=filter,
        exclude_lexical=exclude_lexical,
        explain=explain,
        from_=from_,
        search_after=tuple(search_after) if search_after is not None else None,
        source_fields=tuple(source_fields) if source_fields is not None else None,
        highlight=highlight,
    )


def truth_map(
    truth: str,
    tau: float,
    lam: float,
    model: str | None,
    lexical: float = DEFAULT_LEXICAL_SHARE,
    not_evidence: str = DEFAULT_NOT_EVIDENCE,
) -> TruthMap:
    if truth != "calibrated":
        return TruthMap(truth, tau, lam, lexical=lexical, not_evidence=not_evidence)  # type: ignore[arg-type]
    from itlr.calibrations import load_calibration

    calibrated = load_calibration(model)
    if calibrated is None:
        raise ConfigurationError(
            "no calibration saved for this model: run `itlr calibrate DATASET` first, "
            'or use `truth="sigmoid"` with `tau` and `lam`'
        )
    return calibrated


OptionKind = Literal["int", "float", "bool", "choice", "object", "list", "fields"]


@dataclass(frozen=True)
class Option:
    """One search option as every front end spells it. The Python name is `search_options`'s
    keyword (and_, from_); `key` is the JSON key and, as --key, the CLI flag. Its default is
    the keyword's default, so it is written once."""

    name: str
    kind: OptionKind
    help: str
    # The SearchOptions field it sets: ops and truth are built from several options.
    field: str
    optional: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    metavar: str | None = None
    # The JSON key and flag when they are not the Python name without its trailing _.
    spelled: str | None = None

    @property
    def key(self) -> str:
        return self.spelled or self.name.rstrip("_")

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def default(self) -> Any:
        return inspect.signature(search_options).parameters[self.name].default


def _option(name: str, kind: OptionKind, help: str, **more: Any) -> Option:
    spelled = more.pop("key", None)
    return Option(name, kind, help, field=more.pop("field", name), spelled=spelled, **more)


OPTIONS: tuple[Option, ...] = (
    _option("k", "int", "Number of hits.", minimum=1, maximum=MAX_K),
    _option(
        "max_candidates",
        "int",
        "The deepest kNN budget per positive term knn mode may reach while proving its top k "
        "exact (default 20 x candidates).",
        optional=True,
        minimum=1,
    ),
    _option(
        "mode",
        "choice",
        "knn: kNN candidates (see plan), rescored exactly; exact: score every document.",
        choices=get_args(Mode),
    ),
    _option(
        "candidates",
        "int",
        "kNN candidates per positive term (default max(100, 10k)).",
        optional=True,
        minimum=1,
    ),
    _option(
        "plan",
        "choice",
        "Which kNN searches gather the candidates: auto (one search with the terms' summed "
        "vector for anchored queries), per-term, per-branch or combined.",
        choices=PLANS,
    ),
    _option(
        "hard_filter",
        "float",
        "Drop documents whose truth for a NOT term at the root's AND is >= THETA (the cosine "
        "for hybrid truths) and, by default, above their best positive term's (see "
        "hard_filter_rule). A NOT under an OR stays fuzzy.",
        optional=True,
        minimum=0.0,
        maximum=1.0,
        metavar="THETA",
    ),
    _option(
        "hard_filter_rule",
        "choice",
        "relative (default): the hard filter drops a document only when its NOT term's "
        "evidence reaches THETA and exceeds its best positive term's, so a NOT that repeats "
        "the query's own subject cannot drop the answer; absolute: on THETA alone.",
        choices=HARD_FILTER_RULES,
    ),
    _option("and_", "choice", "AND operator.", field="ops", choices=get_args(AndName)),
    _option("or_", "choice", "OR operator.", field="ops", choices=get_args(OrName)),
    _option("not_", "choice", "NOT operator.", field="ops", choices=get_args(NotName)),
    _option(
        "not_strength",
        "float",
        "NOT negates this share of a term's truth value: 1 - s*x. 1 is the paper's NOT; the "
        f"default {DEFAULT_NOT_STRENGTH} suits whole-passage cosines (docs/benchmarks.md).",
        field="ops",
        minimum=0.0,
        maximum=1.0,
        metavar="S",
    ),
    _option(
        "truth",
        "choice",
        "Map cosine to truth: hybrid (default: cosine mixed with the passage's BM25 for the "
        "term, see lexical_share / not_evidence), clamp max(0,cos), shift (1+cos)/2, sigmoid "
        "with tau/lam, or calibrated (the sigmoid `itlr calibrate` saved for the model).",
        choices=(*get_args(TruthName), "calibrated"),
    ),
    _option("tau", "float", "Sigmoid centre.", field="truth"),
    _option(
        "lexical",
        "float",
        "With truth hybrid: the BM25 share of a positive term's truth (the rest is cosine).",
        field="truth",
        key="lexical_share",
        metavar="W",
    ),
    _option(
        "not_evidence",
        "choice",
        "With truth hybrid: what NOT terms judge by: lexical (BM25 alone), cosine, mixed "
        "(as positive terms), or max (the larger of cosine and BM25).",
        field="truth",
        choices=get_args(NotEvidence),
    ),
    _option("lam", "float", "Sigmoid steepness.", field="truth"),
    _option(
        "filter",
        "object",
        'An engine query (JSON) every hit must match, e.g. {"term": {"metadata.lang": "en"}}.',
        optional=True,
    ),
    _option(
        "exclude_lexical",
        "bool",
        "Also drop documents whose text contains a root-level NOT term as a phrase "
        "(match_phrase in must_not; OpenSearch/Elasticsearch).",
    ),
    _option(
        "explain",
        "bool",
        "Explain each hit's score: its per-term truth values and how they compose.",
    ),
    _option(
        "from_",
        "int",
        "Hits to skip before the first one returned (paging).",
        minimum=0,
        metavar="N",
    ),
    _option(
        "search_after",
        "list",
        "The `sort` values (JSON list) of the previous page's last hit: the next page (clusters).",
        optional=True,
        metavar="JSON",
    ),
    _option(
        "source_fields",
        "fields",
        "Which of a document's own fields to return (comma-separated; empty: none). "
        "Default: every field but the vectors.",
        optional=True,
        metavar="A,B",
    ),
    _option(
        "highlight",
        "bool",
        "Return fragments of the text field that match the positive terms' words.",
    ),
)
OPTIONS_BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
