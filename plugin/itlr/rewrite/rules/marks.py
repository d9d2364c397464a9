"""The evidence for a rule rewrite: marks on the question, collected while the terms are made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from itlr.query import Term
from itlr.rewrite.rules.tokens import Tok, span, unquoted, written

MarkKind = Literal["scaffold", "cue", "term", "shared", "kept"]


@dataclass(frozen=True)
class Mark:
    """A piece of the question the rewriter acted on, and what it took it for."""

    kind: MarkKind
    start: int
    end: int
    text: str
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "span": [self.start, self.end],
            "text": self.text,
            "note": self.note,
        }


def explain_marks(marks: tuple[Mark, ...]) -> list[str]:
    """One line per mark, in question order: what was read as what."""
    lines = []
    for mark in sorted(marks, key=lambda m: (m.start, m.end)):
        note = f"  {mark.note}" if mark.note else ""
        lines.append(f"{mark.kind:<8} [{mark.start}:{mark.end}] {mark.text!r}{note}")
    return lines


@dataclass
class Builder:
    """Collects marks while the rewrite runs: the tree is assembled at the end."""

    question: str
    marks: list[Mark] = field(default_factory=list)

    def mark(self, kind: MarkKind, toks: list[Tok], note: str = "") -> None:
        if toks:
            start, end = span(toks)
            self.marks.append(Mark(kind, start, end, self.question[start:end], note))

    def term(self, toks: list[Tok], note: str = "") -> Term:
        self.mark("term", toks, note)
        return Term(unquoted(written(self.question, toks)), span=span(toks))

    def joined(self, parts: list[list[Tok]], own: list[Tok]) -> Term:
        """A term made of the alternative `own` plus shared context around it."""
        self.mark("term", own)
        text = " ".join(written(self.question, p) for p in parts if p)
        return Term(text, span=span(own))
