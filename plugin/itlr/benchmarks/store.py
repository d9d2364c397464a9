"""What the embedded engine's crash-safe commit costs: batched writes and reopening, no model."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from itlr.engines.embedded import EmbeddedBackend

TEXT = "a passage of about the length of a demo corpus entry, " * 4


@dataclass(frozen=True)
class StoreMeasurement:
    rows: int
    batch_size: int
    dims: int
    write_seconds: float
    open_seconds: float

    @property
    def ms_per_batch(self) -> float:
        return 1000 * self.write_seconds / -(-self.rows // self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ms_per_batch": self.ms_per_batch}


def measure_store(
    rows: int = 20_000, batch_size: int = 64, dims: int = 384, repeats: int = 3
) -> StoreMeasurement:
    """Median of `repeats` runs: append `rows` random unit vectors with short texts in batches
    (each batch one commit: vectors fsync'ed, then one SQLite transaction), then reopen."""
    vectors = np.random.default_rng(0).normal(size=(rows, dims)).astype(np.float32)
    writes, opens = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            index = EmbeddedBackend.create(Path(folder) / "store", "random", dims)
            started = time.perf_counter()
            for start in range(0, rows, batch_size):
                stop = min(rows, start + batch_size)
                ids = [f"d{i}" for i in range(start, stop)]
                index.add(ids, [TEXT] * len(ids), vectors[start:stop])
            writes.append(time.perf_counter() - started)
            index.close()
            started = time.perf_counter()
            EmbeddedBackend.open(Path(folder) / "store").close()
            opens.append(time.perf_counter() - started)
    return StoreMeasurement(
        rows, batch_size, dims, statistics.median(writes), statistics.median(opens)
    )
