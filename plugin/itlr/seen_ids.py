"""Which ids a stream of documents has given so far, in 8 bytes each whatever the ids' length:
enough to count a file's repeated ids (itlr.documents.DocumentStream) while memory stays
bounded by the number of ids, not the file's size."""

from __future__ import annotations

import hashlib

import numpy as np


class SeenIds:
    """Which ids a stream has given, in 8 bytes each (a 64-bit digest; a collision only
    miscounts a repeat): recent ids in a set, merged now and then into a sorted array."""

    _MERGE_EVERY = 1 << 16

    def __init__(self) -> None:
        self._sorted = np.zeros(0, dtype=np.uint64)
        self._recent: set[int] = set()

    def add(self, doc_id: str) -> bool:
        """Record the id; whether it was given before."""
        digest = int.from_bytes(
            hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
            "little",
        )
        if digest in self._recent:
            return True
        at = int(np.searchsorted(self._sorted, digest))
        if at < len(self._sorted) and int(self._sorted[at]) == digest:
            return True
        self._recent.add(digest)
        if len(self._recent) >= self._MERGE_EVERY:
            recent = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
            self._sorted = np.union1d(self._sorted, recent)
            self._recent.clear()
        return False
