"""Bounds on the work of one request, in one place: every front end (parser, CLI, service,
proxy, filters, ingestion) checks against these figures, so one request cannot stall others.

Each limit has a default here and an environment variable that overrides it. The enforcement
and the error messages are added by each front end; the figures live only here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True)
class Limits:
    max_terms: int = 64  # terms per logical query
    max_query_chars: int = 4_096  # characters of query text
    max_depth: int = 32  # nesting: parentheses, JSON bodies, filters (one figure for all)
    max_body_bytes: int = 1 << 20  # a search request body to the service or the proxy
    max_msearch: int = 64  # request pairs in one _msearch

    @classmethod
    def from_env(cls) -> Limits:
        base = cls()
        return cls(
            max_terms=_env_int("ITLR_MAX_TERMS", base.max_terms),
            max_query_chars=_env_int("ITLR_MAX_QUERY_CHARS", base.max_query_chars),
            max_depth=_env_int("ITLR_MAX_DEPTH", base.max_depth),
            max_body_bytes=_env_int("ITLR_MAX_BODY_BYTES", base.max_body_bytes),
            max_msearch=_env_int("ITLR_MAX_MSEARCH", base.max_msearch),
        )


LIMITS = Limits.from_env()
