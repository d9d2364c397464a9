"""A throw-away OpenSearch index of itlr's own holding some of the demo corpus, for the tests that
need one of their own (they write to it, or need a part of the corpus, or their stored scripts):
the read-only whole corpus is the session's `opensearch_demo` fixture instead."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend


@contextlib.contextmanager
def demo_backend(
    url: str,
    prefix: str,
    embedder: Any,
    docs: Sequence[Any],
    vectors: Any,
    *,
    with_fields: bool = False,
    with_scripts: bool = False,
    name: str | None = None,
) -> Iterator[OpenSearchBackend]:
    """An index named `prefix-<random>` (or `name`) holding `docs` with their `vectors` (and
    their fields, `with_fields`), refreshed, itlr's stored scripts installed if `with_scripts`;
    deleted on leaving."""
    backend = OpenSearchBackend(
        Connection(url).opensearch(),
        name or f"{prefix}-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=url,
    )
    backend.ensure_index()
    fields = [d.fields for d in docs] if with_fields else None
    assert backend.add([d.id for d in docs], [d.text for d in docs], vectors, fields) == {}
    backend.refresh()
    if with_scripts:
        backend.install_scripts()
    try:
        yield backend
    finally:
        backend.client.indices.delete(index=backend.index_name, ignore_unavailable=True)
