"""The hard filter: which documents a root-level NOT term removes from a search, and why.

A NOT term at the root's AND (itlr.query.Query.excluded_terms) may drop a document outright
instead of only lowering its score. What counts as evidence is the term's cosine, clamped to
[0, 1], for hybrid truths (a passage's mention of a word is the lexical exclusion's business,
`exclude_lexical`), and the term's truth value for the other truth maps. Two rules:

relative (the default): a document is dropped for a NOT term only when its evidence reaches
    the threshold AND exceeds the document's best evidence for a positive term of the same
    query: the document is about the excluded thing more than about anything the query asks
    for. A NOT term that repeats the query's own entity ("contributions of Darwin" AND NOT
    "Darwin's theory of evolution", as people and LLMs write them) is about as close to the
    passage asked for as the positive term is, so it cannot remove the answer. A query without
    a positive term has nothing to outweigh: the rule is then the absolute one.
absolute: dropped when the evidence reaches the threshold (`bool.must_not` on the NOT term's
    truth, the filter of earlier releases). On real questions it removed the only relevant
    passage of 2 (rules) and 4 (LLM rewrites) of 99 dev questions, and of 31 of 99 unseen ones
    with an LLM's rewrites (docs/hybrid-truths.md, "The hard filter").

The engines run the same rule: the embedded engine through `HardFilter.kept`, a cluster through
one `script_score` clause in `bool.must_not` (scripts/painless/itlr_exclude.painless) whose
score is `EXCLUDED_SCORE_BASE` plus the largest evidence that beats the positive terms, or 0,
with `min_score` = EXCLUDED_SCORE_BASE + threshold. Lucene's min-score scorer keeps a document
when its (float) score is >= min_score, so the clause matches, and `must_not` drops, exactly the
documents the rule drops; the offset keeps a threshold of 0 meaningful (a score of 0 must not
match it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from itlr.errors import ConfigurationError
from itlr.query import Query
from itlr.scoring import TruthMap

if TYPE_CHECKING:
    from itlr.results import Hit, SearchResult

HardFilterRule = Literal["relative", "absolute"]
HARD_FILTER_RULES: tuple[str, ...] = ("relative", "absolute")
DEFAULT_HARD_FILTER_RULE: HardFilterRule = "relative"
# What the exclusion script adds to the evidence of a document it drops (module docstring).
EXCLUDED_SCORE_BASE = 1.0


@dataclass(frozen=True)
class HardFilter:
    """A threshold on the evidence for root-level NOT terms, and the rule that applies it."""

    threshold: float
    rule: HardFilterRule = DEFAULT_HARD_FILTER_RULE

    def __post_init__(self) -> None:
        if self.rule not in HARD_FILTER_RULES:
            raise ConfigurationError(
                f"unknown hard-filter rule {self.rule!r}: choose one of {list(HARD_FILTER_RULES)}"
            )

    @property
    def relative(self) -> bool:
        return self.rule == "relative"

    def rivals(self, query: Query) -> tuple[str, ...]:
        """The terms whose evidence a NOT term must exceed to drop a document: the positive
        terms under the relative rule, none under the absolute one."""
        return query.positive_terms if self.relative else ()

    @staticmethod
    def evidence(cosines: np.ndarray, truths: np.ndarray, truth: TruthMap) -> np.ndarray:
        """What the filter judges, per document and term: clamped cosines for hybrid truths,
        else the truth values."""
        return np.clip(cosines, 0.0, 1.0) if truth.uses_lexical else np.asarray(truths)

    def kept(self, query: Query, evidence: np.ndarray) -> np.ndarray:
        """Per document (rows of `evidence`, columns in query.terms order): whether it stays."""
        kept = np.ones(len(evidence), dtype=bool)
        excluded = query.excluded_terms
        if not excluded:
            return kept
        best = _best(query, evidence, self.rivals(query))
        for term in excluded:
            column = evidence[:, query.terms.index(term)]
            kept &= ~((column >= self.threshold) & (column > best))
        return kept

    def verdict(self, query: Query, evidence: Sequence[float], kind: str) -> dict[str, Any]:
        """Why one document (its evidence per term, query.terms order) is kept or dropped:
        each NOT term's evidence against the threshold and the best positive term's, and a
        one-line reason. `kind`: what the evidence is ("cosine" or "truth")."""
        values = np.asarray(evidence, dtype=np.float64)[np.newaxis, :]
        rivals = self.rivals(query)
        best = float(_best(query, values, rivals)[0])
        best_term = max(rivals, key=lambda t: values[0, query.terms.index(t)]) if rivals else None
        terms = []
        for term in query.excluded_terms:
            value = float(values[0, query.terms.index(term)])
            reaches = value >= self.threshold
            beats = value > best
            terms.append(
                {
                    "term": term,
                    "value": value,
                    "reaches_threshold": bool(reaches),
                    "above_positive": bool(beats),
                    "drops": bool(reaches and beats),
                }
            )
        dropped = any(t["drops"] for t in terms)
        return {
            "rule": self.rule,
            "threshold": self.threshold,
            "evidence": kind,
            "best_positive": None if best_term is None else {"term": best_term, "value": best},
            "terms": terms,
            "kept": not dropped,
            "reason": _reason(self, terms, best_term, best, kind),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "rule": self.rule}


def _best(query: Query, evidence: np.ndarray, rivals: Sequence[str]) -> np.ndarray:
    """Each document's best evidence for the rival terms; -inf without any (nothing to beat)."""
    if not rivals:
        return np.full(len(evidence), -np.inf)
    columns = [query.terms.index(t) for t in rivals]
    best: np.ndarray = np.max(evidence[:, columns], axis=1)
    return best


def _reason(
    hard: HardFilter,
    terms: Sequence[Mapping[str, Any]],
    best_term: str | None,
    best: float,
    kind: str,
) -> str:
    theta = f"{hard.threshold:g}"
    positive = f'the best positive {kind} {best:.4f} ("{best_term}")'
    dropping = [t for t in terms if t["drops"]]
    if dropping:
        t = dropping[0]
        above = f" and above {positive}" if best_term is not None else ""
        return f'dropped: NOT "{t["term"]}" {kind} {t["value"]:.4f} >= {theta}{above}'
    reaching = [t for t in terms if t["reaches_threshold"]]
    if reaching:
        t = reaching[0]
        return (
            f'kept: NOT "{t["term"]}" {kind} {t["value"]:.4f} >= {theta} but not above {positive}'
        )
    return f"kept: every NOT term's {kind} is below {theta}"


def explained_evidence(
    query: Query, explanation: Mapping[str, Any], truth: TruthMap
) -> tuple[list[float], str] | None:
    """Each term's evidence (query.terms order) read from a hit's explanation tree
    (itlr.explain: a term leaf holds its cosine and its truth), and what it is; None when the
    tree lacks a term."""
    found: dict[str, float] = {}
    kind = "cosine" if truth.uses_lexical else "truth"

    def visit(node: Mapping[str, Any]) -> None:
        info = node.get("itlr") or {}
        if info.get("node") == "term":
            cosine = float(info["inputs"]["cosine"])
            found[info["term"]] = (
                min(1.0, max(0.0, cosine)) if kind == "cosine" else float(node["value"])
            )
        for child in node.get("details") or ():
            visit(child)

    visit(explanation)
    if any(term not in found for term in query.terms):
        return None
    return [found[term] for term in query.terms], kind


def explain_filtering(
    result: SearchResult, unfiltered: Sequence[Hit], hard: HardFilter | None, truth: TruthMap
) -> SearchResult:
    """`result` (a search with explain and the hard filter `hard`) with each hit's verdict and
    the documents the filter dropped: those of `unfiltered` (the same search without the
    filter) missing from the result whose verdict says dropped, best first. A hit without an
    explanation tree has no verdict. Takes the two options it reads, not SearchOptions:
    itlr.options imports this module."""
    if hard is None or not result.query.excluded_terms:
        return result
    query = result.query

    def judged(hit: Hit) -> Hit:
        found = (
            explained_evidence(query, hit.explanation, truth)
            if hit.explanation is not None
            else None
        )
        return hit if found is None else replace(hit, hard_filter=hard.verdict(query, *found))

    kept = {hit.id for hit in result.hits}
    dropped = [judged(hit) for hit in unfiltered if hit.id not in kept]
    return replace(
        result,
        hits=[judged(hit) for hit in result.hits],
        dropped=[h for h in dropped if h.hard_filter is not None and not h.hard_filter["kept"]],
    )


__all__ = [
    "DEFAULT_HARD_FILTER_RULE",
    "EXCLUDED_SCORE_BASE",
    "HARD_FILTER_RULES",
    "HardFilter",
    "HardFilterRule",
    "explain_filtering",
    "explained_evidence",
]
