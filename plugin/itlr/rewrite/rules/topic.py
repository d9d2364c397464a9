"""The topic: what a question asks about once its scaffolding and exclusions are gone.

The topic is split on "or" / "and/or" into alternatives, or on "and" into conjuncts, and the
shared context is distributed so every term stands on its own. Whatever is not clearly a list
(a comparison, a question sentence, a long question, a fixed expression) stays one term.
"""

from __future__ import annotations

from itlr.query import And, Node, Or
from itlr.rewrite.rules.marks import Builder
from itlr.rewrite.rules.tokens import (
    SENTENCE_END,
    Tok,
    is_binomial,
    span,
    split_on_commas,
    strip_determiner,
    strip_edges,
)
from itlr.rewrite.rules.words import (
    AUXILIARIES,
    BOUNDARY,
    CONNECTIVES,
    DETERMINERS,
    GUARD_WORDS,
    OR_WORDS,
    POSSESSIVES,
    RELATIVE,
    SCAFFOLD,
    VERBS,
    WH_WORDS,
)

# Past this many words a topic is a question to embed whole, not a list to split.
_LONG_TOPIC = 16


def drop_scaffold(b: Builder, toks: list[Tok]) -> list[Tok]:
    toks = strip_edges(toks)
    if not toks:
        return toks
    base = toks[0].start
    match = SCAFFOLD.match(b.question[base : toks[-1].end])
    if match:
        cut = base + match.end()
        dropped = [t for t in toks if t.end <= cut]
        rest = [t for t in toks if t.start >= cut]
        if rest:
            b.mark("scaffold", dropped, "question words, not part of the topic")
            toks = rest
    stripped = strip_determiner(toks)
    if len(stripped) < len(toks):
        b.mark("scaffold", toks[:1], "leading article")
    return stripped


def topic_of(b: Builder, toks: list[Tok]) -> Node | None:
    """The positive part: one term, or alternatives / conjuncts with shared context."""
    toks = strip_edges(toks)
    while toks and toks[-1].low in CONNECTIVES:
        # "Introduce X, but" once "do not mention Y" is gone.
        toks = strip_edges(toks[:-1])
    if not toks:
        return None
    whole = strip_determiner(toks)
    if _is_long(toks):
        b.mark("kept", toks, "a long question is embedded whole, not cut into fragments")
        return b.term(whole, "one topic")
    if _guarded(b, toks):
        return b.term(whole, "one topic")
    if toks[0].low in WH_WORDS:
        # "How does X affect Y, especially A and B": a question sentence, not a list.
        b.mark("kept", toks[:1], "a question sentence is one topic: not split")
        return b.term(whole, "one topic")
    kind, positions = _coordinators(b, toks)
    if not positions:
        return b.term(whole, "topic, kept as one phrase")

    # "either X or Y" / "both X and Y": the marker opens the first alternative.
    opener = {"or": "either", "and": "both"}[kind]
    open_at = next((i for i, t in enumerate(toks[: positions[0]]) if t.low == opener), None)

    # Segments: the text between coordinators, with list commas as separators too.
    segments: list[list[Tok]] = []
    cut = 0
    for pos in positions:
        segments.append(toks[cut:pos])
        cut = pos + 1
    segments.append(toks[cut:])
    head, *rest = segments
    items: list[list[Tok]] = []
    pieces = split_on_commas(head)
    head, middle = pieces[0], pieces[1:]
    for segment in [*middle, *rest]:
        items.extend(split_on_commas(segment))
    items = [item for item in (strip_edges(i) for i in items) if item]
    head = strip_edges(head)
    if not head or not items:
        return b.term(whole, "topic, kept as one phrase")

    prefix: list[Tok] = []
    if open_at is not None:
        prefix, head = head[:open_at], head[open_at + 1 :]
        if not head:
            return b.term(whole, "topic, kept as one phrase")
        b.mark("cue", [toks[open_at]], f"{kind.upper()}: opens the first alternative")
    ref = items[0]

    suffix: list[Tok] = []
    if not prefix and len(head) == 1 and len(items) == 1 and len(ref) >= 2:
        if kind == "and":
            # "Mac and cheese recipes", "Peace and conflict studies": premodifiers naming
            # one thing.
            b.mark("kept", toks, "'and' between premodifiers names one thing: not split")
            return b.term(whole, "one topic")
        # "Italian or French wine regions": the right side's head noun is shared.
        suffix, items = ref[1:], [ref[:1]]
        b.mark("shared", suffix, "shared by every alternative")
    elif not prefix:
        start = _tail(head, ref)
        prefix, head = head[:start], head[start:]
    if kind == "and" and open_at is None and len(head) == 1 and all(len(i) == 1 for i in items):
        b.mark("kept", toks, "single words joined by 'and' name one thing: not split")
        return b.term(whole, "one topic")

    for pos in positions:
        b.mark("cue", [toks[pos]], f"{kind.upper()}: alternatives" if kind == "or" else "AND")
    if prefix:
        b.mark("shared", prefix, "shared by every alternative")
    prefix = strip_determiner(prefix) if prefix else prefix
    terms = []
    for own in [head, *items]:
        own_text = own if prefix else strip_determiner(own)
        terms.append(b.joined([prefix, own_text, suffix], own))
    return (Or if kind == "or" else And)(tuple(terms), span=span(toks))


def _is_long(toks: list[Tok]) -> bool:
    """Several sentences, or more words than a list of short alternatives would have."""
    words = sum(any(c.isalnum() for c in t.low) for t in toks)
    return words > _LONG_TOPIC or any(t.low in SENTENCE_END for t in toks[:-1])


def _guarded(b: Builder, toks: list[Tok]) -> bool:
    guard = next((t for t in toks if t.low in GUARD_WORDS), None)
    if guard is not None:
        b.mark("kept", [guard], "a comparison is one topic: not split")
        return True
    if toks and toks[0].low in AUXILIARIES and any(t.low in OR_WORDS for t in toks):
        b.mark("kept", toks[:1], "a yes/no or choice question is one topic: not split")
        return True
    return False


def _coordinators(b: Builder, toks: list[Tok]) -> tuple[str, list[int]]:
    """The operator and the positions of the words that coordinate the topic's parts."""
    ors = [i for i, t in enumerate(toks) if t.low in OR_WORDS and 0 < i < len(toks) - 1]
    if ors:
        return "or", ors
    ands = []
    for i, tok in enumerate(toks):
        if tok.low in {"and", "&"} and 0 < i < len(toks) - 1:
            if toks[i + 1].low in POSSESSIVES:
                # "the history of X and its impact on Y": "its" leans on X, one topic.
                b.mark("kept", toks[i : i + 2], "refers back to what precedes: not split")
            elif is_binomial(toks, i):
                b.mark("kept", toks[i - 1 : i + 2], "fixed expression, not split")
            else:
                ands.append(i)
    return "and", ands


def _tail(first: list[Tok], ref: list[Tok]) -> int:
    """Where the first alternative starts inside the first segment (the rest is shared)."""
    if ref and ref[0].low in VERBS:
        # A second predicate: share everything up to the relative pronoun.
        rel = max((i for i, t in enumerate(first) if t.low in RELATIVE), default=-1)
        return rel + 1
    if any(t.low in BOUNDARY for t in ref):
        # The next alternative is a whole phrase ("trains to Porto"): nothing is shared.
        return 0
    start = max((i + 1 for i, t in enumerate(first) if t.low in BOUNDARY), default=0)
    if len(first) - start > len(ref):
        start = len(first) - len(ref)
        # "the US or Canada": the article goes with the alternative, not the shared part.
        while start > 0 and first[start - 1].low in DETERMINERS:
            start -= 1
    return start
