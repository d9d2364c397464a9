"""Peak RSS of `itlr ingest`'s reading and batching over a large file (issue 56, item 2).

    python scripts/ingest_rss.py --mb 1024 --format bulk            # a 1 GB _bulk file
    python scripts/ingest_rss.py --mb 1024 --format csv --whole     # and the old way, held whole

Writes a file of about `--mb` megabytes of ~1 KB passages into `--dir` (default /tmp), then, in
a fresh process, streams it exactly as `itlr ingest` does (itlr.documents.DocumentStream, the
bad-line filter, itlr.ingest.ingest in batches of 64, deletions and updates applied in order)
and prints the process's peak RSS (VmHWM) and its time. What this leaves out, so that a
gigabyte takes minutes and not a day on two cores: the model (a stand-in encoder returns a
unit vector derived from each text's hash, no model loaded) and the engine (a sink that keeps
nothing, answers that no id is stored and counts what it is given). Reading, parsing, checking,
combining and batching are the real code. `--whole` reads the file with
itlr.documents.read_documents instead (the file held whole, as ingestion did before).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "vitamin",
    "sunlight",
    "bone",
    "health",
    "calcium",
    "immune",
    "sleep",
    "memory",
    "coffee",
    "running",
    "knee",
    "muscle",
    "protein",
    "fiber",
    "heart",
    "blood",
    "pressure",
    "study",
    "trial",
    "patients",
    "dose",
    "risk",
    "effect",
    "cells",
    "growth",
    "energy",
    "brain",
    "learning",
    "exercise",
    "diet",
    "weight",
    "sugar",
    "insulin",
    "liver",
    "kidney",
    "lung",
    "air",
    "water",
]


def passage(rng: random.Random, words: int = 150) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def write_file(path: Path, megabytes: int, kind: str) -> int:
    """A file of about `megabytes` MB of passages; returns its document count."""
    rng = random.Random(7)
    target = megabytes * 1_000_000
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        if kind == "csv":
            out.write("id,text,year,topic\n")
        elif kind == "json":
            out.write("[\n")
        while out.tell() < target:
            text, year, topic = passage(rng), 1990 + count % 35, rng.choice(WORDS)
            if kind == "bulk":
                out.write(json.dumps({"index": {"_id": f"d{count}"}}) + "\n")
                out.write(json.dumps({"text": text, "year": year, "topic": topic}) + "\n")
            elif kind == "csv":
                out.write(f'd{count},"{text}",{year},{topic}\n')
            else:
                record = {"id": f"d{count}", "text": text, "year": year, "topic": topic}
                out.write(("," if count else "") + json.dumps(record) + "\n")
            count += 1
        if kind == "json":
            out.write("]\n")
    return count


# -- the measured process -----------------------------------------------------------------------


class HashEncoder:
    """A unit vector per text from its hash: the model left out (module docstring)."""

    dims = 384

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.stack(
            [np.random.default_rng(hash(t) & 0xFFFFFFFF).standard_normal(self.dims) for t in texts]
        ).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class Sink:
    """An engine that keeps nothing (module docstring)."""

    engine = "sink"
    model = "hash"
    dims = 384
    warnings: Sequence[str] = ()
    foreign = False
    top_fields: frozenset[str] = frozenset()
    prompts = None

    def __init__(self) -> None:
        self.written = 0

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def prepare_writes(self) -> None:
        pass

    def check_replacements(self, fields: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
        pass

    def fingerprints(self, ids: list[str]) -> dict[str, Any]:
        return {}

    def stored_documents(self, ids: list[str]) -> dict[str, Any]:
        return {}

    def written_fields(self, documents: Sequence[Any]) -> list[dict[str, Any]]:
        return [d.fields for d in documents]

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        return np.zeros((len(ids), self.dims), dtype=np.float32)

    def add(self, ids: Sequence[str], *args: Any) -> dict[str, str]:
        self.written += len(ids)
        return {}

    def delete(self, ids: Sequence[str]) -> int:
        return 0


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def measure(path: Path, whole: bool) -> None:
    from itlr.documents import BadLine, DocumentStream, read_documents
    from itlr.ingest import ingest

    started = time.perf_counter()
    sink = Sink()
    bad = 0
    if whole:
        found = read_documents(path)
        bad = len(found.bad_lines)
        report = ingest(found.documents, sink, HashEncoder())  # type: ignore[arg-type]
    else:

        def changes(stream: DocumentStream) -> Iterator[Any]:
            nonlocal bad
            for entry in stream:
                if isinstance(entry, BadLine):
                    bad += 1
                else:
                    yield entry

        report = ingest(changes(DocumentStream(path)), sink, HashEncoder())  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "file": str(path),
                "bytes": path.stat().st_size,
                "way": "whole" if whole else "stream",
                "documents": sink.written,
                "added": report.added,
                "bad_lines": bad,
                "seconds": round(seconds, 1),
                "peak_rss_mib": round(peak_rss_mib(), 1),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--format", choices=("bulk", "csv", "json"), default="bulk")
    parser.add_argument("--dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--whole", action="store_true", help="read_documents, the file whole")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.whole)
        return
    suffix = {"bulk": ".ndjson", "csv": ".csv", "json": ".json"}[args.format]
    path = args.dir / f"itlr-ingest-rss-{args.mb}mb{suffix}"
    if not path.exists():
        started = time.perf_counter()
        count = write_file(path, args.mb, args.format)
        print(f"wrote {path}: {count:,} documents in {time.perf_counter() - started:.0f} s")
    command = [sys.executable, __file__, "--measure", str(path)]
    subprocess.run([*command, *(["--whole"] if args.whole else [])], check=True)


if __name__ == "__main__":
    main()
