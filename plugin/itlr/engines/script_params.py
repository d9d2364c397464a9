"""The params the Painless scripts read: the query's program, operators and truth values, the
term vectors packed into one string, and for hybrid truths the query tokens with the index's
statistics. Data only, never script source."""

from __future__ import annotations

import base64
from typing import Any, cast

import numpy as np

from itlr.engines.layout import IndexLayout
from itlr.errors import ConfigurationError
from itlr.hard_filter import EXCLUDED_SCORE_BASE
from itlr.lexical import (
    K1,
    LENGTH_FIELD,
    TOKEN_KEYS_FIELD,
    TOKENS_FIELD,
    B,
    CorpusStats,
    term_tokens,
    token_key,
)
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.scoring import TRUTH_CODES


def score_params(
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    layout: IndexLayout,
    statistics: CorpusStats | None = None,
) -> dict[str, Any]:
    """Everything the scoring script reads; the program is the one numpy runs. Hybrid truths
    also need the index's statistics for the query's tokens (`term_statistics_request`)."""
    vectors = np.asarray(term_vectors, dtype=np.float32)
    return {
        **script_params(query, options, layout, statistics),
        "vectors": packed_floats(vectors),
        "dims": int(vectors.shape[-1]) if vectors.size else 0,
    }


def script_params(
    query: Query,
    options: SearchOptions,
    layout: IndexLayout,
    statistics: CorpusStats | None = None,
) -> dict[str, Any]:
    """`score_params` but the term vectors and their dimensions: the same for every search of
    a query with the same options and statistics."""
    params = {
        "field": layout.vector_field,
        **query.program.to_params(),
        **options.ops.to_params(),
        **options.truth.to_params(query.terms),
    }
    if options.truth.uses_lexical:
        params.update(lexical_params(query, options, statistics))
    return params


def packed_floats(values: np.ndarray) -> str:
    """Floats for a script's params as one string: float32, little-endian, base64, in row-major
    order. The engine parses a JSON list of numbers into one boxed object per number for every
    search, before the script runs; the scripts decode this string once per segment, to the same
    float32 values. It takes a quarter of the list's bytes (docs/benchmarks.md, "Latency")."""
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")


def lexical_params(
    query: Query, options: SearchOptions, statistics: CorpusStats | None
) -> dict[str, Any]:
    if statistics is None:
        raise ConfigurationError(
            "hybrid truth values need the index's token statistics: count them on the cluster "
            "(`term_statistics_request`, read by `read_term_statistics`) and pass them as `statistics`"
        )
    weights = options.truth.lexical_shares(query.terms, query.negated_terms)
    tokens = [term_tokens(term, statistics) for term in query.terms]
    return {
        "keys_field": TOKEN_KEYS_FIELD,
        "tokens_field": TOKENS_FIELD,
        "length_field": LENGTH_FIELD,
        "k1": K1,
        "b": B,
        "avgdl": statistics.average_length,
        "lex_weight": list(weights),
        "lex_tokens": [[f"{token} " for token in t.tokens] for t in tokens],
        "lex_keys": [[token_key(token) for token in t.tokens] for t in tokens],
        "lex_shares": [list(t.weights) for t in tokens],
    }


def exclusion_params(
    query: Query,
    term_vectors: np.ndarray,
    options: SearchOptions,
    layout: IndexLayout,
) -> dict[str, Any]:
    """The hard filter's params (scripts/painless/itlr_exclude.painless): the excluded terms'
    vectors, then their rivals' (the positive terms, under the relative rule), packed."""
    hard = options.hard
    assert hard is not None
    excluded = query.excluded_terms
    chosen = [query.terms.index(t) for t in (*excluded, *hard.rivals(query))]
    truth = options.truth.to_params(query.terms)
    vectors = np.asarray(term_vectors, dtype=np.float32)
    return {
        "field": layout.vector_field,
        "vectors": packed_floats(vectors[chosen]),
        "dims": int(vectors.shape[-1]) if vectors.size else 0,
        "excluded": len(excluded),
        # The hard filter judges the cosine evidence: hybrid truths clamp (itlr.hard_filter).
        "truth": TRUTH_CODES["clamp"] if options.truth.uses_lexical else truth["truth"],
        "tau": [cast("list[float]", truth["tau"])[i] for i in chosen],
        "lam": [cast("list[float]", truth["lam"])[i] for i in chosen],
        "base": EXCLUDED_SCORE_BASE,
    }
