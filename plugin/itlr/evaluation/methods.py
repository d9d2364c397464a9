"""The retrieval methods compared in one table: same run, same model, same vectors.

Every method scores the documents of one query from two cosine matrices computed once per query:
the documents against each distinct term of the logical query (query.terms order) and against
the whole query text. A score of -inf means "not retrieved".

dense            cosine to the whole query text embedded as one vector (the paper's Base).
itlr             fuzzy composition: itlr.composition.compose (truth map, program, clamp at 0),
                 which is exactly what the embedded engine's exact mode computes, with the
                 search defaults (SEARCH_OPERATORS: NOT at half strength).
itlr-paper       itlr with the paper's operators (NOT = 1 - x), for reproduction.
itlr-hard        itlr with the hard filter (itlr.hard_filter) at its default rule, relative: a
                 document is dropped for a root-level NOT term whose cosine is >= theta and
                 above the document's best positive cosine.
itlr-hard-absolute  itlr with the absolute hard filter: dropped when that cosine is >= theta.
itlr-calibrated  itlr with sigmoid truth values: per-term (tau, lambda) in the synthetic benchmark,
                 the model's saved global pair (`itlr calibrate`) on a BEIR folder.
setops           the BoolQuestions decomposition baseline, defined in SetOps below.
random           seeded random scores: the floor a method must beat.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from itlr.calibrations import BUNDLED_HARD_FILTER
from itlr.composition import compose
from itlr.errors import ConfigurationError
from itlr.hard_filter import DEFAULT_HARD_FILTER_RULE, HardFilter, HardFilterRule
from itlr.lexical import LexicalCorpus
from itlr.query import And, Node, Not, Or, Query, Term
from itlr.scoring import PAPER_OPERATORS, SEARCH_OPERATORS, Operators, TruthMap

METHOD_NAMES = (
    "dense",
    "itlr",
    "itlr-hard",
    "itlr-hard-absolute",
    "setops",
    "itlr-calibrated",
    "itlr-paper",
    "random",
)


@dataclass(frozen=True)
class Case:
    """One query to evaluate: the text dense embeds and the logical query the others run."""

    id: str
    text: str
    query: Query
    rows: tuple[int, ...] | None = None  # its own small corpus (synthetic); None = every document


class Method(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        """One float per document, -inf for documents the method does not retrieve."""
        ...


@dataclass(frozen=True)
class Dense:
    name: str = "dense"

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        return np.asarray(text_cosines, dtype=np.float64)


@dataclass(frozen=True)
class Logical:
    """Fuzzy logical scoring, optionally with the hard filter on root-level NOT terms. Hybrid
    truths read the passages' tokens from `lexical_corpus` (rows in corpus order; statistics over all
    of them, as an index holding the whole corpus would count them)."""

    name: str = "itlr"
    ops: Operators = SEARCH_OPERATORS
    truth: TruthMap = field(default_factory=TruthMap)
    hard_filter: float | None = None
    lexical_corpus: LexicalCorpus | None = field(default=None, compare=False, repr=False)
    hard_filter_rule: HardFilterRule = DEFAULT_HARD_FILTER_RULE

    @property
    def hard(self) -> HardFilter | None:
        if self.hard_filter is None:
            return None
        return HardFilter(self.hard_filter, self.hard_filter_rule)

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        lexical_truths = None
        if self.truth.uses_lexical:
            if self.lexical_corpus is None:
                raise ConfigurationError("hybrid truth values need the passages' text")
            rows = case.rows if case.rows is not None else np.arange(len(self.lexical_corpus))
            lexical_truths = self.lexical_corpus.matrix(
                rows, case.query.terms, self.lexical_corpus.full_stats
            )
        composed = compose(
            case.query, term_cosines, self.ops, self.truth, self.hard, lexical_truths
        )
        scores = np.asarray(composed.scores, dtype=np.float64)
        scores[~composed.kept] = -np.inf
        return scores


@dataclass(frozen=True)
class SetOps:
    """BoolQuestions' "Boolean operation on decomposed query" baseline.

    Each term retrieves its top `depth` documents by cosine (default 2k, k the evaluation cutoff
    of 10). The query tree then combines (set, score) pairs, every score being defined on all
    documents so that a subtraction is always possible:
        term   (top-depth set of the term, cosine)
        AND    intersection of the sets, sum of the scores
        OR     union of the sets, max of the scores
        NOT    complement of the set, negated score; under an AND this is the set difference
               with the excluded term's cosine subtracted: A AND NOT B = top(A) minus top(B),
               scored cos(A) - cos(B)
    Only documents in the final set are retrieved, ranked by score. On the synthetic benchmark's
    corpora of at most six documents top-2k would be every document and every NOT would be empty,
    so there the depth is a share of the corpus instead (`share`, 0.5 in `itlr bench synthetic`:
    about the share of a query's documents that cover any one of its terms).
    """

    name: str = "setops"
    depth: int = 20
    share: float | None = None

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        cosines = np.asarray(term_cosines, dtype=np.float64)
        count = cosines.shape[0]
        depth = math.ceil(self.share * count) if self.share is not None else self.depth
        depth = max(1, min(depth, count))
        top = np.zeros_like(cosines, dtype=bool)
        if count:
            # Stable sort: on equal cosines the earlier document wins, reproducibly.
            order = np.argsort(-cosines, axis=0, kind="stable")[:depth]
            np.put_along_axis(top, order, True, axis=0)
        terms = case.query.terms
        members, scores = _setops(case.query.root, cosines, top, terms)
        return np.where(members, scores, -np.inf)


def _setops(
    node: Node, cosines: np.ndarray, top: np.ndarray, terms: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(node, Term):
        column = terms.index(node.text)
        return top[:, column], cosines[:, column] * node.weight
    if isinstance(node, Not):
        members, scores = _setops(node.operand, cosines, top, terms)
        return ~members, -scores
    parts = [_setops(child, cosines, top, terms) for child in node.operands]
    if isinstance(node, And):
        return np.logical_and.reduce([m for m, _ in parts]), np.sum([s for _, s in parts], axis=0)
    assert isinstance(node, Or)
    return np.logical_or.reduce([m for m, _ in parts]), np.max([s for _, s in parts], axis=0)


@dataclass(frozen=True)
class RandomScores:
    name: str = "random"
    seed: int = 0

    def score(self, case: Case, term_cosines: np.ndarray, text_cosines: np.ndarray) -> np.ndarray:
        digest = hashlib.sha256(f"{self.seed}:{case.id}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return rng.random(len(text_cosines))


def build_methods(
    names: list[str],
    ops: Operators | None = None,
    truth: TruthMap | None = None,
    hard_filter: float = BUNDLED_HARD_FILTER,
    hard_filter_rule: HardFilterRule = DEFAULT_HARD_FILTER_RULE,
    calibrated: TruthMap | None = None,
    setops_depth: int = 20,
    setops_share: float | None = None,
    lexical_corpus: LexicalCorpus | None = None,
) -> list[Method]:
    """Methods by name, all sharing the operator family and truth mapping given (and for
    hybrid truths the corpus' tokens, rows in corpus order). `hard_filter_rule` is itlr-hard's;
    itlr-hard-absolute is always absolute."""
    ops = ops or SEARCH_OPERATORS
    truth = truth or TruthMap()
    unknown = [n for n in names if n not in METHOD_NAMES]
    if unknown:
        raise ConfigurationError(
            f"unknown method(s) {unknown}: choose from {', '.join(METHOD_NAMES)}"
        )
    if "itlr-calibrated" in names and calibrated is None:
        raise ConfigurationError(
            "itlr-calibrated needs a calibration for the model: run `itlr calibrate DATASET` first"
        )
    made: dict[str, Method] = {
        "dense": Dense(),
        "itlr": Logical("itlr", ops, truth, lexical_corpus=lexical_corpus),
        "itlr-hard": Logical(
            "itlr-hard", ops, truth, hard_filter, lexical_corpus, hard_filter_rule=hard_filter_rule
        ),
        "itlr-hard-absolute": Logical(
            "itlr-hard-absolute",
            ops,
            truth,
            hard_filter,
            lexical_corpus,
            hard_filter_rule="absolute",
        ),
        "itlr-paper": Logical("itlr-paper", PAPER_OPERATORS, truth, lexical_corpus=lexical_corpus),
        "setops": SetOps(depth=setops_depth, share=setops_share),
        "random": RandomScores(),
    }
    if calibrated is not None:
        made["itlr-calibrated"] = Logical("itlr-calibrated", ops, calibrated)
    return [made[n] for n in dict.fromkeys(names)]


def parse_method_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigurationError(
            f"`methods` lists no method: choose from {', '.join(METHOD_NAMES)}"
        )
    return names
