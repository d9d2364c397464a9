"""Natural-language questions -> logical queries, by rules (offline) or by an LLM.

`rewrite("What are the benefits of vitamin D, other than bone health?").canonical` is
`("benefits of vitamin D" AND NOT "bone health")`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from itlr import json_values
from itlr.errors import QuerySyntaxError, RewriteError
from itlr.limits import LIMITS
from itlr.query import Query, parse
from itlr.rewrite.llm import LLMConfig
from itlr.rewrite.rules import Mark, explain_marks, rewrite_rules

if TYPE_CHECKING:
    from itlr.rewrite.llm import LLMRewriter

Method = Literal["rules", "llm"]
Used = Literal["rules", "llm", "query"]
METHODS: tuple[str, ...] = ("rules", "llm")

__all__ = [
    "METHODS",
    "LLMConfig",
    "Mark",
    "RewriteResult",
    "rewrite",
    "rewrite_for_search",
    "rewrite_rules",
]


@dataclass(frozen=True)
class RewriteResult:
    """A rewritten question: the query, who wrote it, and why it looks the way it does."""

    question: str
    query: Query
    method: Used
    fallback: bool = False
    warnings: tuple[str, ...] = ()
    marks: tuple[Mark, ...] = field(default=())
    raw_answer: str | None = None
    cached: bool = False

    @property
    def canonical(self) -> str:
        return str(self.query)

    def explain(self) -> list[str]:
        if self.method == "rules":
            return explain_marks(self.marks)
        if self.method == "llm":
            return [f"llm answer: {self.raw_answer!r}" + (" (cached)" if self.cached else "")]
        return ["used as typed: already a logical query"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            **self.query.to_dict(),
            "method": self.method,
            "fallback": self.fallback,
            "warnings": list(self.warnings),
            "marks": [mark.to_dict() for mark in self.marks],
            "raw_answer": self.raw_answer,
            "cached": self.cached,
        }


def _checked(result: RewriteResult) -> RewriteResult:
    """The rewrite, if what it turned the question into is within the limits."""
    LIMITS.check_tree(result.query.root)
    return result


def _by_rules(
    question: str, warnings: tuple[str, ...] = (), fallback: bool = False
) -> RewriteResult:
    found = rewrite_rules(question)
    return RewriteResult(
        question, found.query, "rules", fallback, (*warnings, *found.query.warnings), found.marks
    )


# One client per configuration: building one per question would redo the connection setup.
# The key is part of the identity: a client keeps the key it was built with.
_REWRITERS: dict[tuple[LLMConfig, str], LLMRewriter] = {}


def _llm_rewriter(config: LLMConfig) -> LLMRewriter:
    from itlr.rewrite.llm import LLMRewriter

    identity = (config, config.api_key())
    rewriter = _REWRITERS.get(identity)
    if rewriter is None:
        rewriter = _REWRITERS[identity] = LLMRewriter(config)
    return rewriter


def rewrite(question: str, method: Method = "rules", llm: LLMConfig | None = None) -> RewriteResult:
    """Rewrite a question; with method="llm", fall back to the rules (flagged) if the LLM fails."""
    if not isinstance(question, str) or not question.strip():
        raise RewriteError("empty question: ask something, e.g. 'vitamin D, other than bones'")
    json_values.check(question, "the question")
    if len(question) > LIMITS.max_query_chars:  # before the rewriter, whose work grows with it
        raise LIMITS.refuse(
            "max_query_chars", len(question), f"the question is {len(question):,} characters long"
        )
    if method == "rules":
        return _checked(_by_rules(question))
    if method != "llm":
        raise RewriteError(f"unknown rewrite method {method!r}: use rules or llm")
    if llm is None:
        raise RewriteError(
            "the llm rewriter needs a model: give `llm_model` (and `llm_base_url` for a "
            "local OpenAI-compatible server)"
        )
    from itlr.rewrite.llm import LLMAnswer

    outcome = _llm_rewriter(llm).rewrite(question)
    if isinstance(outcome, LLMAnswer):
        return _checked(
            RewriteResult(
                question,
                outcome.query,
                "llm",
                warnings=(*outcome.warnings, *outcome.query.warnings),
                raw_answer=outcome.raw,
                cached=outcome.cached,
            )
        )
    warning = f"LLM rewrite failed, used the rule rewriter instead: {outcome.reason}"
    result = _checked(_by_rules(question, (*outcome.warnings, warning), fallback=True))
    return replace(result, raw_answer=outcome.answers[-1] if outcome.answers else None)


# Uppercase operators or quotes: the user already wrote a logical query.
_LOGICAL = re.compile(r'\b(?:AND|OR|NOT)\b|"|&&|\|\|')


def rewrite_for_search(
    text: str, method: str, llm_config: LLMConfig | None = None
) -> RewriteResult:
    """What `itlr search --rewrite METHOD` runs: rewrite unless the text is already logical.

    Text with uppercase AND/OR/NOT or double quotes that parses is used as typed (method "query",
    with a warning), so `--rewrite` is safe to leave on in scripts.
    """
    if method not in METHODS:
        raise RewriteError(f"unknown rewrite method {method!r}: use rules or llm")
    if _LOGICAL.search(text):
        try:
            typed = parse(text)
        except QuerySyntaxError:
            pass
        else:
            return RewriteResult(
                text,
                typed,
                "query",
                warnings=(
                    "already a logical query (operators or quotes): used as typed, not rewritten",
                    *typed.warnings,
                ),
            )
    return rewrite(text, method, llm_config)  # type: ignore[arg-type]
