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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from itlr.errors import RewriteError
from itlr.query import And, Node, Not, Or, Query, Span, Term

MarkKind = Literal["scaffold", "cue", "term", "shared", "kept"]


@dataclass(frozen=True)
class Mark:
    """A piece of the question the rewriter acted on, and what it took it for."""

    kind: MarkKind
    start: int
    end: int
    text: str
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "span": [self.start, self.end],
            "text": self.text,
            "note": self.note,
        }


@dataclass(frozen=True)
class RuleRewrite:
    """The rule rewriter's answer: the query, and the marks that explain it."""

    question: str
    query: Query
    marks: tuple[Mark, ...] = field(default=())

    def explain(self) -> list[str]:
        return explain_marks(self.marks)


def explain_marks(marks: tuple[Mark, ...]) -> list[str]:
    """One line per mark, in question order: what was read as what."""
    lines = []
    for mark in sorted(marks, key=lambda m: (m.start, m.end)):
        note = f"  {mark.note}" if mark.note else ""
        lines.append(f"{mark.kind:<8} [{mark.start}:{mark.end}] {mark.text!r}{note}")
    return lines


@dataclass(frozen=True)
class _Tok:
    text: str
    start: int
    end: int
    low: str


# Commas between digits belong to the number ("$10,000"); every other comma, bracket and
# sentence mark is its own token so it can act as a boundary.
_TOKEN = re.compile(r"[()?!;:]|,(?!\d)|(?:[^\s(),?!;:]|,(?=\d))+")
_END_PUNCT = {"?", "!", ".", ";", ":"}
_SENTENCE_END = {"?", "!", ".", ";"}
# Never preceded by a space when tokens are joined back into a term.
_CLOSING_PUNCT = {",", "?", "!", ".", ";", ":", ")"}
_ABBREVIATIONS = {
    "mr.", "mrs.", "ms.", "dr.", "st.", "no.", "vs.", "etc.", "jr.", "sr.", "inc.", "ltd.",
    "co.", "prof.", "mt.", "ft.", "approx.", "vol.", "fig.", "al.",
    # Titles and ranks before a name, and short forms of citations and addresses.
    "sgt.", "capt.", "gen.", "col.", "lt.", "cmdr.", "adm.", "gov.", "sen.", "rep.", "rev.",
    "fr.", "hon.", "pres.", "ave.", "blvd.", "dept.", "univ.", "corp.", "bros.", "est.",
    "ca.", "cf.", "ed.", "eds.", "pp.", "op.", "nos.", "assn.",
}  # fmt: skip
# "U.S.", "e.g.", "T.S.": letters with periods are initials, never a sentence end.
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")

_SCAFFOLD = re.compile(
    r"""^(?:
        (?:provide|give|write)(?:\s+me)?\s+(?:a|an)\s+(?:(?:brief|short|quick|general)\s+)?
        (?:introduction|intro|summary|overview|description|account)\s+(?:to|of|about|on)
      | (?:introduce|examine|explore|discuss|analy[sz]e|describe|explain|summari[sz]e|provide)
        (?=\s)
      | (?:can|could|would)\s+you\s+(?:please\s+)?(?:recommend|suggest|find|show\s+me|list|tell\s+me\s+about|give\s+me)
      | please\s+(?:find|show\s+me|list|tell\s+me\s+about|give\s+me)
      | tell\s+me(?:\s+more)?\s+about | tell\s+me
      | show\s+me | find\s+me | find | list | give\s+me | search\s+for | recommend | suggest
      | (?:i'?m|i\s+am)\s+looking\s+for | looking\s+for | i\s+(?:need|want)
      | what\s+(?:kinds?|types?|sorts?)\s+of
      | what(?:'s|\s+is|\s+are|\s+was|\s+were)
      | which(?:\s+(?:is|are|was|were))?
      | who(?:'s|\s+is|\s+are|\s+was|\s+were)
      | are\s+there(?:\s+any)? | is\s+there
      | how\s+(?:do|can|should|would)\s+(?:i|we|you|one) | how\s+to
      | everything\s+about | anything\s+about
      | (?:articles?|papers?|documents?|posts?|pages?|news|information|info|stuff|something)
        \s+(?:about|on|regarding)
      | any
    )\b""",
    re.IGNORECASE | re.VERBOSE,
)
_DETERMINERS = {"the", "a", "an", "some", "any"}
# Words that open an excluded item without being part of it: "not sushi and not ramen".
_ITEM_LEADERS = _DETERMINERS | {
    "not",
    "no",
    "about",
    "either",
    "neither",
    "his",
    "her",
    "its",
    "their",
}
# What an exclusion says about an item rather than the item: "any reference to X".
_ITEM_FILLERS: tuple[tuple[str, ...], ...] = (
    ("any", "reference", "to"),
    ("any", "references", "to"),
    ("reference", "to"),
    ("references", "to"),
    ("any", "mention", "of"),
    ("mention", "of"),
    ("any", "discussion", "of"),
    ("discussions", "of"),
    ("discussion", "of"),
    ("details", "about"),
    ("the", "role", "of"),
)
_REFLEXIVES = {"itself", "themselves", "himself", "herself"}
# After a comma these open a new clause, which ends an exclusion's scope:
# "excluding A, and how did B ..." excludes A only.
_CLAUSE_OPENERS = {
    "how", "what", "which", "why", "where", "when", "who", "whose", "whether", "while",
    "whereas", "additionally", "also", "furthermore", "moreover", "then", "so",
}  # fmt: skip
_CLAUSE_JOINERS = {"and", "but", "or"}
# Words that name no topic: a term made only of these is noise.
_CONNECTIVES = {
    "and", "or", "but", "nor", "so", "yet", "also", "additionally", "then", "while", "whereas",
    "with", "without", "as", "well", "too", "especially", "particularly",
}  # fmt: skip
# Lowercase words inside titles: "Songs of Innocence", "The Road to Serfdom".
_TITLE_GLUE = {"of", "the", "to", "in", "on", "a", "an", "for", "at", "by"}
_WH_WORDS = {"how", "why", "what", "when", "where", "which", "who", "whom", "whose", "whether"}
_POSSESSIVES = {"its", "their", "his", "her"}
_OPEN_QUOTES = {'"': '"', "“": "”", "‘": "’", "'": "'"}
# Quotes that hold a title together; a single quote is too often an apostrophe.
_DOUBLE_QUOTES = {'"', "“"}
# Function words that a title capitalises ("Man and His Symbols"); running text does not.
_TITLE_OPENERS = {"his", "her", "its", "their", "our", "my", "your", "the", "a", "an"}
# Past this many words a topic is a question to embed whole, not a list to split.
_LONG_TOPIC = 16

# Cues that open an exclusion, longest first so "except for" wins over "except". A leading
# "," is part of the cue for the bare ones ("..., not adults") to keep "not" inside phrases
# ("not related to" aside) from triggering.
_EXCLUSION_CUES: tuple[tuple[str, ...], ...] = tuple(
    sorted(
        (
            ("not", "related", "to"),
            ("unrelated", "to"),
            ("not", "including"),
            ("not", "counting"),
            ("without", "counting"),
            ("excluding",),
            ("exclude",),
            ("except", "for"),
            ("except",),
            ("other", "than"),
            ("but", "not"),
            ("and", "not"),
            ("apart", "from"),
            ("aside", "from"),
            ("besides",),
            ("rather", "than"),
            ("without", "mentioning"),
            ("without", "referencing"),
            ("without", "discussing"),
            ("without", "considering"),
            ("without", "touching", "on"),
            ("without", "including"),
            # "without" + a verb of mentioning: the verb frames the item, it is not part of it.
            ("without", "referring", "to"),
            ("without", "reference", "to"),
            ("without", "addressing"),
            ("without", "covering"),
            ("without", "involving"),
            ("without", "focusing", "on"),
            ("without", "going", "into"),
            ("without", "getting", "into"),
            ("without", "bringing", "up"),
            ("without", "talking", "about"),
            ("without", "describing"),
            ("without", "any", "mention", "of"),
            ("outside", "of"),
            ("avoiding",),
            ("without",),
            ("not", "mentioning"),
            (",", "not"),
            (",", "no"),
        ),
        key=len,
        reverse=True,
    )
)
# "that don't mention X", "which does not use X": a negated verb of content.
_NEGATED_VERB = re.compile(
    r"^(?:(?:that|which|who)\s+)?(?:do|does|did)(?:n't|\s+not)\s+"
    r"(?:mention|use|include|involve|contain|discuss|cover|feature|talk\s+about|refer\s+to)$"
)
# Looked up by first word: matching every cue at every position was most of the run time.
_CUES_BY_FIRST_WORD: dict[str, tuple[tuple[str, ...], ...]] = {}
for _cue in _EXCLUSION_CUES:
    _CUES_BY_FIRST_WORD[_cue[0]] = (*_CUES_BY_FIRST_WORD.get(_cue[0], ()), _cue)
_NEGATION_STARTS = {"that", "which", "who", "do", "does", "did", "don't", "doesn't", "didn't"}
_LEADING_EXCLUSION = (
    ("apart", "from"),
    ("aside", "from"),
    ("other", "than"),
    ("except", "for"),
    ("besides",),
    ("excluding",),
)

# Words after which a phrase's variable part starts: "side effects of | ibuprofen".
_BOUNDARY = {
    "of", "for", "in", "on", "at", "to", "from", "with", "by", "about", "into", "onto", "under",
    "over", "near", "across", "through", "via", "using", "including", "involving", "featuring",
    "containing", "like", "during", "after", "before", "between", "within", "among", "against",
    "that", "which", "who", "whose", "where",
}  # fmt: skip
_RELATIVE = {"that", "which", "who", "whose", "where"}
# Common verbs that open a second predicate: "hotels that have a pool and | allow pets".
_VERBS = {
    "have", "has", "had", "allow", "allows", "support", "supports", "run", "runs", "offer",
    "offers", "include", "includes", "use", "uses", "accept", "accepts", "provide", "provides",
    "serve", "serves", "track", "tracks", "are", "is", "was", "were", "can", "could", "will",
    "cover", "covers", "focus", "focuses", "work", "works", "need", "needs", "require",
    "requires", "take", "takes", "make", "makes", "help", "helps", "let", "lets", "show", "shows",
    "contain", "contains", "teach", "teaches", "sell", "sells", "ship", "ships", "deliver",
    "delivers", "speak", "speaks", "play", "plays", "cost", "costs", "come", "comes", "get",
    "gets", "give", "gives", "do", "does", "don't", "doesn't",
}  # fmt: skip
# A comparison or choice is one topic, not a conjunction or disjunction of two.
_GUARD_WORDS = {
    "between", "compare", "compared", "comparing", "comparison", "vs", "vs.", "versus",
    "better", "worse", "difference", "differences", "relationship", "whether",
    "differ", "differs", "differed", "similar", "similarity", "similarities", "contrast",
    "contrasts", "contrasted", "compares", "comparable", "alike",
}  # fmt: skip
_AUXILIARIES = {
    "is", "are", "was", "were", "should", "would", "could", "can", "do", "does", "did", "will",
    "shall", "may", "might",
}  # fmt: skip
# Fixed binomials: "X and Y" that names one thing.
_BINOMIALS = {
    ("salt", "pepper"), ("bread", "butter"), ("fish", "chips"), ("mac", "cheese"),
    ("macaroni", "cheese"), ("rock", "roll"), ("trial", "error"), ("pros", "cons"),
    ("dos", "don'ts"), ("do's", "don'ts"), ("black", "white"), ("bed", "breakfast"),
    ("research", "development"), ("supply", "demand"), ("terms", "conditions"),
    ("war", "peace"), ("pride", "prejudice"), ("crime", "punishment"), ("sense", "sensibility"),
    ("romeo", "juliet"), ("law", "order"), ("cause", "effect"), ("checks", "balances"),
    ("arts", "crafts"), ("odds", "ends"), ("nuts", "bolts"), ("wear", "tear"), ("ups", "downs"),
    ("health", "safety"), ("mergers", "acquisitions"), ("oil", "gas"), ("food", "drink"),
    ("food", "beverage"), ("rules", "regulations"), ("sweet", "sour"), ("hide", "seek"),
    ("back", "forth"), ("give", "take"), ("questions", "answers"), ("q", "a"), ("r", "d"),
    ("search", "rescue"), ("bits", "pieces"), ("ladies", "gentlemen"), ("bosnia", "herzegovina"),
    ("trinidad", "tobago"), ("antigua", "barbuda"), ("johnson", "johnson"),
    ("procter", "gamble"), ("dungeons", "dragons"), ("lord", "lady"), ("peanut butter", "jelly"),
    ("butter", "jelly"), ("bride", "groom"), ("cheese", "crackers"), ("milk", "cookies"),
    ("gin", "tonic"), ("rum", "coke"), ("ham", "cheese"), ("sweet", "savory"),
    ("hot", "cold"), ("cut", "paste"), ("copy", "paste"), ("drag", "drop"), ("plug", "play"),
    ("hit", "run"), ("stop", "go"), ("touch", "go"), ("wait", "see"), ("pick", "mix"),
    ("pen", "paper"), ("bow", "arrow"), ("cat", "mouse"), ("horse", "carriage"),
    ("brick", "mortar"), ("bricks", "mortar"), ("arts", "sciences"), ("pins", "needles"),
}  # fmt: skip
_OR_WORDS = {"or", "and/or"}


def _tokens(text: str) -> list[_Tok]:
    toks = []
    for m in _TOKEN.finditer(text):
        word, start, end = m.group(0), m.start(), m.end()
        if _ends_sentence(word, text, end):
            # "Portugal." at the end of a sentence: the period is a boundary, not part of a term.
            toks.append(_Tok(word[:-1], start, end - 1, word[:-1].lower().replace("’", "'")))
            toks.append(_Tok(".", end - 1, end, "."))
        else:
            toks.append(_Tok(word, start, end, word.lower().replace("’", "'")))
    return toks


def _ends_sentence(word: str, text: str, end: int) -> bool:
    """A word whose final period closes a sentence, not an abbreviation ("e.g.", "Mrs.")."""
    if len(word) < 2 or not word.endswith(".") or word.endswith(".."):
        return False
    if end < len(text) and not text[end].isspace():
        return False
    bare = word.lower().replace("’", "'")
    return bare not in _ABBREVIATIONS and not _INITIALS.match(word)


def _text(question: str, toks: list[_Tok]) -> str:
    """The tokens' words as written; a dropped token in between (a parenthetical) leaves a space."""
    parts = []
    for before, tok in zip([None, *toks], toks, strict=False):
        gap = before is not None and question[before.end : tok.start] != ""
        if gap and tok.low not in _CLOSING_PUNCT:
            parts.append(" ")
        parts.append(tok.text)
    return "".join(parts)


def _unquoted(text: str) -> str:
    """'excluding "Hamlet"': quotation marks name a title; the term is the title."""
    quoted = len(text) > 2 and text[0] in _OPEN_QUOTES and text[-1] == _OPEN_QUOTES[text[0]]
    inner = text[1:-1].strip() if quoted and text[0] not in text[1:-1] else ""
    return inner if any(c.isalnum() for c in inner) else text


def _span(toks: list[_Tok]) -> Span:
    return (toks[0].start, toks[-1].end) if toks else (0, 0)


def _strip_edges(toks: list[_Tok]) -> list[_Tok]:
    start, end = 0, len(toks)
    while start < end and toks[start].low in {",", ";", ":"}:
        start += 1
    while end > start and (toks[end - 1].low in _END_PUNCT or toks[end - 1].low == ","):
        end -= 1
    return toks[start:end]


def _strip_determiner(toks: list[_Tok]) -> list[_Tok]:
    # Keep a lone determiner: "A" on its own is a term, not nothing.
    if len(toks) > 1 and toks[0].low in _DETERMINERS:
        return toks[1:]
    return toks


def _matches(toks: list[_Tok], at: int, words: tuple[str, ...]) -> bool:
    return len(toks) - at >= len(words) and all(toks[at + k].low == w for k, w in enumerate(words))


@dataclass
class _Builder:
    """Collects marks while the rewrite runs: the tree is assembled at the end."""

    question: str
    marks: list[Mark] = field(default_factory=list)

    def mark(self, kind: MarkKind, toks: list[_Tok], note: str = "") -> None:
        if toks:
            start, end = _span(toks)
            self.marks.append(Mark(kind, start, end, self.question[start:end], note))

    def term(self, toks: list[_Tok], note: str = "") -> Term:
        self.mark("term", toks, note)
        return Term(_unquoted(_text(self.question, toks)), span=_span(toks))

    def joined(self, parts: list[list[_Tok]], own: list[_Tok]) -> Term:
        """A term made of the alternative `own` plus shared context around it."""
        self.mark("term", own)
        text = " ".join(_text(self.question, p) for p in parts if p)
        return Term(text, span=_span(own))


def _drop_scaffold(b: _Builder, toks: list[_Tok]) -> list[_Tok]:
    toks = _strip_edges(toks)
    if not toks:
        return toks
    base = toks[0].start
    match = _SCAFFOLD.match(b.question[base : toks[-1].end])
    if match:
        cut = base + match.end()
        dropped = [t for t in toks if t.end <= cut]
        rest = [t for t in toks if t.start >= cut]
        if rest:
            b.mark("scaffold", dropped, "question words, not part of the topic")
            toks = rest
    stripped = _strip_determiner(toks)
    if len(stripped) < len(toks):
        b.mark("scaffold", toks[:1], "leading article")
    return stripped


def _cue_at(toks: list[_Tok], at: int) -> int:
    """Length of the exclusion cue starting at `at`, or 0."""
    first = toks[at].low
    for cue in _CUES_BY_FIRST_WORD.get(first, ()):
        if _matches(toks, at, cue):
            if first == ",":
                # ", not including X": the longer cue after the comma wins.
                return 1 + (_cue_at(toks, at + 1) or len(cue) - 1)
            return len(cue)
    if first in _NEGATION_STARTS:
        for width in (5, 4, 3, 2):
            words = " ".join(t.low for t in toks[at : at + width])
            if len(toks) - at >= width and _NEGATED_VERB.match(words):
                return width
    return 0


def _find_exclusion(toks: list[_Tok]) -> tuple[int, int] | None:
    """(cue start, cue end) of the first exclusion cue, if any."""
    for i in range(len(toks)):
        # A leading comma cue needs something before it to exclude from.
        width = _cue_at(toks, i) if i > 0 or toks[i].low != "," else 0
        if width:
            return i, i + width
    return None


def _split_items(b: _Builder, toks: list[_Tok]) -> list[list[_Tok]]:
    """Split an exclusion list on commas and conjunctions, keeping binomials and titles whole."""
    items: list[list[_Tok]] = [[]]
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
        if is_and and 0 < i < len(toks) - 1 and _is_binomial(toks, i):
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
        if item and not _only_connectives(item):
            cleaned.append(item)
    return cleaned


def _closing_quote(toks: list[_Tok], at: int) -> int:
    """Index of the token closing a double quote opened by toks[at], or -1."""
    opener = toks[at].text[:1]
    if opener not in _DOUBLE_QUOTES:
        return -1
    close = _OPEN_QUOTES[opener]
    if len(toks[at].text) > 1 and toks[at].text.endswith(close):
        return -1  # "Dune": quoted and closed in one token, nothing to keep together
    for j in range(at + 1, len(toks)):
        if toks[j].low in _SENTENCE_END:
            return -1
        if toks[j].text.endswith(close):
            return j
    return -1


def _strip_fillers(item: list[_Tok]) -> list[_Tok]:
    if len(item) > 1 and item[-1].low in _REFLEXIVES:
        item = item[:-1]  # "the trade in silk itself"
    changed = True
    while item and changed:
        changed = False
        while item and item[0].low in _ITEM_LEADERS:
            item, changed = item[1:], True
        for filler in _ITEM_FILLERS:
            if len(item) > len(filler) and _matches(item, 0, filler):
                item, changed = item[len(filler) :], True
                break
    return item


def _joins_title(toks: list[_Tok], at: int) -> bool:
    """ "Songs of Innocence and Experience": capitalised words around "and", inside a run of
    capitalised words joined by a lowercase function word. Two bare names ("Midway and
    Guadalcanal") are a list; a two-word title ("Pride and Prejudice") is split like one."""
    left, right = toks[at - 1].text, toks[at + 1].text
    if (
        left[:1].isupper()
        and toks[at + 1].text in _TITLE_GLUE
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
    if toks[at + 1].low in _TITLE_OPENERS:
        # "Man and His Symbols": mid-sentence, a capitalised "His" / "The" only opens a title's
        # next word; titles that open alike ("The Iliad and The Odyssey") are a list of two.
        start = at - 1
        while start > 0 and toks[start - 1].text[:1].isupper():
            start -= 1
        return toks[start].low != toks[at + 1].low
    start = at - 1
    while start > 0 and (toks[start - 1].text[:1].isupper() or toks[start - 1].low in _TITLE_GLUE):
        start -= 1
    inner = toks[start : at - 1]
    return any(t.low in _TITLE_GLUE for t in inner) and inner[0].text[:1].isupper()


def _only_connectives(toks: list[_Tok]) -> bool:
    return all(t.low in _CONNECTIVES or not any(c.isalnum() for c in t.low) for t in toks)


def _is_binomial(toks: list[_Tok], at: int) -> bool:
    left, right = toks[at - 1].low, toks[at + 1].low
    two_left = f"{toks[at - 2].low} {left}" if at >= 2 else ""
    return (left, right) in _BINOMIALS or (two_left, right) in _BINOMIALS


def _exclusions(b: _Builder, toks: list[_Tok]) -> tuple[list[_Tok], list[Term]]:
    """Take exclusions out of the question: (what remains, the excluded terms).

    Each exclusion reaches to the end of its clause (see _scope_end), so a question can hold
    several, and whatever follows one ("..., excluding A? How did B ...") stays positive.
    """
    excluded: list[Term] = []
    toks = _leading_exclusion(b, toks, excluded)
    toks = _parenthetical_exclusions(b, toks, excluded)
    toks = _non_prefixes(b, toks, excluded)
    kept: list[_Tok] = []
    while (found := _find_exclusion(toks)) is not None:
        start, end = found
        stop = _scope_end(toks, end)
        b.mark("cue", toks[start:end], "NOT: exclude what follows")
        for item in _split_items(b, _strip_edges(toks[end:stop])):
            excluded.append(b.term(item, "excluded"))
        kept.extend(toks[:start])
        toks = toks[stop:]
    return _tidy_commas(kept + toks), excluded


def _tidy_commas(toks: list[_Tok]) -> list[_Tok]:
    """Drop the commas a removed exclusion leaves dangling: "X, ? How ..." -> "X? How ..."."""
    kept = []
    for i, tok in enumerate(toks):
        after = toks[i + 1].low if i + 1 < len(toks) else "?"
        if tok.low == "," and (after in _SENTENCE_END or after in {",", ")"} or not kept):
            continue
        kept.append(tok)
    return kept


def _non_prefixes(b: _Builder, toks: list[_Tok], excluded: list[Term]) -> list[_Tok]:
    """ "a non Islamic summary", "a non-Islamic summary": NOT "Islamic". Only a capitalised word
    counts, so that "non-profit" or "non linear" stay one word of the topic."""
    kept: list[_Tok] = []
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
            b.mark("cue", [_Tok(tok.text[:4], tok.start, start, "non-")], "NOT: 'non-' prefix")
            word = _Tok(tok.text[4:], start, tok.end, tok.low[4:])
            excluded.append(b.term([word], "excluded"))
            i += 1
            continue
        kept.append(tok)
        i += 1
    return kept


def _scope_end(toks: list[_Tok], at: int) -> int:
    """Where an exclusion that starts at `at` ends: its sentence, bracket or clause."""
    for i in range(at, len(toks)):
        low = toks[i].low
        if low in _SENTENCE_END or low in {"(", ")"}:
            return i
        if low == "," and i + 1 < len(toks):
            after = toks[i + 1].low
            then = toks[i + 2].low if i + 2 < len(toks) else ""
            if after in _CLAUSE_OPENERS or (
                after in _CLAUSE_JOINERS and (then in _CLAUSE_OPENERS or then in _AUXILIARIES)
            ):
                return i
    return len(toks)


def _leading_exclusion(b: _Builder, toks: list[_Tok], excluded: list[Term]) -> list[_Tok]:
    """ "Apart from the Louvre, what are the best museums in Paris?" """
    for cue in _LEADING_EXCLUSION:
        if _matches(toks, 0, cue):
            comma = next((i for i, t in enumerate(toks) if t.low == ","), None)
            if comma is None or comma == len(toks) - 1:
                return toks
            b.mark("cue", toks[: len(cue)], "NOT: exclude what follows")
            for item in _split_items(b, toks[len(cue) : comma]):
                excluded.append(b.term(item, "excluded"))
            return toks[comma + 1 :]
    return toks


def _parenthetical_exclusions(b: _Builder, toks: list[_Tok], excluded: list[Term]) -> list[_Tok]:
    """ "Best budget smartphones (not iPhones)" """
    kept: list[_Tok] = []
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


def _is_long(toks: list[_Tok]) -> bool:
    """Several sentences, or more words than a list of short alternatives would have."""
    words = sum(any(c.isalnum() for c in t.low) for t in toks)
    return words > _LONG_TOPIC or any(t.low in _SENTENCE_END for t in toks[:-1])


def _guarded(b: _Builder, toks: list[_Tok]) -> bool:
    guard = next((t for t in toks if t.low in _GUARD_WORDS), None)
    if guard is not None:
        b.mark("kept", [guard], "a comparison is one topic: not split")
        return True
    if toks and toks[0].low in _AUXILIARIES and any(t.low in _OR_WORDS for t in toks):
        b.mark("kept", toks[:1], "a yes/no or choice question is one topic: not split")
        return True
    return False


def _coordinators(b: _Builder, toks: list[_Tok]) -> tuple[str, list[int]]:
    """The operator and the positions of the words that coordinate the topic's parts."""
    ors = [i for i, t in enumerate(toks) if t.low in _OR_WORDS and 0 < i < len(toks) - 1]
    if ors:
        return "or", ors
    ands = []
    for i, tok in enumerate(toks):
        if tok.low in {"and", "&"} and 0 < i < len(toks) - 1:
            if toks[i + 1].low in _POSSESSIVES:
                # "the history of X and its impact on Y": "its" leans on X, one topic.
                b.mark("kept", toks[i : i + 2], "refers back to what precedes: not split")
            elif _is_binomial(toks, i):
                b.mark("kept", toks[i - 1 : i + 2], "fixed expression, not split")
            else:
                ands.append(i)
    return "and", ands


def _tail(first: list[_Tok], ref: list[_Tok]) -> int:
    """Where the first alternative starts inside the first segment (the rest is shared)."""
    if ref and ref[0].low in _VERBS:
        # A second predicate: share everything up to the relative pronoun.
        rel = max((i for i, t in enumerate(first) if t.low in _RELATIVE), default=-1)
        return rel + 1
    if any(t.low in _BOUNDARY for t in ref):
        # The next alternative is a whole phrase ("trains to Porto"): nothing is shared.
        return 0
    start = max((i + 1 for i, t in enumerate(first) if t.low in _BOUNDARY), default=0)
    if len(first) - start > len(ref):
        start = len(first) - len(ref)
        # "the US or Canada": the article goes with the alternative, not the shared part.
        while start > 0 and first[start - 1].low in _DETERMINERS:
            start -= 1
    return start


def _topic(b: _Builder, toks: list[_Tok]) -> Node | None:
    """The positive part: one term, or alternatives / conjuncts with shared context."""
    toks = _strip_edges(toks)
    while toks and toks[-1].low in _CONNECTIVES:
        # "Introduce X, but" once "do not mention Y" is gone.
        toks = _strip_edges(toks[:-1])
    if not toks:
        return None
    whole = _strip_determiner(toks)
    if _is_long(toks):
        b.mark("kept", toks, "a long question is embedded whole, not cut into fragments")
        return b.term(whole, "one topic")
    if _guarded(b, toks):
        return b.term(whole, "one topic")
    if toks[0].low in _WH_WORDS:
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
    segments: list[list[_Tok]] = []
    cut = 0
    for pos in positions:
        segments.append(toks[cut:pos])
        cut = pos + 1
    segments.append(toks[cut:])
    head, *rest = segments
    items: list[list[_Tok]] = []
    pieces = _split_on_commas(head)
    head, middle = pieces[0], pieces[1:]
    for segment in [*middle, *rest]:
        items.extend(_split_on_commas(segment))
    items = [item for item in (_strip_edges(i) for i in items) if item]
    head = _strip_edges(head)
    if not head or not items:
        return b.term(whole, "topic, kept as one phrase")

    prefix: list[_Tok] = []
    if open_at is not None:
        prefix, head = head[:open_at], head[open_at + 1 :]
        if not head:
            return b.term(whole, "topic, kept as one phrase")
        b.mark("cue", [toks[open_at]], f"{kind.upper()}: opens the first alternative")
    ref = items[0]

    suffix: list[_Tok] = []
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
    prefix = _strip_determiner(prefix) if prefix else prefix
    terms = []
    for own in [head, *items]:
        own_text = own if prefix else _strip_determiner(own)
        terms.append(b.joined([prefix, own_text, suffix], own))
    return (Or if kind == "or" else And)(tuple(terms), span=_span(toks))


def _split_on_commas(toks: list[_Tok]) -> list[list[_Tok]]:
    parts: list[list[_Tok]] = [[]]
    for tok in toks:
        if tok.low == ",":
            parts.append([])
        else:
            parts[-1].append(tok)
    return [p for p in parts if p] or [[]]


def rewrite_rules(question: str) -> RuleRewrite:
    """Rewrite a natural-language question into a logical query with explainable rules."""
    b = _Builder(question)
    toks = _tokens(question)
    if not toks:
        raise RewriteError("empty question: ask something, e.g. 'pancakes without eggs'")
    rest, excluded = _exclusions(b, _strip_edges(toks))
    rest = _drop_scaffold(b, rest)
    topic = _topic(b, rest)
    if topic is None:
        # Nothing positive is left ("Not about cats"): the question is the topic.
        b.marks.clear()
        whole = _drop_scaffold(b, toks)
        topic, excluded = b.term(whole or toks, "the whole question is the topic"), []
    if not excluded:
        root: Node = topic
    else:
        positives = topic.operands if isinstance(topic, And) else (topic,)
        root = And((*positives, *(Not(t, span=t.span) for t in excluded)))
    return RuleRewrite(question, Query(root, question), tuple(b.marks))
