"""One document transform (itlr.transform) behind every write path, on a real OpenSearch: the
same document ingested, back-filled in place and written while a follower runs carries
byte-identical itlr fields (the vector of its text with the index's passage prompt, the content
hash, the token counts), with a passage prompt and without one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import itlr
from following import Following, hashed, rest, wait_for
from foreign_index import all_sources, create_index, delete_index, documents
from itlr.fingerprint import HASH_FIELD, content_hash
from itlr.lexical import LEXICAL_FIELDS

pytestmark = pytest.mark.opensearch

WRITTEN = ("vec", HASH_FIELD, *LEXICAL_FIELDS)


def ingested(url: str, twin: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The twin added through `Index.add` to a team's index back-filled (another document)."""
    name = create_index(url, "opensearch", [{**twin, "_id": "seed", "body": "A seed text."}])
    try:
        itlr.Index.backfill(
            name, url=url, text_field="body", vector_field="vec", passage_prompt=prompt
        )
        index = itlr.Index.open(
            name, url=url, vector_field="vec", text_field="body", passage_prompt=prompt
        )
        own = {k: v for k, v in twin.items() if k != "_id"}
        assert index.add([{"id": twin["_id"], **own}]).failed == {}
        return all_sources(url, name)[twin["_id"]]
    finally:
        delete_index(url, name)


def backfilled(url: str, twin: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The twin back-filled in place in a team's index that holds it alone."""
    name = create_index(url, "opensearch", [twin])
    try:
        report = itlr.Index.backfill(
            name, url=url, text_field="body", vector_field="vec", passage_prompt=prompt
        )
        assert (report.embedded, report.failed) == (1, {})
        return all_sources(url, name)[twin["_id"]]
    finally:
        delete_index(url, name)


def followed(url: str, twin: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The twin written by the team while a follower runs: the follower's cycle embeds it."""
    name = create_index(url, "opensearch", [{**twin, "_id": "seed", "body": "A seed text."}])
    try:
        with Following(url, name, passage_prompt=prompt) as follower:
            wait_for(lambda: hashed(url, name) == 1)
            rest(
                "PUT",
                f"{url}/{name}/_doc/{twin['_id']}",
                {k: v for k, v in twin.items() if k != "_id"},
            )
            wait_for(lambda: hashed(url, name) == 2)
        assert any(cycle.embedded for cycle in follower.cycles)
        return all_sources(url, name)[twin["_id"]]
    finally:
        delete_index(url, name)


@pytest.mark.parametrize("prompt", ["", "passage: "], ids=["no prompt", "passage prompt"])
def test_ingest_backfill_and_follow_write_byte_identical_itlr_fields(
    opensearch_url, corpus, embedder, prompt
) -> None:
    twin = documents(corpus, 1)[0]
    written = {
        path.__name__: {k: source.get(k) for k in WRITTEN}
        for path in (ingested, backfilled, followed)
        for source in [path(opensearch_url, twin, prompt)]
    }
    assert written["ingested"] == written["backfilled"] == written["followed"]
    fields = written["ingested"]
    # The passage prompt in front of the text, the hash of the text alone and the model.
    expected = embedder.with_prompts("", prompt).encode_passages([twin["body"]])[0]
    # (as float32: the index keeps float32 vectors and may give them back in that precision)
    assert np.array_equal(np.asarray(fields["vec"], dtype=np.float32), expected)
    assert fields[HASH_FIELD] == content_hash(twin["body"], embedder.name)
    assert None not in fields.values()
