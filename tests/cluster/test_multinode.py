"""Against a real three-node OpenSearch cluster on loopback: a sharded, replicated index scores
like the single-shard reference, kNN candidates are gathered per shard, and queries keep
answering the same hits when a node is killed.

Marker `multinode`. The cluster (three JVMs of 512 MB heap) starts once per module, in about
45 s on this 2-core machine; the tests skip only where the machine lacks the memory for it.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import itlr
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.options import SearchOptions
from itlr.resources import data_file
from opensearch_fixture import load_local_module
from parity import (
    check_exact_scores_match_the_embedded_engine,
    check_knn_mode_matches_exact_when_the_budget_covers_the_corpus,
    random_cases,
)

pytestmark = [pytest.mark.multinode, pytest.mark.opensearch]

NODES = 3
SHARDS, REPLICAS = 3, 1
# Three nodes of 512 MB heap plus their native memory and page cache.
NEEDED_BYTES = 4 << 30
# The demo's own queries, and two shapes they lack (a disjunction, a three-term conjunction).
DEMO_QUERIES = [
    *(case["query"] for case in json.loads(data_file("demo", "queries.json").read_text())),
    '("coffee and sleep" OR "brewing methods") AND NOT "French food"',
    '"electric car batteries" AND "charging stations" AND NOT "purchase price"',
]


def encoded(query: itlr.Query, embedder) -> np.ndarray:
    return embedder.encode(list(query.terms))


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    free = available_memory()
    if free < NEEDED_BYTES:
        pytest.skip(
            f"a {NODES}-node cluster needs about {NEEDED_BYTES >> 30} GiB of free memory, "
            f"this machine has {free / 2**30:.1f} GiB available"
        )
    local = load_local_module()
    started = local.start_cluster(NODES, "512m")
    try:
        yield started
    finally:
        started.stop()


def sharded_backend(url: str, embedder, corpus, corpus_vectors) -> OpenSearchBackend:
    """The demo corpus in an index of 3 primaries and 1 replica, created through the REST API
    with itlr's mapping and the user's own shard settings, then filled through itlr."""
    client = Connection(url).opensearch()
    backend = OpenSearchBackend(
        client, f"itlr-sharded-{uuid.uuid4().hex[:8]}", embedder.name, embedder.dims, url=url
    )
    body = backend.dialect.mapping(embedder.dims, embedder.name)
    body["settings"]["index"].update(number_of_shards=SHARDS, number_of_replicas=REPLICAS)
    client.indices.create(index=backend.index_name, body=body)
    failures = backend.add(
        [d.id for d in corpus], [d.text for d in corpus], corpus_vectors, [d.fields for d in corpus]
    )
    assert failures == {}
    backend.refresh()
    client.cluster.health(index=backend.index_name, wait_for_status="green")
    return backend


@pytest.fixture(scope="module")
def sharded(cluster, embedder, corpus, corpus_vectors) -> OpenSearchBackend:
    return sharded_backend(cluster.url, embedder, corpus, corpus_vectors)


def test_the_sharded_index_spreads_its_primaries_and_replicas_over_the_nodes(sharded) -> None:
    shards = sharded.client.cat.shards(index=sharded.index_name, format="json")
    assert len(shards) == SHARDS * (1 + REPLICAS)
    assert {s["state"] for s in shards} == {"STARTED"}
    assert len({s["node"] for s in shards}) == NODES


def test_exact_scores_on_three_shards_match_the_embedded_engine(
    sharded, embedded, vocabulary_vectors
) -> None:
    check_exact_scores_match_the_embedded_engine(
        sharded, embedded, vocabulary_vectors, random_cases(30, seed=11)
    )


def test_knn_mode_on_three_shards_matches_exact_when_the_budget_covers_the_corpus(
    sharded, embedded, vocabulary_vectors, corpus
) -> None:
    check_knn_mode_matches_exact_when_the_budget_covers_the_corpus(
        sharded, embedded, vocabulary_vectors, corpus, random_cases(15, seed=12)
    )


@pytest.mark.parametrize("mode", ["knn", "exact"])
def test_demo_queries_give_the_same_hits_and_scores_as_the_embedded_engine(
    sharded, embedded, embedder, mode: str
) -> None:
    for text in DEMO_QUERIES:
        query = itlr.parse(text)
        vectors = encoded(query, embedder)
        for hard_filter in (None, 0.5):
            options = SearchOptions(k=10, mode=mode, hard_filter=hard_filter)  # type: ignore[arg-type]
            remote = sharded.search(query, vectors, options)
            local = embedded.search(query, vectors, options)
            assert [h.id for h in remote] == [h.id for h in local], (text, mode, hard_filter)
            for mine, theirs in zip(remote, local, strict=True):
                assert mine.score == pytest.approx(theirs.score, abs=1e-4)


def test_a_knn_clause_gathers_its_k_neighbours_on_every_shard(sharded, embedder) -> None:
    # OpenSearch's `k` is per shard: a candidate search of budget b brings back up to
    # shards * b documents, so a sharded index never sees fewer candidates than one shard.
    query = itlr.parse('"vitamin D"')
    budget = 20
    options = SearchOptions(k=10, candidates=budget, plan="per-term")
    lexical = sharded.term_statistics(query)
    vectors = encoded(query, embedder)
    (search,) = sharded.dialect.search_request(query, vectors, options, lexical).searches
    body = {"size": 1000, "query": sharded.dialect.knn_clause(search, None), "_source": False}
    found = sharded.client.search(index=sharded.index_name, body=body)["hits"]["hits"]
    assert len(found) == SHARDS * budget


def test_queries_answer_the_same_hits_after_the_node_the_client_used_is_killed(
    cluster, embedder, corpus, corpus_vectors
) -> None:
    # The client knows every node (`url` lists them, comma-separated); the node it sends to
    # first dies. Searches are idempotent: the client retries them on a live node.
    backend = sharded_backend(",".join(cluster.urls), embedder, corpus, corpus_vectors)
    cases = [itlr.parse(text) for text in DEMO_QUERIES]
    vectors = [encoded(q, embedder) for q in cases]
    options = SearchOptions(k=10)
    before = [
        [h.id for h in backend.search(q, v, options)] for q, v in zip(cases, vectors, strict=True)
    ]

    errors: list[str] = []
    answers: list[tuple[float, int, list[str]]] = []
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set() and n < 5_000:
            i = n % len(cases)
            began = time.monotonic()
            try:
                hits = backend.search(cases[i], vectors[i], options)
                answers.append((began, i, [h.id for h in hits]))
            except Exception as err:  # counted and reported, never fatal
                errors.append(f"{type(err).__name__}: {err}")
            n += 1

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    time.sleep(2)
    killed_at = time.monotonic()
    cluster.kill(0)
    health = cluster.wait_for("yellow", NODES - 1, timeout=120)
    recovered_at = time.monotonic()
    time.sleep(3)
    stop.set()
    worker.join(timeout=60)
    assert not worker.is_alive(), "a query hung after the node died"

    after = [a for a in answers if a[0] > recovered_at]
    during = [a for a in answers if killed_at <= a[0] <= recovered_at]
    wrong = [a for a in answers if a[2] != before[a[1]]]
    print(
        f"\nnode kill: {len(answers) + len(errors)} queries, {len(errors)} errors "
        f"({sorted(set(errors))[:3]}), {len(answers)} answered; cluster {health['status']} with "
        f"{health['number_of_nodes']} nodes {recovered_at - killed_at:.1f} s after the kill; "
        f"{len(during)} answered during the switch, {len(after)} after it; "
        f"{len(wrong)} with other hits"
    )
    assert after, "no query ran after the cluster re-routed"
    # A query may fail during the switch, but none may answer from only some of the shards.
    assert wrong == []
