"""Every engine keeps the whole engine contract (itlr.engines.Backend), so that no caller asks
whether a method exists, and answers a search with one SearchResult it built."""

from __future__ import annotations

import numpy as np
import pytest

from itlr.engines import Backend
from itlr.engines.elasticsearch import ElasticsearchBackend
from itlr.engines.embedded import EmbeddedBackend
from itlr.engines.opensearch import OpenSearchBackend
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions
from itlr.query import parse
from itlr.results import Hit, SearchResult

CONTRACT = sorted(name for name in vars(Backend) if not name.startswith("_"))


def unit(rows: int, dims: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, dims)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture()
def embedded(tmp_path) -> EmbeddedBackend:
    index = EmbeddedBackend.create(tmp_path / "idx", "random", 8)
    index.add([f"d{i}" for i in range(20)], [f"text {i}" for i in range(20)], unit(20, 8, 1))
    return index


def engines(embedded: EmbeddedBackend) -> list[object]:
    # Cluster backends without a client: the contract is what the classes offer.
    return [
        embedded,
        OpenSearchBackend(None, "idx", "random", 8),
        ElasticsearchBackend(None, "idx", "random", 8, version="8.15.0"),
    ]


def test_the_contract_names_what_callers_use() -> None:
    assert {"search", "search_vector", "writing", "fingerprints", "coverage", "compact"} <= set(
        CONTRACT
    )


def test_every_engine_offers_every_member_of_the_contract(embedded: EmbeddedBackend) -> None:
    for engine in engines(embedded):
        assert [name for name in CONTRACT if not hasattr(engine, name)] == [], type(engine)


def test_an_embedded_search_returns_one_result_with_hits_exact_and_no_coverage(
    embedded: EmbeddedBackend,
) -> None:
    query = parse('"a" AND NOT "b"')
    result = embedded.search(query, unit(2, 8, 2), SearchOptions(k=5, mode="exact"))
    assert isinstance(result, SearchResult) and result.query is query
    assert len(result.hits) == 5 and all(isinstance(hit, Hit) for hit in result)
    assert result.exact is True and result.coverage is None and result.warnings == ()
    assert [hit.id for hit in result] == [hit.id for hit in result.hits]


def test_a_filter_on_a_field_no_document_has_is_a_warning_of_that_search(
    embedded: EmbeddedBackend,
) -> None:
    options = SearchOptions(k=3, filter={"term": {"metadata.lang": "en"}})
    result = embedded.search(parse('"a"'), unit(1, 8, 3), options)
    assert result.hits == [] and len(result.warnings) == 1 and "lang" in result.warnings[0]
    assert embedded.search(parse('"a"'), unit(1, 8, 3), SearchOptions(k=3)).warnings == ()


def test_the_embedded_engine_answers_the_cluster_members_honestly(
    embedded: EmbeddedBackend,
) -> None:
    assert embedded.engine == "embedded" and embedded.coverage() is None
    assert embedded.foreign is False and embedded.top_fields == frozenset()
    embedded.prepare_writes()
    embedded.refresh()
    embedded.check_replacements({"d1": {}}, embedded.fingerprints(["d1"]))
    with embedded.writing():
        assert embedded.delete(["d1", "missing"]) == 1


def test_a_cluster_index_refuses_compact_with_the_request_that_does_it() -> None:
    with pytest.raises(ConfigurationError, match="_forcemerge"):
        OpenSearchBackend(None, "idx", "random", 8).compact()
