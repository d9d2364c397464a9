"""What hybrid truths ask of a cluster beyond the logical query: the index's token statistics
(one aggregation, and reading its response), the cosine fallback when no document carries the
lexical fields, and the clauses that find the documents mentioning a query token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from itlr.lexical import LENGTH_FIELD, TOKEN_KEYS_FIELD, TOKENS_FIELD, CorpusStats, query_tokens
from itlr.options import SearchOptions
from itlr.query import Query


def term_statistics_request(query: Query) -> dict[str, Any]:
    """One aggregation over the whole index (every shard, live documents only): how many
    documents carry lexical fields, their summed length, how many have no token keys, and each
    query token's document frequency. Read the response with `read_term_statistics`."""
    filters = {token: mention_clause(token) for token in query_tokens(query.terms)}
    aggs: dict[str, Any] = {
        "documents": {"value_count": {"field": LENGTH_FIELD}},
        "length": {"sum": {"field": LENGTH_FIELD}},
        "unkeyed": {
            "filter": {
                "bool": {
                    "filter": [{"exists": {"field": TOKENS_FIELD}}],
                    "must_not": [{"exists": {"field": TOKEN_KEYS_FIELD}}],
                }
            }
        },
    }
    if filters:
        aggs["df"] = {"filters": {"filters": filters}}
    return {"size": 0, "track_total_hits": False, "aggs": aggs}


def counted_truths(
    options: SearchOptions, statistics: CorpusStats | None, index_name: str
) -> tuple[SearchOptions, tuple[str, ...]]:
    """The options to score with once the statistics are counted, and what to say about it.
    Hybrid truths (the default) on an index where no document carries the lexical fields (made
    elsewhere, or back-filled before the fields existed) would give every document a lexical
    truth of 0 and only shrink the positive terms: such an index is scored with cosine truths
    (clamp), and the search says so. One rule for every front end, decided by the counted
    statistics themselves."""
    if not options.truth.uses_lexical or statistics is None or statistics.documents:
        return options, ()
    cosine = replace(options, truth=replace(options.truth, kind="clamp"))
    return cosine, (
        f"no document of {index_name!r} has the lexical fields ({TOKENS_FIELD}, {LENGTH_FIELD}), so "
        "hybrid truth values (the default) cannot read what documents mention: scored with "
        "cosine truths (clamp); `itlr backfill` adds the fields",
    )


# What a document that mentions a query token adds to the candidate query's score (hybrid
# truths): far above what the kNN and mention clauses can sum to (at most one per clause).
MENTION_SCORE = 1_000_000.0


def mention_clause(token: str) -> dict[str, Any]:
    """The clause matching the documents that hold this token: the keyword values are
    "<token> <count>", so a prefix "<token> " finds the token whatever its count."""
    return {"prefix": {TOKENS_FIELD: f"{token} "}}


def mention_clauses(terms: Sequence[str]) -> list[dict[str, Any]]:
    """One `mention_clause` per distinct token of these terms."""
    return [mention_clause(token) for token in query_tokens(terms)]


def read_term_statistics(response: dict[str, Any]) -> CorpusStats:
    aggs = response["aggregations"]
    buckets = aggs.get("df", {}).get("buckets", {})
    return CorpusStats(
        documents=int(aggs["documents"]["value"]),
        total_length=round(aggs["length"]["value"] or 0),
        df={token: int(bucket["doc_count"]) for token, bucket in buckets.items()},
        unkeyed=int(aggs.get("unkeyed", {}).get("doc_count", 0)),
    )
