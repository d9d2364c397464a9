"""A simple highlighter for the embedded engine, like the engines' default one: the sentences of
a text that contain a word of the query's positive terms, the words marked with <em>...</em>."""

from __future__ import annotations

import re
from collections.abc import Iterable

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
