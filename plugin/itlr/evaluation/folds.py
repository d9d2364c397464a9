"""Two fixed folds of a question set, for decisions by cross-validation.

A rule (of the rewriter, or a default of the scorer) is written while looking at one fold and
measured on the other, in both directions. The fold of a question depends on its id alone (a
hash, not a random draw), so every script and every session splits the same way, and a question
added later never moves the others.
"""

from __future__ import annotations

import hashlib

FOLDS = (0, 1)


def fold_of(question_id: str) -> int:
    """0 or 1: the fold a question id belongs to."""
    return hashlib.blake2b(question_id.encode("utf-8"), digest_size=2).digest()[0] & 1
