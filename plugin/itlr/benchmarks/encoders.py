"""The encoder backends side by side (`itlr bench encoders`): encode time, and whether the top 10
stays what torch gives.

Speed: the terms of one query in one batch (1, 3, 5 terms) and a 32-passage batch, median of
`repeats` calls straight to the encoder (the term cache is not in the way).

Agreement, the rule for making an encoder the default (issue 24): for each corpus every
document and every query term is encoded by the backend, the documents go into a real embedded
index and each query runs in exact mode with k = 10; a query agrees when its ten ids are the
same, in the same order, as with torch. The largest score difference is taken over the
documents both top 10s hold.
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from itlr.embed import Embedder
from itlr.query import Query

K = 10
TERMS = ["benefits of vitamin D", "immune system", "mood", "bone health", "muscle strength"]


@dataclass(frozen=True)
class Speed:
    encoder: str
    load_seconds: float
    terms_ms: dict[int, float]
    passages_ms: float


@dataclass(frozen=True)
class Agreement:
    corpus: str
    encoder: str
    documents: int
    queries: int
    identical: int
    max_score_diff: float

    @property
    def holds(self) -> bool:
        return self.identical == self.queries and self.max_score_diff <= 1e-3


@dataclass(frozen=True)
class Corpus:
    name: str
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    queries: tuple[str | Query, ...]


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up: first-call allocations are not the encoder's steady cost
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def measure_speed(
    encoder: str, passages: Sequence[str], repeats: int = 20
) -> tuple[Embedder, Speed]:
    Embedder(encoder=encoder)  # a first use exports the ONNX model: not what a load costs
    started = time.perf_counter()
    embedder = Embedder(encoder=encoder)
    load_seconds = time.perf_counter() - started
    terms_ms = {
        count: _median_ms(functools.partial(embedder.encode, TERMS[:count]), repeats)
        for count in (1, 3, 5)
    }
    batch = list(passages[:32])
    passages_ms = _median_ms(lambda: embedder.encode(batch), repeats)
    return embedder, Speed(encoder, load_seconds, terms_ms, passages_ms)


def top_hits(embedder: Embedder, corpus: Corpus, folder: Path) -> list[list[tuple[str, float]]]:
    """Each query's top 10 (id, score) on an embedded index of the corpus, exact mode."""
    from itlr.engines.embedded import EmbeddedBackend
    from itlr.options import SearchOptions
    from itlr.retriever import Retriever

    index = EmbeddedBackend.create(
        folder / f"{corpus.name}-{embedder.encoder}", embedder.name, embedder.dims
    )
    index.add(list(corpus.ids), list(corpus.texts), embedder.encode(list(corpus.texts)))
    retriever = Retriever(index, embedder)
    options = SearchOptions(k=K, mode="exact")
    return [
        [(hit.id, hit.score) for hit in retriever.search(query, options).hits]
        for query in corpus.queries
    ]


def compare(
    corpus: Corpus,
    encoder: str,
    reference: list[list[tuple[str, float]]],
    hits: list[list[tuple[str, float]]],
) -> Agreement:
    identical = 0
    largest = 0.0
    for expected, got in zip(reference, hits, strict=True):
        identical += [i for i, _ in expected] == [i for i, _ in got]
        scores = dict(got)
        largest = max([largest, *(abs(score - scores[i]) for i, score in expected if i in scores)])
    return Agreement(corpus.name, encoder, len(corpus.ids), len(corpus.queries), identical, largest)


def demo_corpus() -> Corpus:
    from itlr.demo import showcases
    from itlr.documents import read_jsonl
    from itlr.resources import data_file

    docs = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    queries = tuple(case.query for case in showcases())
    return Corpus("demo", tuple(d.id for d in docs), tuple(d.text for d in docs), queries)


def synthetic_corpus(per_template: int, seed: int = 0) -> Corpus:
    """The synthetic benchmark's template queries over their pooled documents (as
    `itlr bench synthetic` ranks them)."""
    from itlr.evaluation.synthetic import TopicBank, template_queries

    queries = list(template_queries(TopicBank.load(seed=seed), per_template, seed))
    docs = {d.id: d.text for q in queries for d in q.docs}
    return Corpus(
        f"synthetic ({per_template} per template)",
        tuple(docs),
        tuple(docs.values()),
        tuple(q.query for q in queries),
    )


def beir_corpus(folder: Path, split: str = "dev") -> Corpus:
    """A BEIR folder's judged questions, rewritten by the rule rewriter."""
    from itlr.evaluation.beir import resolve, rewriter_for
    from itlr.evaluation.datasets import load_beir

    dataset = load_beir(folder, split=split)
    rewriter = rewriter_for("rules")
    queries = tuple(resolve(query, rewriter).case.query for query in dataset.queries)
    return Corpus(
        f"{dataset.name} {split} (rules)",
        tuple(d.id for d in dataset.corpus),
        tuple(d.text for d in dataset.corpus),
        queries,
    )


def run(
    encoders: Sequence[str],
    corpora: Sequence[Corpus],
    repeats: int = 20,
    on_stage: Callable[[str], None] | None = None,
) -> tuple[list[Speed], list[Agreement]]:
    """Speed of every encoder, and the agreement of every encoder but torch with torch."""
    passages = corpora[0].texts if corpora else tuple(TERMS)
    speeds: list[Speed] = []
    agreements: list[Agreement] = []
    reference: dict[str, list[list[tuple[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="itlr-encoders-") as scratch:
        for encoder in ("torch", *(e for e in encoders if e != "torch")):
            if on_stage:
                on_stage(f"{encoder}: loading and timing")
            embedder, speed = measure_speed(encoder, passages, repeats)
            if encoder in encoders:
                speeds.append(speed)
            for corpus in corpora:
                if on_stage:
                    on_stage(f"{encoder}: {corpus.name}, {len(corpus.ids)} documents")
                hits = top_hits(embedder, corpus, Path(scratch))
                if encoder == "torch":
                    reference[corpus.name] = hits
                else:
                    agreements.append(compare(corpus, encoder, reference[corpus.name], hits))
    return speeds, agreements


def markdown(speeds: Sequence[Speed], agreements: Sequence[Agreement]) -> list[str]:
    lines = [
        "| encoder | warm load s | 1 term ms | 3 terms ms | 5 terms ms | 32 passages ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in speeds:
        lines.append(
            f"| {s.encoder} | {s.load_seconds:.1f} | {s.terms_ms[1]:.1f} | {s.terms_ms[3]:.1f} | "
            f"{s.terms_ms[5]:.1f} | {s.passages_ms:.1f} |"
        )
    if agreements:
        lines += [
            "",
            "| encoder | corpus | documents | top 10 identical / queries | max score diff | "
            "default rule |",
            "|---|---|---:|---:|---:|---|",
        ]
        for a in agreements:
            lines.append(
                f"| {a.encoder} | {a.corpus} | {a.documents} | {a.identical} / {a.queries} | "
                f"{a.max_score_diff:.2e} | {'holds' if a.holds else 'fails'} |"
            )
    return lines
