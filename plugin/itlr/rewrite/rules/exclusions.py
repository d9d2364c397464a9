"""Exclusions: the cues that say what a question does not want, and the items they exclude.

A cue ("other than", "excluding", "without", "that don't mention", a parenthetical "(not X)", a
leading "Apart from X,", a "non-" prefix) opens a list of things to exclude; the list reaches to
the end of its clause and is split into items, each of which becomes a NOT literal.
"""

from __future__ import annotations

from itlr.query import Term
from itlr.rewrite.rules.marks import Builder
from itlr.rewrite.rules.tokens import (
    DOUBLE_QUOTES,
    OPEN_QUOTES,
    SENTENCE_END,
    Tok,
    is_binomial,
    matches,
    only_connectives,
    strip_edges,
)
from itlr.rewrite.rules.words import (
    AUXILIARIES,
    CLAUSE_JOINERS,
    CLAUSE_OPENERS,
    CUES_BY_FIRST_WORD,
    ITEM_FILLERS,
    ITEM_LEADERS,
    LEADING_EXCLUSION,
    NEGATED_VERB,
    NEGATION_STARTS,
    REFLEXIVES,
    TITLE_GLUE,
    TITLE_OPENERS,
)


def take_exclusions(b: Builder, toks: list[Tok]) -> tuple[list[Tok], list[Term]]:
    """Take exclusions out of the question: (what remains, the excluded terms).

    Each exclusion reaches to the end of its clause (see _scope_end), so a question can hold
    several, and whatever follows one ("..., excluding A? How did B ...") stays positive.
    """
    excluded: list[Term] = []
    toks = _leading_exclusion(b, toks, excluded)
    toks = _parenthetical_exclusions(b, toks, excluded)
    toks = _non_prefixes(b, toks, excluded)
    kept: list[Tok] = []
    while (found := _find_exclusion(toks)) is not None:
        start, end = found
        stop = _scope_end(toks, end)
        b.mark("cue", toks[start:end], "NOT: exclude what follows")
        for item in _split_items(b, strip_edges(toks[end:stop])):
            excluded.append(b.term(item, "excluded"))
        kept.extend(toks[:start])
        toks = toks[stop:]
    return _tidy_commas(kept + toks), excluded


def _tidy_commas(toks: list[Tok]) -> list[Tok]:
    """Drop the commas a removed exclusion leaves dangling: "X, ? How ..." -> "X? How ..."."""
    kept: list[Tok] = []
    for i, tok in enumerate(toks):
        after = toks[i + 1].low if i + 1 < len(toks) else "?"
        if tok.low == "," and (after in SENTENCE_END or after in {",", ")"} or not kept):
            continue
        kept.append(tok)
    return kept


def _non_prefixes(b: Builder, toks: list[Tok], excluded: list[Term]) -> list[Tok]:
    """ "a non Islamic summary", "a non-Islamic summary": NOT "Islamic". Only a capitalised word
    counts, so that "non-profit" or "non linear" stay one word of the topic."""
    kept: list[Tok] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.low == "non" and i + 1 < len(toks) and toks[i + 1].text[:1].isupper():
            b.mark("cue", [tok], "NOT: 'non' excludes the next word")
            excluded.append(b.term([toks[i + 1]], "excluded"))
            i += 2
            continue
        if tok.low.startswith("non-") and tok.text[4:5].isupper():
            start = tok.start + 4
            b.mark("cue", [Tok(tok.text[:4], tok.start, start, "non-")], "NOT: 'non-' prefix")
            word = Tok(tok.text[4:], start, tok.end, tok.low[4:])
            excluded.append(b.term([word], "excluded"))
            i += 1
            continue
        kept.append(tok)
        i += 1
    return kept


def _scope_end(toks: list[Tok], at: int) -> int:
    """Where an exclusion that starts at `at` ends: its sentence, bracket or clause."""
    for i in range(at, len(toks)):
        low = toks[i].low
        if low in SENTENCE_END or low in {"(", ")"}:
            return i
        if low == "," and i + 1 < len(toks):
            after = toks[i + 1].low
            then = toks[i + 2].low if i + 2 < len(toks) else ""
            if after in CLAUSE_OPENERS or (
                after in CLAUSE_JOINERS and (then in CLAUSE_OPENERS or then in AUXILIARIES)
            ):
                return i
    return len(toks)


def _leading_exclusion(b: Builder, toks: list[Tok], excluded: list[Term]) -> list[Tok]:
    """ "Apart from the Louvre, what are the best museums in Paris?" """
    for cue in LEADING_EXCLUSION:
        if matches(toks, 0, cue):
            comma = next((i for i, t in enumerate(toks) if t.low == ","), None)
            if comma is None or comma == len(toks) - 1:
                return toks
            b.mark("cue", toks[: len(cue)], "NOT: exclude what follows")
            for item in _split_items(b, toks[len(cue) : comma]):
                excluded.append(b.term(item, "excluded"))
            return toks[comma + 1 :]
    return toks


def _parenthetical_exclusions(b: Builder, toks: list[Tok], excluded: list[Term]) -> list[Tok]:
    """ "Best budget smartphones (not iPhones)" """
    kept: list[Tok] = []
    i = 0
    while i < len(toks):
        if toks[i].low == "(":
            close = next((j for j in range(i + 1, len(toks)) if toks[j].low == ")"), None)
            inner = toks[i + 1 : close] if close else []
            # "(excluding X)", "(but not X)", and a bare "(not X)" / "(no X)".
            cue_end = (_cue_at(inner, 0) or int(inner[0].low in {"not", "no"})) if inner else 0
            if cue_end and len(inner) > cue_end:
                b.mark("cue", [toks[i], *inner[:cue_end]], "NOT: parenthetical exclusion")
                for item in _split_items(b, inner[cue_end:]):
                    excluded.append(b.term(item, "excluded"))
                i = close + 1  # type: ignore[operator]
                continue
        kept.append(toks[i])
        i += 1
    return kept


def _cue_at(toks: list[Tok], at: int) -> int:
    """Length of the exclusion cue starting at `at`, or 0."""
    first = toks[at].low
    for cue in CUES_BY_FIRST_WORD.get(first, ()):
        if matches(toks, at, cue):
            if first == ",":
                # ", not including X": the longer cue after the comma wins.
                return 1 + (_cue_at(toks, at + 1) or len(cue) - 1)
            return len(cue)
    if first in NEGATION_STARTS:
        for width in (5, 4, 3, 2):
            words = " ".join(t.low for t in toks[at : at + width])
            if len(toks) - at >= width and NEGATED_VERB.match(words):
                return width
    return 0


def _find_exclusion(toks: list[Tok]) -> tuple[int, int] | None:
    """(cue start, cue end) of the first exclusion cue, if any."""
    for i in range(len(toks)):
        # A leading comma cue needs something before it to exclude from.
        width = _cue_at(toks, i) if i > 0 or toks[i].low != "," else 0
        if width:
            return i, i + width
    return None


def _split_items(b: Builder, toks: list[Tok]) -> list[list[Tok]]:
    """Split an exclusion list on commas and conjunctions, keeping binomials and titles whole."""
    items: list[list[Tok]] = [[]]
    quoted_until = -1
    for i, tok in enumerate(toks):
        if i <= quoted_until:
            items[-1].append(tok)
            continue
        if (close := _closing_quote(toks, i)) > i:
            # A quoted title ("North and South") is one item, whatever it holds.
            b.mark("kept", toks[i : close + 1], "quoted, not split")
            quoted_until = close
            items[-1].append(tok)
            continue
        is_and = tok.low == "and"
        if is_and and 0 < i < len(toks) - 1 and is_binomial(toks, i):
            b.mark("kept", [toks[i - 1], tok, toks[i + 1]], "fixed expression, not split")
        elif is_and and 0 < i < len(toks) - 1 and _joins_title(toks, i):
            b.mark("kept", [toks[i - 1], tok, toks[i + 1]], "a title, not split")
        elif tok.low in {",", "or", "nor", "and/or", "&"} or is_and:
            items.append([])
            continue
        items[-1].append(tok)
    cleaned = []
    for item in items:
        item = _strip_fillers(item)
        if item and not only_connectives(item):
            cleaned.append(item)
    return cleaned


def _closing_quote(toks: list[Tok], at: int) -> int:
    """Index of the token closing a double quote opened by toks[at], or -1."""
    opener = toks[at].text[:1]
    if opener not in DOUBLE_QUOTES:
        return -1
    close = OPEN_QUOTES[opener]
    if len(toks[at].text) > 1 and toks[at].text.endswith(close):
        return -1  # "Dune": quoted and closed in one token, nothing to keep together
    for j in range(at + 1, len(toks)):
        if toks[j].low in SENTENCE_END:
            return -1
        if toks[j].text.endswith(close):
            return j
    return -1


def _strip_fillers(item: list[Tok]) -> list[Tok]:
    if len(item) > 1 and item[-1].low in REFLEXIVES:
        item = item[:-1]  # "the trade in silk itself"
    changed = True
    while item and changed:
        changed = False
        while item and item[0].low in ITEM_LEADERS:
            item, changed = item[1:], True
        for filler in ITEM_FILLERS:
            if len(item) > len(filler) and matches(item, 0, filler):
                item, changed = item[len(filler) :], True
                break
    return item


def _joins_title(toks: list[Tok], at: int) -> bool:
    """ "Songs of Innocence and Experience": capitalised words around "and", inside a run of
    capitalised words joined by a lowercase function word. Two bare names ("Midway and
    Guadalcanal") are a list; a two-word title ("Pride and Prejudice") is split like one."""
    left, right = toks[at - 1].text, toks[at + 1].text
    if (
        left[:1].isupper()
        and toks[at + 1].text in TITLE_GLUE
        and at + 2 < len(toks)
        and toks[at + 2].text[:1].isupper()
    ):
        # "The Protestant Ethic and the Spirit of Capitalism": a run of capitalised words
        # continued by "and the Capitalised" is one title; "Denmark and the Netherlands" a list.
        start = at - 1
        while start > 0 and toks[start - 1].text[:1].isupper():
            start -= 1
        return at - 1 - start >= 1
    if not (left[:1].isupper() and right[:1].isupper()):
        return False
    if toks[at + 1].low in TITLE_OPENERS:
        # "Man and His Symbols": mid-sentence, a capitalised "His" / "The" only opens a title's
        # next word; titles that open alike ("The Iliad and The Odyssey") are a list of two.
        start = at - 1
        while start > 0 and toks[start - 1].text[:1].isupper():
            start -= 1
        return toks[start].low != toks[at + 1].low
    start = at - 1
    while start > 0 and (toks[start - 1].text[:1].isupper() or toks[start - 1].low in TITLE_GLUE):
        start -= 1
    inner = toks[start : at - 1]
    return any(t.low in TITLE_GLUE for t in inner) and inner[0].text[:1].isupper()
