"""A cluster backend is composed, not filled in (issue 54.2): what differs between OpenSearch and
Elasticsearch is an `EngineSpecifics` passed to `ClusterBackend` whole, and the backend holds its
searches and its writes as collaborators built with it; no module of the cluster backends keeps
an abstract hook for a subclass to fill; the backend and the hash guard import one way; the
embedded engine's knn rounds read only its public members; a dialect's reading of a response is
named for what it returns (`ranking`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import itlr
from itlr.engines.cluster import ClusterBackend
from itlr.engines.opensearch import OPENSEARCH, OpenSearchSpecifics
from itlr.options import SearchOptions
from itlr.query import parse
from itlr.results import Ranking

ENGINES = Path(itlr.__file__).parent / "engines"
CLUSTER_BACKEND_MODULES = [
    "cluster.py",
    "cluster_search.py",
    "cluster_writes.py",
    "cluster_certified.py",
    "opensearch.py",
    "elasticsearch.py",
]


def test_the_cluster_backend_modules_have_no_abstract_hooks() -> None:
    hooks = [
        f"{name}:{node.lineno}"
        for name in CLUSTER_BACKEND_MODULES
        for node in ast.walk(ast.parse((ENGINES / name).read_text()))
        if isinstance(node, ast.Raise)
        and isinstance(node.exc, ast.Name | ast.Call)
        and "NotImplementedError" in ast.unparse(node.exc)
    ]
    assert hooks == []


def test_the_embedded_rounds_read_only_public_members_of_the_embedded_backend() -> None:
    """knn mode's rounds on the embedded engine (itlr.engines.embedded_knn) name what they read
    of the backend as a Protocol: of its public members, not of its private helpers."""
    tree = ast.parse((ENGINES / "embedded_knn.py").read_text())
    (protocol,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "KnnBackend"
    ]
    names = [
        node.name if isinstance(node, ast.FunctionDef) else ast.unparse(node.target)
        for node in protocol.body
        if isinstance(node, ast.FunctionDef | ast.AnnAssign)
    ]
    assert names and not [name for name in names if name.startswith("_")]
    from itlr.engines.embedded import EmbeddedBackend

    assert all(hasattr(EmbeddedBackend, name) for name in names if name != "routing_min_rows")


def imported_modules(tree: ast.AST) -> set[str]:
    return {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_the_backend_imports_the_hash_guard_and_not_the_other_way_round() -> None:
    """No circle between the backend and itlr's hash guard, not even one hidden in a function
    or behind TYPE_CHECKING: the guard names what it needs of the index as a Protocol."""
    guard = ast.parse((ENGINES.parent / "hash_guard.py").read_text())
    # The cluster client layer (cluster_client.py), whose operation the guard's check is, is
    # a leaf of the engines: it imports no engine module, so the guard may import it.
    client_layer = ast.parse((ENGINES / "cluster_client.py").read_text())
    assert not {m for m in imported_modules(client_layer) if m.startswith("itlr.engines")}
    assert not {
        m
        for m in imported_modules(guard)
        if m.startswith("itlr.engines.cluster") and m != "itlr.engines.cluster_client"
    }
    backend = ast.parse((ENGINES / "cluster.py").read_text())
    in_functions = [
        ast.unparse(node)
        for function in ast.walk(backend)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert in_functions == []
    assert "itlr.hash_guard" in imported_modules(backend)


class CountedMultiSearches(OpenSearchSpecifics):
    """OpenSearch's specifics, counting the `_msearch` requests the backend sends through them
    (each still goes to the real cluster)."""

    def __init__(self) -> None:
        self.sent = 0

    def msearch(self, client: Any, lines: list[dict[str, Any]]) -> Any:
        self.sent += 1
        return super().msearch(client, lines)


@pytest.mark.opensearch
def test_a_cluster_backend_searches_with_the_engine_specifics_passed_in(
    opensearch_demo, embedder
) -> None:
    specifics = CountedMultiSearches()
    composed = ClusterBackend(
        opensearch_demo.client,
        opensearch_demo.index_name,
        embedder.name,
        embedder.dims,
        url=opensearch_demo.url,
        specifics=specifics,
    )
    composed.ensure_index()
    assert (composed.engine, composed.vector_type) == ("opensearch", "knn_vector")
    query = parse('"vitamin D benefits" AND NOT "bone health"')
    vectors = embedder.encode(list(query.terms))
    options = SearchOptions(k=5, mode="knn")
    found = composed.search(query, vectors, options)
    expected = opensearch_demo.search(query, vectors, options)
    assert [(h.id, round(h.score, 5)) for h in found.hits] == [
        (h.id, round(h.score, 5)) for h in expected.hits
    ]
    assert found.hits and specifics.sent >= 1  # knn mode's certified rounds: one `_msearch` each
    assert composed.searches.index is composed and composed.writes.index is composed
    assert OPENSEARCH.name == composed.engine


@pytest.mark.opensearch
def test_a_dialect_reads_a_ranking_and_its_old_name_hits_warns(opensearch_demo, embedder) -> None:
    """`Dialect.ranking` names what it returns (a Ranking); `Dialect.hits`, the name it had,
    still answers alike, with a DeprecationWarning."""
    dialect = opensearch_demo.dialect
    vector = embedder.encode(["vitamin D"])[0]
    response = dict(
        opensearch_demo.client.search(
            index=opensearch_demo.index_name, body=dialect.dense_body(vector, 3, None, None)
        )
    )
    ranking = dialect.ranking(response)
    assert isinstance(ranking, Ranking) and len(ranking.hits) == 3
    with pytest.warns(DeprecationWarning, match="Dialect.hits is deprecated: call Dialect.ranking"):
        old = dialect.hits(response)
    assert [(h.id, h.score) for h in old.hits] == [(h.id, h.score) for h in ranking.hits]
