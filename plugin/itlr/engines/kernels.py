"""The embedded engine's numeric kernels: cosines of unit vectors in one matrix product, and
the selection of a ranking's top k with ties broken in id order."""

from __future__ import annotations

import warnings

import numpy as np

# Up to this many rows a product is computed without threads (einsum: 0.14 ms for 500 x 5).
SINGLE_THREAD_ROWS = 2048


def cosine_matrix(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(rows, queries) dot products of unit vectors in one matrix product, reading them once.

    torch's CPU matmul (MKL) streams the vectors once for a few query columns, where numpy's
    OpenBLAS sgemm first copies the whole matrix into packed panels (two to three memory passes)
    and torch's own matrix-vector path runs at a third of memory speed. So whole-index products go
    through torch's matmul, a single query padded to two columns. Using one BLAS also keeps two
    thread pools off the same cores: torch's OpenMP threads still spin for a while after
    encoding the terms, and OpenBLAS's threads would spend a product waiting for a core they
    hold (measured in docs/history/benchmarks-rounds.md, "Latency").

    Candidate sets (a few hundred rows) are multiplied by numpy's own loops on this thread:
    waking torch's second thread for 50 microseconds of work cost a scheduler tick (about 4 ms)
    whenever another process held the other core (half the knn-mode queries on a 100k index).
    """
    count = queries.shape[0]
    if vectors.shape[0] <= SINGLE_THREAD_ROWS:
        small: np.ndarray = np.einsum("ij,kj->ik", vectors, np.asarray(queries, dtype=np.float32))
        return small
    try:
        import torch
    except ImportError:  # the core install has no torch: numpy's BLAS, slower on large indexes
        product: np.ndarray = vectors @ np.asarray(queries, dtype=np.float32).T
        return product

    right = np.ascontiguousarray(queries, dtype=np.float32)
    if count == 1:
        right = np.vstack([right, right])
    with warnings.catch_warnings():
        # A read-only memmap: torch warns that it could be written through, which it is not.
        warnings.simplefilter("ignore", UserWarning)
        left = torch.from_numpy(vectors)
    return (left @ torch.from_numpy(right).T).numpy()[:, :count]


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (a zero row stays zero), as float32."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def top_k(scores: np.ndarray, rows: np.ndarray, id_ranks: np.ndarray, k: int) -> np.ndarray:
    """Positions in `scores` of the k best, highest score first; ties in id order (`id_ranks`:
    each row's place in the order of the ids, read at `rows`) so that results are reproducible
    (and match a cluster's tie-break on the id)."""
    shortlist = np.arange(len(rows))
    if len(rows) > k:
        # Everything scoring above the k-th best, and of the rows tied with it (all of a
        # 100k-row index when fewer than k rows score above 0) those first in id order.
        # Selecting among the positive scores first: partitioning 100k mostly equal values
        # costs 2 ms.
        positive = scores[scores > 0]
        pool = positive if len(positive) >= k else scores
        kth = np.partition(pool, len(pool) - k)[len(pool) - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        wanted = k - len(above)
        if len(tied) > wanted:
            tied_ranks = id_ranks[rows[tied]]
            tied = tied[np.argpartition(tied_ranks, wanted - 1)[:wanted]]
        shortlist = np.concatenate([above, tied])
    ranks = id_ranks[rows[shortlist]]
    order: np.ndarray = shortlist[np.lexsort((ranks, -scores[shortlist]))[:k]]
    return order
