"""What the JSON service lets a client's `filter` hold: query clauses that read the served index
and nothing else, and run no code.

The service queries its index with its own credentials, for anyone who can reach it, and says it
acts only on that index. The engines' query DSL has clauses that go further: a `terms` lookup
reads a document of another index (the service's credentials reading it for the client), a
`script`, `script_score` or `function_score` runs the client's Painless, `percolate`,
`more_like_this` and `geo_shape` can fetch documents by index and id, `wrapper` hides any query
in base64. So the filter is an allow-list: the compound clauses (`bool`, `constant_score`,
`dis_max`, `boosting`, `nested`), checked inside, and leaf clauses that compare a field of the
served index with values given in the request. Anything else is refused in one line naming the
clause and where it sits (400).
"""

from __future__ import annotations

from typing import Any

from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

# Leaf clauses: a field of the served index compared with values the request gives.
LEAVES = frozenset(
    {
        "term",
        "terms",
        "range",
        "exists",
        "ids",
        "prefix",
        "wildcard",
        "regexp",
        "fuzzy",
        "match",
        "match_phrase",
        "match_phrase_prefix",
        "match_bool_prefix",
        "multi_match",
        "combined_fields",
        "query_string",
        "simple_query_string",
        "match_all",
        "match_none",
        "geo_bounding_box",
        "geo_distance",
    }
)
# Compound clauses and the keys that hold their inner queries (one query, or a list of them).
COMPOUNDS: dict[str, tuple[str, ...]] = {
    "bool": ("must", "filter", "should", "must_not"),
    "constant_score": ("filter",),
    "dis_max": ("queries",),
    "boosting": ("positive", "negative"),
    "nested": ("query",),
}
# Keys of a compound clause that are not queries but could carry code: `nested`'s inner hits
# take script fields.
REFUSED_KEYS = frozenset({"inner_hits"})
WHY = {
    "script": "it runs code on the cluster",
    "script_score": "it runs code on the cluster",
    "function_score": "its functions run code on the cluster",
    "terms_set": "its minimum_should_match_script runs code on the cluster",
    "intervals": "its filters run scripts on the cluster",
    "percolate": "it reads documents of other indexes",
    "more_like_this": "it reads documents of other indexes",
    "geo_shape": "it reads shapes from other indexes",
    "shape": "it reads shapes from other indexes",
    "wrapper": "it hides a query the service cannot check",
    "has_child": "it joins documents the service does not check",
    "has_parent": "it joins documents the service does not check",
}
ALLOWED = ", ".join(sorted(LEAVES | set(COMPOUNDS)))


def _refuse(clause: str, where: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"the filter's `{clause}` (at {where}) is refused: {why}; a filter may use {ALLOWED} "
        "(docs/service.md)"
    )


def check_served_filter(spec: Any, where: str = "filter") -> None:
    """Refuse a filter clause the service does not allow (ConfigurationError, one line)."""
    _check(spec, where, 1)


def _check(spec: Any, where: str, depth: int) -> None:
    if depth > LIMITS.max_depth:
        raise ConfigurationError(
            f"the filter is nested deeper than {LIMITS.max_depth} levels (ITLR_MAX_DEPTH): "
            "flatten it"
        )
    if not isinstance(spec, dict):
        raise ConfigurationError(
            f'the filter at {where} must be a query object, e.g. {{"term": {{"lang": "en"}}}}'
        )
    for clause, body in spec.items():
        here = f"{where}.{clause}"
        if clause in COMPOUNDS:
            _check_compound(clause, body, here, depth)
        elif clause in LEAVES:
            _check_leaf(clause, body, here)
        else:
            raise _refuse(clause, where, WHY.get(clause, "the service does not allow it"))


def _check_compound(clause: str, body: Any, where: str, depth: int) -> None:
    if not isinstance(body, dict):
        raise ConfigurationError(f"the filter's `{clause}` (at {where}) must be an object")
    for key, inner in body.items():
        if key in REFUSED_KEYS:
            raise _refuse(f"{clause}.{key}", where, "it can run code on the cluster")
        if key not in COMPOUNDS[clause]:
            continue  # a parameter: boost, minimum_should_match, path, score_mode, ...
        queries = inner if isinstance(inner, list) else [inner]
        for position, query in enumerate(queries):
            spot = f"{where}.{key}[{position}]" if isinstance(inner, list) else f"{where}.{key}"
            _check(query, spot, depth + 1)


def _check_leaf(clause: str, body: Any, where: str) -> None:
    if clause == "terms" and isinstance(body, dict):
        for name, values in body.items():
            if isinstance(values, dict):
                raise _refuse(
                    "terms",
                    where,
                    f"a lookup ({name!r}: {{index, id, path}}) reads a document of another "
                    "index; give the values as a list",
                )


__all__ = ["ALLOWED", "check_served_filter"]
