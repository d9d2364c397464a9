"""A question as word tokens, each with its place in the question, and back into term text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from itlr.query import Span
from itlr.rewrite.rules.words import (
    ABBREVIATIONS,
    BINOMIALS,
    CONNECTIVES,
    DETERMINERS,
    INITIALS,
)


@dataclass(frozen=True)
class Tok:
    text: str
    start: int
    end: int
    low: str


# Commas between digits belong to the number ("$10,000"); every other comma, bracket and
# sentence mark is its own token so it can act as a boundary.
_TOKEN = re.compile(r"[()?!;:]|,(?!\d)|(?:[^\s(),?!;:]|,(?=\d))+")
END_PUNCT = {"?", "!", ".", ";", ":"}
SENTENCE_END = {"?", "!", ".", ";"}
# Never preceded by a space when tokens are joined back into a term.
_CLOSING_PUNCT = {",", "?", "!", ".", ";", ":", ")"}
OPEN_QUOTES = {'"': '"', "“": "”", "‘": "’", "'": "'"}
# Quotes that hold a title together; a single quote is too often an apostrophe.
DOUBLE_QUOTES = {'"', "“"}


def tokens(text: str) -> list[Tok]:
    toks = []
    for m in _TOKEN.finditer(text):
        word, start, end = m.group(0), m.start(), m.end()
        if _ends_sentence(word, text, end):
            # "Portugal." at the end of a sentence: the period is a boundary, not part of a term.
            toks.append(Tok(word[:-1], start, end - 1, word[:-1].lower().replace("’", "'")))
            toks.append(Tok(".", end - 1, end, "."))
        else:
            toks.append(Tok(word, start, end, word.lower().replace("’", "'")))
    return toks


def _ends_sentence(word: str, text: str, end: int) -> bool:
    """A word whose final period closes a sentence, not an abbreviation ("e.g.", "Mrs.")."""
    if len(word) < 2 or not word.endswith(".") or word.endswith(".."):
        return False
    if end < len(text) and not text[end].isspace():
        return False
    bare = word.lower().replace("’", "'")
    return bare not in ABBREVIATIONS and not INITIALS.match(word)


def written(question: str, toks: list[Tok]) -> str:
    """The tokens' words as written; a dropped token in between (a parenthetical) leaves a space."""
    parts = []
    for before, tok in zip([None, *toks], toks, strict=False):
        gap = before is not None and question[before.end : tok.start] != ""
        if gap and tok.low not in _CLOSING_PUNCT:
            parts.append(" ")
        parts.append(tok.text)
    return "".join(parts)


def unquoted(text: str) -> str:
    """'excluding "Hamlet"': quotation marks name a title; the term is the title."""
    quoted = len(text) > 2 and text[0] in OPEN_QUOTES and text[-1] == OPEN_QUOTES[text[0]]
    inner = text[1:-1].strip() if quoted and text[0] not in text[1:-1] else ""
    return inner if any(c.isalnum() for c in inner) else text


def span(toks: list[Tok]) -> Span:
    return (toks[0].start, toks[-1].end) if toks else (0, 0)


def strip_edges(toks: list[Tok]) -> list[Tok]:
    start, end = 0, len(toks)
    while start < end and toks[start].low in {",", ";", ":"}:
        start += 1
    while end > start and (toks[end - 1].low in END_PUNCT or toks[end - 1].low == ","):
        end -= 1
    return toks[start:end]


def strip_determiner(toks: list[Tok]) -> list[Tok]:
    # Keep a lone determiner: "A" on its own is a term, not nothing.
    if len(toks) > 1 and toks[0].low in DETERMINERS:
        return toks[1:]
    return toks


def matches(toks: list[Tok], at: int, words: tuple[str, ...]) -> bool:
    return len(toks) - at >= len(words) and all(toks[at + k].low == w for k, w in enumerate(words))


def split_on_commas(toks: list[Tok]) -> list[list[Tok]]:
    parts: list[list[Tok]] = [[]]
    for tok in toks:
        if tok.low == ",":
            parts.append([])
        else:
            parts[-1].append(tok)
    return [p for p in parts if p] or [[]]


def only_connectives(toks: list[Tok]) -> bool:
    return all(t.low in CONNECTIVES or not any(c.isalnum() for c in t.low) for t in toks)


def is_binomial(toks: list[Tok], at: int) -> bool:
    left, right = toks[at - 1].low, toks[at + 1].low
    two_left = f"{toks[at - 2].low} {left}" if at >= 2 else ""
    return (left, right) in BINOMIALS or (two_left, right) in BINOMIALS
