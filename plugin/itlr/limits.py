"""Bounds on the work of one request, in one place: every front end (parser, CLI, service,
proxy, filters, ingestion) checks against these figures, so one request cannot stall others.

| figure            | default | environment variable   | what it bounds                              |
|-------------------|--------:|------------------------|---------------------------------------------|
| max_terms         |      64 | ITLR_MAX_TERMS         | terms of one logical query                  |
| max_query_chars   |   4,096 | ITLR_MAX_QUERY_CHARS   | characters of one query text                |
| max_depth         |      32 | ITLR_MAX_DEPTH         | nesting: parentheses and NOTs of a query,   |
|                   |         |                        | objects and arrays of a JSON body, filters  |
| max_body_bytes    |   1 MiB | ITLR_MAX_BODY_BYTES    | a request body to the service, a search     |
|                   |         |                        | body to the proxy                           |
| max_msearch       |      64 | ITLR_MAX_MSEARCH       | header/body pairs of one `_msearch`         |
| max_filter_values |   1,024 | ITLR_MAX_FILTER_VALUES | values of one filter (`terms`, `ids`) and   |
|                   |         |                        | clauses of all its `bool`s together         |
| max_document_bytes|   1 MiB | ITLR_MAX_DOCUMENT_BYTES| one document at ingest (its JSON); one      |
|                   |         |                        | value of a hit returned (longer: cut)       |
| max_filter_work   |     10M | ITLR_MAX_FILTER_WORK   | clauses x rows one filter may test on the   |
|                   |         |                        | embedded engine (under 1 us each)           |

The checks here are cheap scans that run before the expensive work (pyparsing, json.loads,
the encoder), so a hostile input costs a linear pass over at most its bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from itlr.errors import ItlrError
from itlr.settings import env_number


class LimitError(ItlrError, ValueError):
    """A request over one of the limits: the message names the limit and how to raise it."""

    def __init__(self, message: str, name: str, value: int, limit: int) -> None:
        super().__init__(message)
        self.name = name
        self.value = value
        self.limit = limit

    @property
    def is_size(self) -> bool:
        """Whether the request is too large (HTTP 413) rather than too complex (HTTP 422)."""
        return self.name in ("max_body_bytes", "max_document_bytes")


ENV = {
    "max_terms": "ITLR_MAX_TERMS",
    "max_query_chars": "ITLR_MAX_QUERY_CHARS",
    "max_depth": "ITLR_MAX_DEPTH",
    "max_body_bytes": "ITLR_MAX_BODY_BYTES",
    "max_msearch": "ITLR_MAX_MSEARCH",
    "max_filter_values": "ITLR_MAX_FILTER_VALUES",
    "max_document_bytes": "ITLR_MAX_DOCUMENT_BYTES",
    "max_filter_work": "ITLR_MAX_FILTER_WORK",
}


@dataclass(frozen=True)
class Limits:
    max_terms: int = 64  # terms per logical query
    max_query_chars: int = 4_096  # characters of query text
    max_depth: int = 32  # nesting: parentheses, JSON bodies, filters (one figure for all)
    max_body_bytes: int = 1 << 20  # a search request body to the service or the proxy
    max_msearch: int = 64  # request pairs in one _msearch
    max_filter_values: int = 1_024  # values and clauses of one filter, every bool together
    max_document_bytes: int = 1 << 20  # one document at ingest, one value of a hit returned
    # Clause tests one filter may make on the embedded engine (its clauses x the rows it
    # reads), so the cost of a filter, not only its size, is bounded: under 1 us per test.
    max_filter_work: int = 10_000_000

    @classmethod
    def from_env(cls) -> Limits:
        base = cls()
        return cls(
            **{
                name: env_number(env, getattr(base, name), least=1, meaning=f"the {name} limit")
                for name, env in ENV.items()
            }
        )

    def refuse(self, name: str, value: int, what: str) -> LimitError:
        """The one-line error for `what` (e.g. "the query has 70 terms") over limit `name`."""
        limit = getattr(self, name)
        return LimitError(
            f"{what}; the limit is {limit:,} ({name}, raise it with {ENV[name]})",
            name,
            value,
            limit,
        )

    # -- query text ------------------------------------------------------------------------

    def check_query_text(self, text: str) -> None:
        """Refuse a query text over the length, term or nesting limits, before it is parsed.

        Terms are counted as the parser counts them (a bare phrase of several words is one
        term; each quoted string is one); nesting is parentheses plus chained negations."""
        if len(text) > self.max_query_chars:
            raise self.refuse(
                "max_query_chars", len(text), f"the query is {len(text):,} characters long"
            )
        terms, depth = query_shape(text)
        if terms > self.max_terms:
            raise self.refuse("max_terms", terms, f"the query has {terms:,} terms")
        if depth > self.max_depth:
            raise self.refuse("max_depth", depth, f"the query is nested {depth:,} levels deep")

    def check_tree(self, root: Any) -> None:
        """Refuse a query tree over the term, character or depth limits, whatever it was
        written as: parsed, rewritten from a question, or built in code. The limits bound what
        a request turns into, not only what it sends.

        Depth counts as the text scan does: each NOT one level, a conjunction or disjunction
        inside another one level (its parentheses), one directly under a NOT or at the root
        none. Iterative, stopping at the first excess, so a tree of any size costs at most the
        limits' worth of steps."""
        terms = chars = 0
        stack: list[tuple[Any, int, bool]] = [(root, 0, False)]
        while stack:
            node, depth, in_junction = stack.pop()
            operand = getattr(node, "operand", None)
            operands = getattr(node, "operands", None)
            if operand is not None or (operands is not None and in_junction):  # NOT
                depth += 1
            if depth > self.max_depth:
                raise self.refuse("max_depth", depth, f"the query is nested {depth:,} levels deep")
            if operand is not None:
                stack.append((operand, depth, False))
            elif operands is not None:
                stack.extend((child, depth, True) for child in operands)
            else:
                terms += 1
                chars += len(getattr(node, "text", ""))
                if terms > self.max_terms:
                    raise self.refuse(
                        "max_terms", terms, f"the query has over {self.max_terms:,} terms"
                    )
                if chars > self.max_query_chars:
                    raise self.refuse(
                        "max_query_chars",
                        chars,
                        f"the query's terms hold over {self.max_query_chars:,} characters",
                    )

    def check_filter(self, spec: Any, what: str = "the filter") -> None:
        """Refuse a filter holding more values than max_filter_values (a `terms` or `ids` list,
        every clause of its `bool`s together), before any document is compared with it."""
        count = 0
        stack = [spec]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list | tuple):
                stack.extend(item)
            else:
                count += 1
                if count > self.max_filter_values:
                    raise self.refuse(
                        "max_filter_values",
                        count,
                        f"{what} holds over {self.max_filter_values:,} values",
                    )

    def check_filter_work(self, clauses: int, rows: int, what: str = "the filter") -> None:
        """Refuse a filter whose clauses, each tested on every row, would cost more than
        max_filter_work tests, before the first row is read."""
        work = clauses * rows
        if work > self.max_filter_work:
            raise self.refuse(
                "max_filter_work",
                work,
                f"{what} has {clauses:,} clauses to test on {rows:,} documents ({work:,} tests)",
            )

    # -- JSON ------------------------------------------------------------------------------

    def check_json_depth(self, raw: bytes | str, what: str = "the JSON body") -> None:
        """Refuse JSON nested deeper than max_depth (objects and arrays), before json.loads
        recurses into it. Malformed JSON passes: the parser that follows reports it."""
        # No deeper than its opening brackets: a body with few is let through without a scan.
        if isinstance(raw, bytes):
            opening = raw.count(b"{") + raw.count(b"[")
        else:
            opening = raw.count("{") + raw.count("[")
        if opening <= self.max_depth:
            return
        depth = json_depth(raw)
        if depth > self.max_depth:
            raise self.refuse("max_depth", depth, f"{what} is nested {depth:,} levels deep")

    def check_body_size(self, size: int, what: str = "the request body") -> None:
        if size > self.max_body_bytes:
            raise self.refuse("max_body_bytes", size, f"{what} is {size:,} bytes")

    def check_msearch(self, pairs: int) -> None:
        if pairs > self.max_msearch:
            raise self.refuse("max_msearch", pairs, f"the _msearch holds {pairs:,} searches")


# One token of the query language, as the parser sees it: a quoted string (single quotes only at
# the start of a term: "don't" is a word), a parenthesis, an operator or a bare word.
_TOKEN = re.compile(
    r"""
      (?P<quoted>"(?:\\.|[^"\\])*"?)
    | (?P<single>(?<![^\s(!-])'(?:\\.|[^'\\])*'?)
    | (?P<open>\()
    | (?P<close>\))
    | (?P<binary>&&|\|\|)
    | (?P<prefix>(?<![^\s(])[!-]+)
    | (?P<weight>\^[\d.]*)
    | (?P<word>(?:(?!&&|\|\|)[^\s()"^])+)
    """,
    re.VERBOSE | re.DOTALL,
)
_OPERATOR_WORDS = {"and": "binary", "or": "binary", "not": "prefix"}


def query_shape(text: str) -> tuple[int, int]:
    """(terms, nesting depth) of a query text by one linear scan, without parsing it."""
    terms = depth = deepest = negations = 0
    previous = ""
    for token in _TOKEN.finditer(text):
        kind = token.lastgroup or ""
        if kind == "word":
            kind = _OPERATOR_WORDS.get(token.group().lower(), "word")
        if kind in ("quoted", "single") or (kind == "word" and previous != "word"):
            terms += 1
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
        # A run of dashes or bangs is that many NOTs (`---a` is NOT NOT NOT a).
        chained = len(token.group()) if token.lastgroup == "prefix" else 1
        negations = negations + chained if kind == "prefix" else 0
        deepest = max(deepest, depth + negations)
        previous = "word" if kind in ("word", "weight") else kind
    return terms, deepest


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET_DELTA = np.zeros(256, dtype=np.int8)
_BRACKET_DELTA[[ord("["), ord("{")]] = 1
_BRACKET_DELTA[[ord("]"), ord("}")]] = -1


def json_depth(raw: bytes | str) -> int:
    """How deeply the objects and arrays of a JSON text nest, in C-speed passes (strings removed
    first, so brackets inside them do not count)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if b"[" not in data and b"{" not in data:
        return 0
    bare = np.frombuffer(_JSON_STRING.sub(b"", data), dtype=np.uint8)
    levels = np.cumsum(_BRACKET_DELTA[bare], dtype=np.int64)
    return int(levels.max(initial=0))


LIMITS = Limits.from_env()
