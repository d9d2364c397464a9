"""Approximate candidates for the embedded engine: an HNSW graph (usearch) over its rows.

The graph is a derived cache, never the truth. Its keys are row numbers, added in row order, so
the rows it covers are exactly 0 .. len(graph) - 1, and the file name carries the generation of
the vector file it was built from (`ann.<generation>.usearch`). Hence:
  - a graph covering fewer rows than are committed is caught up by adding the missing rows;
  - a graph of another generation (the index was compacted), covering more rows than are
    committed, of other dimensions, or unreadable (a torn file), is thrown away and rebuilt;
  - a kill at any instant leaves at worst such a stale or missing file: it is written to a
    temporary name, fsync'ed and renamed into place, so a reader sees the old file or the new.
Dead rows (replaced or deleted ids) stay in the graph; searches skip them, asking for more
neighbours in proportion. Only candidates come from the graph: every score is then the exact
cosine of the candidate's stored vector, so a hit's score is what exact mode gives it.

Why usearch: among maintained HNSW libraries with wheels here it is the lightest (2.3 MB against
faiss-cpu's 18.8 MB; hnswlib has no wheel), it adds incrementally, stores half-precision
vectors for the graph (the exact float32 rows stay in vectors.f32) and saves to a file we can
fsync and rename. Measurements: docs/benchmarks.md, "Embedded ANN".
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from usearch.index import Index

# Below this many rows an exact scan (a memory pass of a few ms at most) beats keeping a graph.
ANN_MIN_ROWS = 50_000
# Graph parameters: 16 links per node, breadth 128 when adding. A search for n neighbours
# looks BREADTH_PER_NEIGHBOUR * n wide, at least EXPANSION_SEARCH and at most MAX_EXPANSION,
# wider than usearch's default (64, or n when larger): the certificate trusts the graph's
# neighbours, and at the default breadth the graph misses part of a single term's true top 10
# and of a conjunction's nearest rows, which no bound would then catch. Wider costs time per
# search, hence the cap (docs/benchmarks.md, "Certificate").
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256
BREADTH_PER_NEIGHBOUR = 4
MAX_EXPANSION = 8192
# Save the graph when first built, then once this share of its rows is new since the last save,
# and at the end of every `EmbeddedBackend.writing()` block (a whole ingestion).
SAVE_FRACTION = 0.1
SAVE_MIN_ROWS = 10_000
ADD_CHUNK = 50_000


def breadth(count: int) -> int:
    """How wide a search for `count` neighbours looks."""
    return min(MAX_EXPANSION, max(EXPANSION_SEARCH, BREADTH_PER_NEIGHBOUR * count))


def graph_path(folder: Path, generation: int) -> Path:
    return folder / f"ann.{generation}.usearch"


def usearch_index() -> type[Index]:
    """usearch's Index class. onnxruntime (the default encoder) is imported first when it is
    installed: onnxruntime 1.32 imported after usearch 2.26 crashes the process (SIGSEGV, a clash
    of their native libraries), the other order is safe (tests/embedded/test_ann.py)."""
    with contextlib.suppress(ImportError):
        import onnxruntime  # type: ignore[import-untyped]  # noqa: F401
    from usearch.index import Index

    return Index


class AnnGraph:
    """The HNSW graph of one index directory, in memory once loaded."""

    def __init__(self, folder: Path, dims: int) -> None:
        self.folder = folder
        self.dims = dims
        self.generation: int | None = None
        # Any: set by _load, which mypy cannot see making it non-None at the call sites.
        self._graph: Any = None
        self._saved_rows = 0
        self._viewed = False

    @property
    def rows(self) -> int:
        """Rows covered: 0 .. rows - 1."""
        return 0 if self._graph is None else len(self._graph)

    def _new(self) -> Index:
        Index = usearch_index()
        return Index(
            ndim=self.dims,
            metric="ip",  # rows are unit vectors: inner product is the cosine
            dtype="f16",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )

    def _load(self, generation: int, committed: int) -> None:
        Index = usearch_index()
        self.generation = generation
        self._graph, self._saved_rows, self._viewed = None, 0, False
        path = graph_path(self.folder, generation)
        if path.exists():
            with contextlib.suppress(Exception):  # torn or foreign: rebuilt below
                # A saved graph that covers every row is searched in place (memory-mapped);
                # one that lacks rows is read into memory, where rows can be added.
                graph = Index.restore(str(path), view=True)
                if graph is not None and graph.ndim == self.dims and len(graph) < committed:
                    graph = Index.restore(str(path))
                if graph is not None and graph.ndim == self.dims and len(graph) <= committed:
                    # Not kept in the file. (usearch defines the setter apart from its getter,
                    # which mypy reads as a read-only property.)
                    graph.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
                    self._graph, self._saved_rows = graph, len(graph)
                    self._viewed = len(graph) == committed
        if self._graph is None:
            self._graph = self._new()

    def catch_up(self, generation: int, vectors: np.ndarray) -> int:
        """Cover every committed row of `vectors` (row i = key i); returns rows added."""
        committed = len(vectors)
        if self._graph is None or generation != self.generation or self.rows > committed:
            self._load(generation, committed)
        if self._viewed and self.rows < committed:
            self._load(generation, committed)  # a mapped graph cannot grow: read it in
        start = self.rows
        for low in range(start, committed, ADD_CHUNK):
            high = min(committed, low + ADD_CHUNK)
            keys = np.arange(low, high, dtype=np.uint64)
            # One thread: usearch's parallel insertion left some rows unreachable (the top 10
            # of 1 to 12 of 100 real-text queries went missing; none single-threaded).
            self._graph.add(keys, np.asarray(vectors[low:high], dtype=np.float32), threads=1)
        return committed - start

    def search(
        self, queries: np.ndarray, counts: Iterable[int], total_rows: int
    ) -> list[np.ndarray]:
        """Row numbers of each query's `count` nearest rows (fewer if the graph has fewer)."""
        found = []
        for query, count in zip(queries, counts, strict=True):
            count = min(int(count), total_rows)
            if count <= 0:
                found.append(np.zeros(0, dtype=np.int64))
                continue
            # Set per search: a concurrent search may read another's breadth, which changes how
            # much it looks at, never what it returns for what it saw.
            self._graph.expansion_search = breadth(count)
            matches = self._graph.search(np.asarray(query, dtype=np.float32), count)
            found.append(np.asarray(matches.keys, dtype=np.int64))
        return found

    def save_if_due(self, force: bool = False) -> bool:
        """Persist when enough rows are new (or `force` and any are): temp file, fsync, rename.
        The caller holds the index's writer lock."""
        if self._graph is None or self.generation is None:
            return False
        new_rows = self.rows - self._saved_rows
        # A graph never saved is saved at once: building it is the expensive part.
        due = self._saved_rows == 0 or new_rows >= max(SAVE_MIN_ROWS, SAVE_FRACTION * self.rows)
        if new_rows <= 0 or not (due or force):
            return False
        path = graph_path(self.folder, self.generation)
        temporary = path.with_name(path.name + ".tmp")
        self._graph.save(str(temporary))
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        _fsync_directory(self.folder)
        self._saved_rows = self.rows
        for other in self.folder.glob("ann.*.usearch*"):
            if other != path:
                other.unlink(missing_ok=True)
        return True


def _fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
