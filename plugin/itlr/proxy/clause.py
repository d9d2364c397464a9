"""Finding the logical clause on the virtual field in a search request's query.

Two shapes reach the cluster from a query bar:

- Lucene mode: a `query_string` whose text holds `itlr:(<logical query>)`; the logical query is
  parsed by `itlr.parse`, with syntax errors pointing into the query bar text.
- KQL (Kibana) / DQL (Dashboards) mode: those languages are compiled in the browser, so the
  cluster sees the tree `kbn-es-query` / `opensearch_query/kuery` produce for
  `itlr:("a" and not "b")`: every `field:value` becomes
  `{"bool": {"should": [{"match_phrase" | "match": {field: value}}], "minimum_should_match": 1}}`,
  `and` becomes `bool.filter` (or `bool.must`), `or` becomes `bool.should` with
  `minimum_should_match: 1`, `not` becomes `bool.must_not` holding one query.

The clause must be ANDed with the rest of the query (the rest becomes a filter); a clause under
an OR or a NOT of other conditions has no logical score to rank by, and is refused.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from typing import Any

from itlr.errors import ItlrError, QuerySyntaxError
from itlr.query import And, Node, Not, Or, Query, Term, parse

MATCH_KINDS = ("match_phrase", "match")


class ClauseError(ItlrError):
    """A request whose itlr clause cannot be turned into a logical search; the UI shows it."""

    def __init__(self, message: str, position: int | None = None, text: str = "") -> None:
        self.message = message
        self.position = position
        self.text = text
        super().__init__(message)

    def to_dict(self) -> dict[str, Any]:
        reason: dict[str, Any] = {"type": "itlr_query_error", "reason": self.message}
        if self.position is not None:
            reason["position"] = self.position
            reason["query"] = self.text
        return reason


@dataclass(frozen=True)
class LogicalSearch:
    """The logical query found in a request, and the rest of its query (None: nothing left)."""

    query: Query
    rest: dict[str, Any] | None


# -- Lucene mode ---------------------------------------------------------------------------


@functools.cache
def clause_pattern(field: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.\\]){re.escape(field)}\s*:\s*\(")


@functools.cache
def field_pattern(field: str) -> re.Pattern[str]:
    """The field in Lucene text, bracketed or not (`itlr:(a)`, `itlr:a`, `_exists_:itlr`)."""
    name = re.escape(field)
    return re.compile(rf"(?<![\w.\\]){name}\s*:|_exists_\s*:\s*{name}(?![\w.])")


def _closing_bracket(text: str, opening: int) -> int:
    """The index of the `)` closing the `(` at `opening`, skipping quoted text; -1 if none."""
    depth = 0
    quote = ""
    position = opening
    while position < len(text):
        char = text[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return position
        position += 1
    return -1


_JOINED_BY_OTHER = re.compile(r"(?:\bOR|\|\||\bNOT|!|-)\s*$", re.IGNORECASE)
_FOLLOWED_BY_OR = re.compile(r"^\s*(?:OR\b|\|\|)", re.IGNORECASE)
_ONLY_CONJUNCTIONS = re.compile(r"^(?:\s|\bAND\b|&&|\*:\*)*$", re.IGNORECASE)
# What makes a clause required in Lucene's syntax: a `+`, or AND on either side of it.
_REQUIRED_BEFORE = re.compile(r"(?:\bAND|&&|\+)\s*$", re.IGNORECASE)
_REQUIRED_AFTER = re.compile(r"^\s*(?:AND\b|&&)", re.IGNORECASE)
_BOOST = re.compile(r"^\^\d+(?:\.\d*)?")


def _bracket_depth(text: str, end: int) -> int:
    """How many `(` are open at `end` (quoted and escaped characters skipped)."""
    depth = 0
    quote = False
    position = 0
    while position < end:
        char = text[position]
        if char == "\\":
            position += 1
        elif char == '"':
            quote = not quote
        elif not quote and char == "(":
            depth += 1
        elif not quote and char == ")":
            depth -= 1
        position += 1
    return depth


def find_in_lucene(
    text: str, field: str, default_and: bool = False
) -> tuple[Query, str | None] | None:
    """(logical query, the rest of the query string or None) when `text` holds the clause.

    The clause ranks only when every match must satisfy it: alone, or required (`+`, AND on a
    side, or the query string's default_operator AND). Beside other clauses under the default
    OR it would be one alternative among others, which has no logical score to rank by."""
    matches = list(clause_pattern(field).finditer(text))
    if not matches:
        return None
    if len(matches) > 1:
        raise ClauseError(
            f"the query holds {len(matches)} {field}:(...) clauses: write one, and put every "
            "logical operator inside it",
            matches[1].start(),
            text,
        )
    match = matches[0]
    opening = match.end() - 1
    closing = _closing_bracket(text, opening)
    if closing < 0:
        raise ClauseError(f"{field}:( is never closed: add the matching ')'", opening, text)
    before, inner, after = text[: match.start()], text[opening + 1 : closing], text[closing + 1 :]
    after = _BOOST.sub("", after)
    if _JOINED_BY_OTHER.search(before) or _FOLLOWED_BY_OR.search(after):
        raise ClauseError(
            f"{field}:(...) must be joined to the rest of the query with AND (the rest filters, "
            "the logical query ranks); put OR and NOT inside the brackets",
            match.start(),
            text,
        )
    if _bracket_depth(text, match.start()) > 0:
        raise ClauseError(
            f"{field}:(...) must sit at the top level of the query string, not inside brackets "
            "(joined to the rest with AND); put OR and NOT inside its own brackets",
            match.start(),
            text,
        )
    alone = _ONLY_CONJUNCTIONS.match(before + after) is not None
    required = _REQUIRED_BEFORE.search(before) or _REQUIRED_AFTER.search(after)
    if not (alone or required or default_and):
        raise ClauseError(
            f"{field}:(...) must be joined to the rest of the query with AND: under the query "
            "string's default operator OR, a clause beside others is only one alternative (the "
            "rest filters, the logical query ranks); write AND, or put OR inside the brackets",
            match.start(),
            text,
        )
    try:
        query = parse(inner)
    except QuerySyntaxError as bad:
        raise ClauseError(bad.message, opening + 1 + bad.position, text) from None
    # The clause's place becomes "everything", so the rest keeps its meaning as a filter.
    rest = f"{before}*:*{after}"
    return query, None if _ONLY_CONJUNCTIONS.match(rest) else rest


# -- KQL / DQL mode ------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _match_value(query: Any, field: str) -> str | None:
    """The text of `{"match_phrase" | "match": {field: value}}`, else None."""
    if not isinstance(query, dict) or len(query) != 1:
        return None
    ((kind, body),) = query.items()
    if kind not in MATCH_KINDS or not isinstance(body, dict) or set(body) != {field}:
        return None
    value = body[field]
    if isinstance(value, dict):
        value = value.get("query")
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _matches_on_field(query: Any, field: str) -> bool:
    """Whether the field appears as a match / match_phrase target anywhere in the query."""
    if isinstance(query, dict):
        for kind, body in query.items():
            if kind in MATCH_KINDS and isinstance(body, dict) and field in body:
                return True
            if _matches_on_field(body, field):
                return True
    elif isinstance(query, list):
        return any(_matches_on_field(item, field) for item in query)
    return False


def _logical_node(query: Any, field: str) -> Node | None:
    """The logical tree of a query made only of clauses on the field, else None."""
    text = _match_value(query, field)
    if text is not None:
        if not text.strip():
            raise ClauseError(f"{field}: holds an empty term: write at least one word")
        return Term(text)
    if not isinstance(query, dict) or set(query) != {"bool"} or not isinstance(query["bool"], dict):
        return None
    bool_query = query["bool"]
    known = {"must", "filter", "should", "must_not", "minimum_should_match", "boost"}
    if set(bool_query) - known:
        return None
    conjuncts = _as_list(bool_query.get("must")) + _as_list(bool_query.get("filter"))
    negated = _as_list(bool_query.get("must_not"))
    alternatives = _as_list(bool_query.get("should"))
    if alternatives and str(bool_query.get("minimum_should_match", "")) != "1":
        return None
    parts: list[Node] = []
    for child in conjuncts:
        node = _logical_node(child, field)
        if node is None:
            return None
        parts.append(node)
    for child in negated:
        node = _logical_node(child, field)
        if node is None:
            return None
        parts.append(Not(node))
    if alternatives:
        options = [_logical_node(child, field) for child in alternatives]
        if any(node is None for node in options):
            return None
        parts.append(options[0] if len(options) == 1 else Or(tuple(options)))  # type: ignore[arg-type]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _split_tree(query: Any, field: str) -> tuple[list[Node], Any]:
    """Logical nodes found along AND paths from the root, and the query without them."""
    node = _logical_node(query, field)
    if node is not None:
        return [node], None
    if not (isinstance(query, dict) and set(query) == {"bool"} and isinstance(query["bool"], dict)):
        return [], query
    bool_query = dict(query["bool"])
    found: list[Node] = []
    for key in ("must", "filter"):
        kept = []
        for child in _as_list(bool_query.get(key)):
            nodes, rest = _split_tree(child, field)
            found += nodes
            if rest is not None:
                kept.append(rest)
        if key in bool_query:
            bool_query[key] = kept
    kept_not = []
    for child in _as_list(bool_query.get("must_not")):
        node = _logical_node(child, field)
        if node is not None:
            found.append(Not(node))
        else:
            kept_not.append(child)
    if "must_not" in bool_query:
        bool_query["must_not"] = kept_not
    if not found:
        return [], query
    if not any(_as_list(bool_query.get(k)) for k in ("must", "filter", "should", "must_not")):
        return found, None
    return found, {"bool": bool_query}


def find_in_tree(query: Any, field: str) -> tuple[Query, Any] | None:
    """(logical query, the rest of the query or None) for a KQL/DQL-built query on the field."""
    nodes, rest = _split_tree(query, field)
    if not nodes and not _matches_on_field(query, field):
        return None
    if not nodes or _matches_on_field(rest, field):
        raise ClauseError(
            f"{field}:(...) must be joined to the rest of the query with and (the rest filters, "
            "the logical query ranks); put or and not inside the brackets"
        )
    root = nodes[0] if len(nodes) == 1 else And(tuple(nodes))
    # The clauses' texts are raw request values: through the parser they get the checks typed
    # query text gets, and the query's source is its canonical text.
    return parse(str(Query(root))), rest


# -- whole query ---------------------------------------------------------------------------


def _find_query_strings(query: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    if isinstance(query, dict):
        for key, value in query.items():
            if key == "query_string" and isinstance(value, dict):
                found.append((*path, key))
            else:
                found += _find_query_strings(value, (*path, key))
    elif isinstance(query, list):
        for index, item in enumerate(query):
            found += _find_query_strings(item, (*path, index))
    return found


def _lookup(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


# Where a clause may sit: places whose matches are ANDed with the rest of the query, so the
# rest can become the filter and the logical query the ranking.
ANDED_PLACES = {
    ("bool", "must"),
    ("bool", "filter"),
    ("bool", "should"),
    ("constant_score", "filter"),
}
SUPPORTED_PLACES = (
    "at the top of the query, under bool.must or bool.filter, or as the only bool.should clause"
)


def _check_place(query: Any, path: tuple[Any, ...], field: str) -> None:
    """Refuse a clause under a NOT or an OR of other conditions: rewriting it there would
    answer something else (a must_not of everything, a should whose siblings are dropped).

    `path` alternates query type, parameter and (for lists) index down to the query_string."""
    node = query
    position = 0
    while position < len(path) - 1:
        kind, parameter = path[position], path[position + 1]
        siblings: Any = node[kind][parameter] if isinstance(node.get(kind), dict) else None
        if (kind, parameter) == ("bool", "must_not"):
            raise ClauseError(
                f"{field}:(...) cannot sit under bool.must_not (a NOT of the logical ranking "
                f"matches nothing): write the NOT inside the brackets; it works {SUPPORTED_PLACES}"
            )
        if (kind, parameter) == ("bool", "should") and len(_as_list(siblings)) > 1:
            raise ClauseError(
                f"{field}:(...) cannot be one of several bool.should clauses (an OR with other "
                f"conditions has no logical score to rank by): write the OR inside the brackets; "
                f"it works {SUPPORTED_PLACES}"
            )
        if (kind, parameter) not in ANDED_PLACES:
            raise ClauseError(
                f"{field}:(...) cannot sit inside {kind}.{parameter}: it works {SUPPORTED_PLACES}"
            )
        node = siblings
        position += 2
        if position < len(path) and isinstance(path[position], int):
            node = node[path[position]]
            position += 1


def find_logical_search(query: Any, field: str) -> LogicalSearch | None:
    """The logical search a request's `query` asks for, or None when it has no itlr clause."""
    if query is None:
        return None
    for path in _find_query_strings(query):
        options = _lookup(query, path)
        text = options.get("query")
        if not isinstance(text, str):
            continue
        default_and = str(options.get("default_operator", "or")).lower() == "and"
        found = find_in_lucene(text, field, default_and)
        if found is None:
            continue
        _check_place(query, path, field)
        logical, rest_text = found
        if rest_text is not None:
            rest = copy.deepcopy(query)
            _lookup(rest, path)["query"] = rest_text
            return LogicalSearch(logical, rest)
        if len(path) == 1:  # the query was the query_string alone
            return LogicalSearch(logical, None)
        # The query_string held only the clause: as a filter it matches everything.
        rest = copy.deepcopy(query)
        _lookup(rest, path[:-2])[path[-2]] = {"match_all": {}}
        return LogicalSearch(logical, rest)
    found_tree = find_in_tree(query, field)
    if found_tree is None:
        return None
    return LogicalSearch(found_tree[0], found_tree[1])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def clause_names_field(body: Any, field: str) -> bool:
    """Whether a decoded body (or query) holds a clause on the field anywhere: as Lucene text,
    as a KQL/DQL match, or inside a search template's source string."""
    if _matches_on_field(body, field):
        return True
    lucene = field_pattern(field)
    # A template's source is JSON text with mustache holes: a key naming the field is enough.
    keyed = re.compile(rf'"{re.escape(field)}"\s*:')
    return any(lucene.search(text) or keyed.search(text) for text in _strings(body))
