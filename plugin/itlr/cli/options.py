"""Search options shared by `search`, `translate` and `eval`, and how they become SearchOptions."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from itlr.candidates import DEFAULT_PLAN, PLANS
from itlr.cli.app import AndOp, Mode, NotOp, OrOp, Truth
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions
from itlr.options import search_options as library_search_options
from itlr.scoring import DEFAULT_NOT_STRENGTH

KOpt = Annotated[int, typer.Option("--k", "-k", help="Number of hits.")]
ModeOpt = Annotated[
    Mode,
    typer.Option(
        help="knn: kNN candidates (see --plan), rescored exactly; exact: score every document."
    ),
]
CandidatesOpt = Annotated[
    int | None, typer.Option(help="kNN candidates per positive term (default max(100, 10k)).")
]
# The choices come from the library's own list.
PlanChoice = StrEnum("PlanChoice", {plan.replace("-", "_"): plan for plan in PLANS})  # type: ignore[misc]
DEFAULT_PLAN_CHOICE = PlanChoice(DEFAULT_PLAN)
PlanOpt = Annotated[
    PlanChoice,
    typer.Option(
        help="Which kNN searches gather the candidates: auto (one search with the terms' summed "
        "vector for anchored queries), per-term, per-branch or combined.",
    ),
]
HardFilterOpt = Annotated[
    float | None,
    typer.Option(
        help="Drop documents whose truth for a NOT term at the root's AND is >= THETA. "
        "A NOT under an OR stays fuzzy.",
        metavar="THETA",
    ),
]
AndOpt = Annotated[AndOp, typer.Option("--and", help="AND operator.")]
OrOpt = Annotated[OrOp, typer.Option("--or", help="OR operator.")]
NotOpt = Annotated[NotOp, typer.Option("--not", help="NOT operator.")]
NotStrengthOpt = Annotated[
    float,
    typer.Option(
        help="NOT negates this share of a term's truth value: 1 - s*x. 1 is the paper's NOT; "
        f"the default {DEFAULT_NOT_STRENGTH} suits whole-passage cosines (docs/benchmarks.md).",
        metavar="S",
    ),
]
TruthOpt = Annotated[
    Truth,
    typer.Option(
        help="Map cosine to truth: clamp max(0,cos), shift (1+cos)/2, sigmoid with --tau/--lam, "
        "or calibrated (the sigmoid `itlr calibrate` saved for the model)."
    ),
]
LexicalOpt = Annotated[
    float,
    typer.Option(
        "--lexical-share",
        help="With --truth hybrid: the BM25 share of a positive term's truth (the rest is cosine).",
        metavar="W",
    ),
]
NotEvidenceOpt = Annotated[
    str,
    typer.Option(
        help="With --truth hybrid: what NOT terms judge by: lexical (BM25 alone), cosine, or "
        "mixed (as positive terms).",
    ),
]
TauOpt = Annotated[float, typer.Option(help="Sigmoid centre.")]
LamOpt = Annotated[float, typer.Option(help="Sigmoid steepness.")]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        help='JSON query every hit must match, e.g. \'{"term": {"metadata.lang": "en"}}\'.',
    ),
]
ExcludeLexicalOpt = Annotated[
    bool,
    typer.Option(
        help="Also drop documents whose text contains a root-level NOT term as a phrase "
        "(match_phrase in must_not; OpenSearch/Elasticsearch)."
    ),
]
ExplainOpt = Annotated[
    bool, typer.Option(help="Show each hit's per-term truth values (one round trip).")
]


def parse_filter(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as bad:
        raise ConfigurationError(
            f"--filter is not valid JSON: {bad.msg} at character {bad.pos}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            '--filter must be a JSON object, e.g. \'{"term": {"metadata.lang": "en"}}\''
        )
    return value


def search_options(
    *,
    k: int,
    mode: Mode,
    candidates: int | None,
    hard_filter: float | None,
    and_: AndOp,
    or_: OrOp,
    not_: NotOp,
    not_strength: float,
    truth: Truth,
    tau: float,
    lam: float,
    filter: str | None,
    exclude_lexical: bool,
    explain: bool,
    model: str | None,
    plan: str = DEFAULT_PLAN,
    lexical: float = 0.5,
    not_evidence: str = "lexical",
) -> SearchOptions:
    return library_search_options(
        k=k,
        mode=mode.value,
        candidates=candidates,
        plan=str(plan),
        hard_filter=hard_filter,
        and_=and_.value,
        or_=or_.value,
        not_=not_.value,
        not_strength=not_strength,
        truth=truth.value,
        tau=tau,
        lam=lam,
        lexical=lexical,
        not_evidence=not_evidence,
        filter=parse_filter(filter),
        exclude_lexical=exclude_lexical,
        explain=explain,
        model=model,
    )
