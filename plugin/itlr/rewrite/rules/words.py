"""What the rule rewriter recognises: the word lists of words.toml, and the patterns of words.

The lists live in a data file so that teaching the rewriter a new cue, binomial or abbreviation
is an edit to words.toml, not to the rules.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

_LISTS = tomllib.loads(Path(__file__).with_name("words.toml").read_text(encoding="utf-8"))
_READ: set[str] = set()


def _list(name: str) -> list[str]:
    _READ.add(name)
    return list(_LISTS[name])


def _words(name: str) -> frozenset[str]:
    return frozenset(_list(name))


def _phrases(name: str) -> tuple[tuple[str, ...], ...]:
    """A list of phrases, each as its words, in the file's order."""
    return tuple(tuple(phrase.split()) for phrase in _list(name))


def _pairs(name: str) -> frozenset[tuple[str, str]]:
    """ "salt and pepper" -> ("salt", "pepper")."""
    pairs = set()
    for phrase in _list(name):
        left, joiner, right = phrase.partition(" and ")
        if not (joiner and left and right):
            raise ValueError(f"words.toml: {name} entry {phrase!r} is not 'X and Y'")
        pairs.add((left, right))
    return frozenset(pairs)


ABBREVIATIONS = _words("abbreviations")
DETERMINERS = _words("determiners")
ITEM_LEADERS = DETERMINERS | _words("item_leaders")
ITEM_FILLERS = _phrases("item_fillers")
REFLEXIVES = _words("reflexives")
CLAUSE_OPENERS = _words("clause_openers")
CLAUSE_JOINERS = _words("clause_joiners")
CONNECTIVES = _words("connectives")
TITLE_GLUE = _words("title_glue")
WH_WORDS = _words("wh_words")
POSSESSIVES = _words("possessives")
TITLE_OPENERS = _words("title_openers")
# Longest first; sorted() is stable, so among cues of one length the file's order decides.
EXCLUSION_CUES = tuple(sorted(_phrases("exclusion_cues"), key=len, reverse=True))
NEGATION_STARTS = _words("negation_starts")
LEADING_EXCLUSION = _phrases("leading_exclusion")
BOUNDARY = _words("boundary")
RELATIVE = _words("relative")
VERBS = _words("verbs")
GUARD_WORDS = _words("guard_words")
AUXILIARIES = _words("auxiliaries")
BINOMIALS = _pairs("binomials")
OR_WORDS = _words("or_words")
# A list no rule reads is a misspelt name or a leftover: either way an edit that does nothing.
if _unread := sorted(set(_LISTS) - _READ):
    raise ValueError(f"words.toml: no rule reads the lists {_unread}")

# Looked up by first word: matching every cue at every position was most of the run time.
CUES_BY_FIRST_WORD: dict[str, tuple[tuple[str, ...], ...]] = {}
for _cue in EXCLUSION_CUES:
    CUES_BY_FIRST_WORD[_cue[0]] = (*CUES_BY_FIRST_WORD.get(_cue[0], ()), _cue)

# "U.S.", "e.g.", "T.S.": letters with periods are initials, never a sentence end.
INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")

# The words a question opens with that ask rather than say what it is about.
SCAFFOLD = re.compile(
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

# "that don't mention X", "which does not use X": a negated verb of content.
NEGATED_VERB = re.compile(
    r"^(?:(?:that|which|who)\s+)?(?:do|does|did)(?:n't|\s+not)\s+"
    r"(?:mention|use|include|involve|contain|discuss|cover|feature|talk\s+about|refer\s+to)$"
)
