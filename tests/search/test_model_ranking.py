"""With the real bundled model: logic changes the ranking where dense retrieval cannot."""

from __future__ import annotations

import pytest

from itlr.engines.embedded import EmbeddedBackend
from itlr.options import SearchOptions
from itlr.retriever import Retriever
from itlr.scoring import TruthMap

IMMUNITY = "Vitamin D helps the immune system fight infections such as colds and flu."
BONES = "Vitamin D helps the body absorb calcium, which keeps bones strong and healthy."


@pytest.fixture
def retriever(tmp_path, embedder) -> Retriever:
    index = EmbeddedBackend.create(tmp_path / "vit", embedder.name, embedder.dims)
    texts = [IMMUNITY, BONES, "The Roman army built roads across its empire."]
    index.add(["immunity", "bones", "rome"], texts, embedder.encode(texts))
    return Retriever(index, embedder)


def test_bundled_model_gives_384_dim_unit_vectors(embedder) -> None:
    vectors = embedder.encode(["vitamin D", "bone health"])
    assert vectors.shape == (2, 384)
    assert abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-5


def test_logical_query_puts_immunity_above_bone_health(retriever: Retriever) -> None:
    result = retriever.search('"vitamin D benefits" AND NOT "bone health"', SearchOptions(k=3))
    ids = [h.id for h in result.hits]
    assert ids.index("immunity") < ids.index("bones")
    by_id = {h.id: h for h in result.hits}
    assert by_id["bones"].truths["bone health"] > by_id["immunity"].truths["bone health"]


def test_dense_retrieval_of_the_question_does_not_separate_them_as_well(retriever) -> None:
    dense = {h.id: h.score for h in retriever.dense("vitamin D benefits other than bone health")}
    logical = {
        h.id: h.score for h in retriever.search('"vitamin D benefits" AND NOT "bone health"').hits
    }
    dense_margin = dense["immunity"] - dense["bones"]
    logical_margin = (logical["immunity"] - logical["bones"]) / logical["immunity"]
    assert logical_margin > dense_margin


def test_demo_showcases_keep_excluded_passages_out_of_the_top_5() -> None:
    from itlr.demo import demo_index, showcases
    from itlr.embed import get_embedder

    retriever = Retriever(demo_index(), get_embedder())
    dense_negatives = 0
    for case in showcases():
        # Cosine truths (the default before hybrid truths) rank 4 relevant passages in the top 5.
        logical = retriever.search(case.query, SearchOptions(k=5, truth=TruthMap("clamp"))).hits
        assert not case.negatives & {h.id for h in logical}, case.query
        assert len(case.relevant & {h.id for h in logical}) >= 4, case.query
        # The default lifts a passage that is judged neither way (vitamin D "beyond the
        # skeleton", which names the bone benefits too) to second place in one showcase.
        default = {h.id for h in retriever.search(case.query, SearchOptions(k=5)).hits}
        assert not case.negatives & default, case.query
        assert len(case.relevant & default) >= 3, case.query
        dense_negatives += len(case.negatives & {h.id for h in retriever.dense(case.question, 5)})
    assert dense_negatives >= 3
