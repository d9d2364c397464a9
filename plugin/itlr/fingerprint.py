"""What decides whether a stored document must be embedded again: a hash of its text and the
model that embedded it, stored beside the vector (embedded rows and cluster documents alike).

Comparing hashes, not vectors, keeps a re-run of an ingestion script or a resumed back-fill
cheap: an unchanged document costs one stored field read, never an encoder call.
"""

from __future__ import annotations

import hashlib

# The cluster field (a keyword, not indexed) that holds the hash beside the vector.
HASH_FIELD = "itlr_hash"
# Where itlr's ingest pipeline (itlr.follow) moves the hash when anyone else writes the
# document: the follower compares it with the current text's hash before embedding again.
PREVIOUS_HASH_FIELD = "itlr_hash_was"


def content_hash(text: str, model: str) -> str:
    """Hex digest of the model name and the text the vector was computed from."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(model.encode("utf-8"))
    digest.update(b"\0")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
