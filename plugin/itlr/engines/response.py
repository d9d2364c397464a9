"""A search response read into hits: ids, scores, text and fields, and when the hits' vectors
came back (--explain) each hit's per-term truths and explanation, recomputed here and checked
against the engine's score."""

from __future__ import annotations

from typing import Any

import numpy as np

from itlr.composition import explain
from itlr.engines.layout import IndexLayout, own_fields
from itlr.explain import disagreement
from itlr.lexical import LENGTH_FIELD, TOKENS_FIELD, CorpusStats, bm25_truth, term_tokens
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.results import Hit, Ranking

# What itlr writes beside a document (itlr_hash, itlr_hash_was, the token fields, ...).
ITLR_FIELD_PREFIX = "itlr_"


def ranking_from_response(
    response: dict[str, Any],
    query: Query | None,
    term_vectors: np.ndarray | None,
    options: SearchOptions | None,
    layout: IndexLayout,
    statistics: CorpusStats | None = None,
) -> Ranking:
    """Hits with per-term truths and an explanation tree when the response carries the hits'
    vectors (--explain); hybrid truths also read the hits' stored tokens with the statistics
    the search used. A hit whose explanation does not add up to the engine's score is a
    warning."""
    hits = []
    warnings = []
    for raw in response["hits"]["hits"]:
        source = raw.get("_source") or {}
        truths: dict[str, float] = {}
        explanation = None
        vector = source.get(layout.vector_field)
        if vector is not None and query is not None and term_vectors is not None and options:
            unit = np.asarray(vector, dtype=np.float32)
            unit = unit / (np.linalg.norm(unit) or 1.0)
            cosines = (np.asarray(term_vectors, dtype=np.float32) @ unit)[None, :]
            found = _lexical_row(source, query, options, statistics)
            values = options.truth.apply(
                cosines,
                query.terms,
                found,
                options.truth.lexical_weights(query.terms, query.negated_terms),
            )[0]
            truths = {t: float(v) for t, v in zip(query.terms, values, strict=True)}
            if options.explain:
                explanation = explain(query, cosines, options.ops, options.truth, found)[0]
                warning = disagreement(str(raw["_id"]), _score(raw), explanation)
                if warning:
                    warnings.append(warning)
        hits.append(
            Hit(
                id=str(raw["_id"]),
                score=_score(raw),
                truths=truths,
                text=str(source.get(layout.text_field, "")),
                fields=_fields(source, layout),
                highlights={k: list(v) for k, v in (raw.get("highlight") or {}).items()},
                sort=raw.get("sort"),
                explanation=explanation,
            )
        )
    return Ranking(hits, tuple(warnings))


def _lexical_row(
    source: dict[str, Any],
    query: Query,
    options: SearchOptions,
    statistics: CorpusStats | None,
) -> np.ndarray | None:
    """The hit's lexical truth per term (1 x terms) from its stored tokens, for hybrid truths."""
    if not options.truth.uses_lexical:
        return None
    values = [str(v).rsplit(" ", 1) for v in source.get(TOKENS_FIELD) or []]
    counts = {token: int(count) for token, count in values}
    stats = statistics or CorpusStats(0, 0, {})
    found = [
        bm25_truth(
            counts, int(source.get(LENGTH_FIELD) or 0), term_tokens(t, stats), stats.average_length
        )
        for t in query.terms
    ]
    return np.array([found])


def _fields(source: dict[str, Any], layout: IndexLayout) -> dict[str, Any]:
    """itlr's own documents keep their fields under the metadata field; an index made
    elsewhere has them at the top of _source: all of them but the text, the vector and
    whatever itlr wrote beside them (every `itlr_` field, named in a list or not)."""
    metadata = source.get(layout.metadata_field)
    if layout.tiebreak == "doc_id" and isinstance(metadata, dict):
        return dict(metadata)
    return {
        name: value
        for name, value in own_fields(source, layout).items()
        if not name.startswith(ITLR_FIELD_PREFIX)
    }


def _score(raw: dict[str, Any]) -> float:
    """A hit's score: `_score`, or the first sort value when the engine left `_score` out (the
    first sort key of a logical query is the score)."""
    if raw.get("_score") is not None:
        return float(raw["_score"])
    sort = raw.get("sort") or [0.0]
    return float(sort[0]) if isinstance(sort[0], int | float) else 0.0
