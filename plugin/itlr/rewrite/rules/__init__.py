"""The offline rule rewriter: a question in, a logical query plus the evidence for it out.

It is a handful of small, explainable heuristics over word tokens, with no model:

1. Scaffolding ("What are the", "Tell me about", "How do I", "?") is dropped, so terms are the
   meaningful phrases of the question.
2. An exclusion cue ("other than", "excluding", "without", "that don't mention", a parenthetical
   "(not X)", ...) splits the question: what comes before is the topic, what follows is a list of
   things to exclude, each becoming a NOT literal at the root AND (which the hard filter can use).
3. The topic is split on "or" / "and/or" into alternatives, or on "and" into conjuncts, and the
   shared context is distributed so every term stands on its own ("side effects of ibuprofen or
   naproxen" -> "side effects of ibuprofen" OR "side effects of naproxen").
4. "and" is split only when the result is plausible: never inside a fixed binomial ("salt and
   pepper"), never in a comparison ("difference between X and Y"), never when both sides are
   single words, and never as premodifiers at the start of a phrase ("Mac and cheese recipes").

Whatever is not detected stays a single term, which is plain dense retrieval.

The steps live in their own modules: words.toml and words.py (what the rules recognise),
tokens.py (the question as tokens), marks.py (the evidence), exclusions.py (step 2) and
topic.py (steps 1, 3 and 4); this module runs them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from itlr.errors import RewriteError
from itlr.query import And, Node, Not, Query
from itlr.rewrite.rules.exclusions import take_exclusions
from itlr.rewrite.rules.marks import Builder, Mark, MarkKind, explain_marks
from itlr.rewrite.rules.tokens import strip_edges, tokens
from itlr.rewrite.rules.topic import drop_scaffold, topic_of

__all__ = ["Mark", "MarkKind", "RuleRewrite", "explain_marks", "rewrite_rules"]


@dataclass(frozen=True)
class RuleRewrite:
    """The rule rewriter's answer: the query, and the marks that explain it."""

    question: str
    query: Query
    marks: tuple[Mark, ...] = field(default=())

    def explain(self) -> list[str]:
        return explain_marks(self.marks)


def rewrite_rules(question: str) -> RuleRewrite:
    """Rewrite a natural-language question into a logical query with explainable rules."""
    b = Builder(question)
    toks = tokens(question)
    if not toks:
        raise RewriteError("empty question: ask something, e.g. 'pancakes without eggs'")
    rest, excluded = take_exclusions(b, strip_edges(toks))
    rest = drop_scaffold(b, rest)
    topic = topic_of(b, rest)
    if topic is None:
        # Nothing positive is left ("Not about cats"): the question is the topic.
        b.marks.clear()
        whole = drop_scaffold(b, toks)
        topic, excluded = b.term(whole or toks, "the whole question is the topic"), []
    if not excluded:
        root: Node = topic
    else:
        positives = topic.operands if isinstance(topic, And) else (topic,)
        root = And((*positives, *(Not(t, span=t.span) for t in excluded)))
    return RuleRewrite(question, Query(root, question), tuple(b.marks))
