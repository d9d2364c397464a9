"""`itlr demo`: dense vs logical retrieval on a corpus written for this project."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from itlr.documents import read_jsonl
from itlr.embed import get_embedder
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.folders import index_path
from itlr.ingest import ingest
from itlr.options import SearchOptions
from itlr.resources import data_file
from itlr.retriever import Retriever

DEMO_INDEX = "demo"


@dataclass(frozen=True)
class Showcase:
    question: str
    query: str
    why: str
    relevant: frozenset[str]
    negatives: frozenset[str]


def showcases() -> list[Showcase]:
    records = json.loads(data_file("demo", "queries.json").read_text())
    return [
        Showcase(
            r["question"],
            r["query"],
            r["why"],
            frozenset(r.get("relevant", ())),
            frozenset(r.get("negatives", ())),
        )
        for r in records
    ]


def demo_index(rebuild: bool = False) -> EmbeddedBackend:
    """The embedded demo index, built on first use and reused afterwards."""
    path = index_path(DEMO_INDEX)
    embedder = get_embedder()
    corpus = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    if rebuild and path.exists():
        shutil.rmtree(path)
    index = EmbeddedBackend.open_or_create(path, embedder.name, embedder.dims)
    if index.count() != len(corpus):
        ingest(corpus, index, embedder)
    return index


def _mark(hit_id: str, case: Showcase) -> str:
    if hit_id in case.relevant:
        return "[green]✓[/]"
    if hit_id in case.negatives:
        return "[red]✗[/]"
    return " "


def run_demo(console: Console, k: int = 5, rebuild: bool = False) -> None:
    started = time.perf_counter()
    with console.status("building the demo index (first run embeds ~340 passages)..."):
        index = demo_index(rebuild)
        retriever = Retriever(index, get_embedder())
    console.print(
        f"demo index: {index.count()} passages at {index.path} "
        f"(ready in {time.perf_counter() - started:.1f}s)\n"
    )
    for case in showcases():
        dense = retriever.dense(case.question, k=k)
        logical = retriever.search(case.query, SearchOptions(k=k)).hits
        table = Table(
            title=f"[bold]{case.question}[/]\nlogical query: {case.query}",
            title_justify="left",
            show_lines=True,
        )
        table.add_column("#", justify="right")
        table.add_column("dense: the whole question as one vector", ratio=1)
        table.add_column("itlr: logical query", ratio=1)
        for rank in range(k):
            cells = []
            for hits in (dense, logical):
                if rank < len(hits):
                    hit = hits[rank]
                    cells.append(f"{_mark(hit.id, case)} {hit.id} {hit.text[:110]}")
                else:
                    cells.append("")
            table.add_row(str(rank + 1), *cells)
        console.print(table)
        excluded = (
            sum(h.id in case.negatives for h in dense),
            sum(h.id in case.negatives for h in logical),
        )
        console.print(
            f"excluded-topic passages in the top {k}: dense {excluded[0]}, itlr {excluded[1]}"
            f"  ({case.why})\n",
            highlight=False,
        )
    console.print("✓ satisfies the query   ✗ about what the question excludes")
