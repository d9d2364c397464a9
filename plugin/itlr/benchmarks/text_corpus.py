"""Real text for measurements that depend on meaning, and random logical queries over it."""

from __future__ import annotations

import json
import random

from itlr.documents import read_jsonl
from itlr.query import And, Node, Not, Or, Query, Term
from itlr.records import Document
from itlr.resources import data_file

DEMO_PHRASES = [
    "vitamin D",
    "bone health",
    "immune system",
    "depression and mood",
    "electric car batteries",
    "charging stations",
    "purchase price",
    "Python",
    "data analysis",
    "web frameworks",
    "coffee and sleep",
    "brewing methods",
    "Paris museums",
    "French food",
    "running injuries",
    "Roman army",
    "solar power",
    "dog training",
    "guitar",
    "copyright law",
]


def random_tree(rng: random.Random, vocabulary: list[str], depth: int = 0) -> Node:
    """A random logical tree: n-ary AND/OR, NOT, occasional weights, at most 3 levels."""
    if depth >= 2 or rng.random() < 0.35:
        return Term(rng.choice(vocabulary), rng.choice([1.0, 1.0, 1.0, 0.5, 2.0]))
    kind = rng.choice(["and", "or", "not", "and"])
    if kind == "not":
        return Not(random_tree(rng, vocabulary, depth + 1))
    children = tuple(random_tree(rng, vocabulary, depth + 1) for _ in range(rng.randint(2, 3)))
    return And(children) if kind == "and" else Or(children)


def random_queries(vocabulary: list[str], count: int, rng: random.Random) -> list[Query]:
    return [Query(random_tree(rng, vocabulary)) for _ in range(count)]


def recall_corpus(passages: int | None = None) -> tuple[list[Document], list[str]]:
    """The demo corpus plus every topic-bank sentence as its own passage, and a phrase list.

    With `passages` above its 1,146 passages, the corpus is grown to that many by joining two
    of them at random (seeded): text whose vectors are clustered by topic, as real embeddings
    are, at the scale where the embedded engine searches an HNSW graph. Random unit vectors,
    which latency uses, have no such structure: no graph finds their nearest neighbours."""
    documents = list(read_jsonl(data_file("demo", "corpus.jsonl")))
    vocabulary = list(DEMO_PHRASES)
    topics_path = data_file("topics.json")
    if topics_path.exists():
        topics = json.loads(topics_path.read_text())["topics"]
        for topic in topics:
            vocabulary.append(topic["name"])
            for number, sentence in enumerate(topic["sentences"]):
                documents.append(Document(f"{topic['name']}-{number}", sentence, {}))
    base = len(documents)
    for number, (first, second) in enumerate(grown_pairs(base, passages)):
        text = f"{documents[first].text} {documents[second].text}"
        documents.append(Document(f"joined-{number}", text, {}))
    return documents, vocabulary


def grown_pairs(base: int, passages: int | None) -> list[tuple[int, int]]:
    """The (seeded) pairs of base passages that grow a corpus of `base` to `passages`."""
    rng = random.Random(11)
    return [tuple(rng.sample(range(base), 2)) for _ in range(max(0, (passages or 0) - base))]  # type: ignore[misc]
