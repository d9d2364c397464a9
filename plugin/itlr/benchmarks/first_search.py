"""What a process's first hybrid search costs on an embedded index, against its second: each run
a fresh process opens the index, warms the cosine path with a cosine-only search (torch's first
matrix product), then times three hybrid searches over every row (mode exact) with terms no
earlier search of it asked for. Text from the recall corpus, random unit vectors (the lexical
side depends on the text only)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from itlr.engines.store import exists
from itlr.errors import ConfigurationError

BATCH = 1000
DIMS = 384
# Three hybrid queries with no token in common, so each reads postings it has not read before.
QUERIES = (
    '"vitamin D" AND NOT "bone health"',
    '"electric car batteries" OR "coffee and sleep"',
    '"Roman army" AND "solar power"',
)
_FRESH_PROCESS = """
import json, os, sys, time
import numpy as np
import itlr
from itlr.engines.embedded import EmbeddedBackend
from itlr.options import SearchOptions
from itlr.scoring import TruthMap

started = time.perf_counter()
index = EmbeddedBackend.open(sys.argv[1])
times = {"open": time.perf_counter() - started}
rng = np.random.default_rng(1)
warm = itlr.parse('"guitar" AND "dog training"')
cosine = SearchOptions(k=10, mode="exact", truth=TruthMap("clamp"))
index.search(warm, rng.normal(size=(2, index.dims)).astype(np.float32), cosine)
for label, text in zip(("first", "second", "third"), json.loads(sys.argv[2])):
    query = itlr.parse(text)
    vectors = rng.normal(size=(len(query.terms), index.dims)).astype(np.float32)
    started = time.perf_counter()
    index.search(query, vectors, SearchOptions(k=10, mode="exact"))
    times[label] = time.perf_counter() - started
times["load"] = os.getloadavg()[0]
print(json.dumps(times))
"""


def build(path: Path, passages: int) -> None:
    """The recall corpus grown to `passages`, random vectors, unless `path` holds it already."""
    from itlr.benchmarks.text_corpus import recall_corpus
    from itlr.engines.embedded import EmbeddedBackend

    if exists(path):
        index = EmbeddedBackend.open(path)
        complete = index.count() == passages
        index.close()
        if complete:
            return
        raise ConfigurationError(f"{path} holds an index of another size: give an empty folder")
    documents, _ = recall_corpus(passages)
    rng = np.random.default_rng(0)
    index = EmbeddedBackend.create(path, "random", DIMS)
    with index.writing():
        for start in range(0, len(documents), BATCH):
            chunk = documents[start : start + BATCH]
            vectors = rng.normal(size=(len(chunk), DIMS)).astype(np.float32)
            index.add([d.id for d in chunk], [d.text for d in chunk], vectors)
    index.close()


def fresh_process(path: Path) -> dict[str, float]:
    env = {**os.environ, "ITLR_ANN_MIN_ROWS": str(10**12)}
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(path), json.dumps(QUERIES)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def first_search_report(passages: int, runs: int, keep: Path | None) -> list[str]:
    from itlr.benchmarks.reports import machine

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(keep or scratch) / f"first-search-{passages}"
        build(path, passages)
        measured = [fresh_process(path) for _ in range(runs)]

    def median(key: str, scale: float = 1000.0) -> str:
        return f"{scale * statistics.median(m[key] for m in measured):.0f}"

    loads = ", ".join(f"{m['load']:.1f}" for m in measured)
    return [
        f"### First hybrid search of a process (`itlr bench first-search --passages {passages}`)",
        "",
        f"Machine: {machine()}; load average {loads} (one per run). Median of {runs} fresh "
        "processes; mode exact over every row, after a cosine-only warm-up search.",
        "",
        "| passages | open ms | first ms | second ms | third ms |",
        "|---:|---:|---:|---:|---:|",
        f"| {passages:,} | {median('open')} | {median('first')} | {median('second')} | "
        f"{median('third')} |",
    ]
