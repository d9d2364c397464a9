"""How the embedded engine presents a hit: the fields the search asked for, and a simple
highlighter like the engines' default one: the sentences of a text that contain a word of the
query's positive terms, the words marked with <em>...</em>."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from itlr.options import SearchOptions
from itlr.results import Hit

MAX_FRAGMENTS = 5  # the engines' number_of_fragments default
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")


def query_words(terms: Iterable[str]) -> frozenset[str]:
    return frozenset(w.lower() for term in terms for w in _WORD.findall(term))


def fragments(text: str, words: frozenset[str], limit: int = MAX_FRAGMENTS) -> list[str]:
    """Up to `limit` sentences of text that contain one of the words, matches marked."""
    if not words:
        return []
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b",
        re.IGNORECASE,
    )
    found = []
    for sentence in _SENTENCE.split(text):
        marked, count = pattern.subn(r"<em>\1</em>", sentence.strip())
        if count:
            found.append(marked)
            if len(found) == limit:
                break
    return found


def shaped_hit(hit: Hit, options: SearchOptions, words: frozenset[str]) -> Hit:
    """The hit with the chosen fields and, when asked, its highlighted fragments."""
    changes: dict[str, Any] = {}
    if options.source_fields is not None:
        chosen = {n.removeprefix("metadata.") for n in options.source_fields}
        changes["fields"] = {k: v for k, v in hit.fields.items() if k in chosen}
    if words:
        found = fragments(hit.text, words)
        if found:
            changes["highlights"] = {"text": found}
    return replace(hit, **changes) if changes else hit
