"""Where an itlr clause may sit in a request, and the refusal everywhere else.

One rule: a clause on the virtual field is rewritten only where its meaning is "rank by this":
the `query` of a search (`_search`, `_msearch`, `_async_search`), or its `q=` parameter, ANDed
with the rest of the query (`itlr.proxy.clause`). Everywhere else a clause would pass through
verbatim and match nothing (or everything, under a NOT), so the request is refused with a line
saying where the clause may go: `post_filter`, `rescore`, aggregations' filters, highlight
queries, kNN filters, `simple_query_string` (which has no field syntax), a clause negated or
ORed from outside, a logical query of NOT terms only, `_count` and the other query APIs.

`walk` finds the logical search of one search body; `mentions` says whether a query (or any part
of a request) names the field at all, so nothing slips past the walk unrewritten.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote_plus

from itlr.proxy.bodies import unwrapped
from itlr.proxy.clause import (
    ClauseError,
    LogicalSearch,
    field_pattern,
    find_logical_search,
    mentions_clause,
    value_mentions,
)
from itlr.proxy.codec import BadBody, decode_json, encode_json

WHERE = (
    "an {field}:(...) clause ranks, so it goes in a search's query (or its q= parameter) on "
    "_search, _msearch or _async_search, ANDed with the rest"
)
# URL parameters of a search that make up its query_string (q=), by the query_string's names.
URL_QUERY_STRING = {
    "q": "query",
    "df": "default_field",
    "default_operator": "default_operator",
    "analyzer": "analyzer",
    "analyze_wildcard": "analyze_wildcard",
    "lenient": "lenient",
}
URL_BOOLEANS = {"analyze_wildcard", "lenient"}
# A body sent in the URL (`source=`) and its content type.
URL_BODY = ("source", "source_content_type")


def where(field: str) -> str:
    return WHERE.format(field=field)


def _field_names(value: Any) -> list[str]:
    """Field names of a `fields` / `default_field` parameter, boosts (`title^2`) stripped."""
    names = value if isinstance(value, list) else [value]
    return [name.split("^", 1)[0] for name in names if isinstance(name, str)]


def mentions(query: Any, field: str) -> bool:
    """Whether a query names the field anywhere: as a key (`match`, `term`, `range`, ...), as a
    `field` / `default_field` / `fields` value, or as Lucene text `field:(` in a query string."""
    if isinstance(query, list):
        return any(mentions(item, field) for item in query)
    if not isinstance(query, dict):
        return False
    lucene = field_pattern(field)
    for key, value in query.items():
        if key == field:
            return True
        if key in ("field", "default_field", "fields") and field in _field_names(value):
            return True
        if key in ("query_string", "simple_query_string") and isinstance(value, dict):
            text = value.get("query")
            if isinstance(text, str) and lucene.search(text):
                return True
        if mentions(value, field):
            return True
    return False


def names_field(value: Any, field: str) -> bool:
    """Whether a decoded body names the field anywhere: in a query (`mentions`), as a clause
    in any text (`value_mentions`: a search template's source too), or inside a `wrapper`
    query that holds one."""
    value = unwrapped(value, field, _names_field_here)
    return _names_field_here(value, field)


def _names_field_here(value: Any, field: str) -> bool:
    return mentions(value, field) or value_mentions(value, field)


def _aggregation_places(aggs: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(place, what it holds) for each aggregation: agg names are keys, never fields."""
    if not isinstance(aggs, dict):
        yield path, aggs
        return
    for name, aggregation in aggs.items():
        if not isinstance(aggregation, dict):
            yield f"{path}.{name}", aggregation
            continue
        for kind, spec in aggregation.items():
            if kind in ("aggs", "aggregations"):
                yield from _aggregation_places(spec, f"{path}.{name}.{kind}")
            elif kind in ("filters", "adjacency_matrix") and isinstance(spec, dict):
                # Bucket names are keys too: only the filters themselves are queries.
                buckets = spec.get("filters")
                named = (
                    buckets.items()
                    if isinstance(buckets, dict)
                    else enumerate(buckets if isinstance(buckets, list) else [buckets])
                )
                for bucket, query in named:
                    yield f"{path}.{name}.{kind}.{bucket}", query
            else:
                yield f"{path}.{name}.{kind}", spec


def _highlight_places(highlight: Any) -> Iterator[tuple[str, Any]]:
    if not isinstance(highlight, dict):
        return
    yield "highlight.highlight_query", highlight.get("highlight_query")
    fields = highlight.get("fields")
    entries = fields.items() if isinstance(fields, dict) else []
    if isinstance(fields, list):
        entries = [item for entry in fields if isinstance(entry, dict) for item in entry.items()]
    for name, options in entries:
        if isinstance(options, dict):
            yield f"highlight.fields.{name}.highlight_query", options.get("highlight_query")


def other_places(body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every place of a search body but `query` that can hold a query."""
    for key in ("post_filter", "rescore", "knn"):
        if key in body:
            yield key, body[key]
    for key in ("aggs", "aggregations"):
        if key in body:
            yield from _aggregation_places(body[key], key)
    yield from _highlight_places(body.get("highlight"))


def _refuse_unrankable(query: Any, field: str) -> None:
    """A query that names the field where the walk found no clause to rank by."""
    if _in_simple_query_string(query, field):
        raise ClauseError(
            f"simple_query_string has no field syntax: {field}:(...) there would search its "
            f"words as plain text; use query_string (the query bar's Lucene) or DQL/KQL: "
            f"{where(field)}"
        )
    raise ClauseError(
        f"{field} is named in the query in a way that cannot rank (a term, range or exists "
        f"query on it, it as a default field, or {field}:word without brackets: write "
        f"{field}:(...)): {where(field)}"
    )


def _in_simple_query_string(query: Any, field: str) -> bool:
    if isinstance(query, list):
        return any(_in_simple_query_string(item, field) for item in query)
    if not isinstance(query, dict):
        return False
    simple = query.get("simple_query_string")
    if isinstance(simple, dict) and mentions({"query_string": simple}, field):
        return True
    return any(_in_simple_query_string(value, field) for value in query.values())


def walk(body: Mapping[str, Any], field: str) -> LogicalSearch | None:
    """The logical search of a search body, None when it names the field nowhere; a ClauseError
    when it names it anywhere but a place that ranks."""
    for place, value in other_places(body):
        if mentions(value, field):
            raise ClauseError(
                f"{field}:(...) cannot sit in {place}: it would pass through verbatim and match "
                f"nothing; {where(field)}"
            )
    query = body.get("query")
    found = find_logical_search(query, field)
    if found is None:
        if mentions(query, field):
            _refuse_unrankable(query, field)
        return None
    if mentions(found.rest, field):
        raise ClauseError(
            f"the query holds more than one {field} clause, or one under a NOT or an OR of "
            f"other conditions: write one clause with every logical operator inside it; "
            f"{where(field)}"
        )
    if not found.query.has_positive_term:
        raise ClauseError(
            f"{field}:({found.query}) holds only NOT terms: nothing to rank by (every document "
            f'would score alike); add a positive term, e.g. {field}:("vitamin D" AND NOT '
            f'"bone health"), or exclude words with an ordinary NOT outside {field}'
        )
    return found


# -- URL parameters ------------------------------------------------------------------------


def parameters(raw_query: bytes) -> list[tuple[str, str]]:
    """The query string's (name, value) pairs, percent-decoded, in order."""
    pairs = []
    for part in raw_query.decode("latin-1").split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((unquote_plus(name), unquote_plus(value)))
    return pairs


def without_parameters(raw_query: bytes, names: set[str]) -> bytes:
    """The query string without the named parameters, the others' bytes as sent."""
    kept = [
        part
        for part in raw_query.split(b"&")
        if part and unquote_plus(part.decode("latin-1").partition("=")[0]) not in names
    ]
    return b"&".join(kept)


def raw_mentions(raw: bytes, field: str) -> bool:
    """Whether bytes that are not JSON may still hold a clause: Lucene text or a quoted key."""
    text = raw.decode("utf-8", "replace")
    return bool(field_pattern(field).search(text)) or f'"{field}"' in text


def url_mentions(pairs: list[tuple[str, str]], field: str) -> bool:
    """Whether `q=`, `df=` or a `source=` body names the field."""
    values = dict(pairs)
    if "q" in values and field_pattern(field).search(values["q"]):
        return True
    if values.get("df") == field:
        return True
    return "source" in values and mentions_clause(values["source"].encode(), field)


def url_query(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The query_string a search's `q=` (and its companions) stands for."""
    options: dict[str, Any] = {}
    for name, value in pairs:
        if name in URL_QUERY_STRING:
            options[URL_QUERY_STRING[name]] = (
                value.lower() != "false" if name in URL_BOOLEANS else value
            )
    return {"query_string": options}


def url_body(raw_query: bytes, raw: bytes, api: str, field: str) -> tuple[bytes, bytes | None]:
    """A search whose URL holds the clause (`q=`, or a `source=` body): the body it stands
    for, and the query string to forward without those parameters (None: unchanged)."""
    pairs = parameters(raw_query)
    values = dict(pairs)
    if not url_mentions(pairs, field):
        if "q" in values and mentions_clause(raw, field):
            # The cluster puts q='s query in place of the body's: the logical one would go.
            raise ClauseError(
                f"the search has a q= parameter, which replaces the body's query on the "
                f"cluster: put the {field}:(...) clause and the rest in one of them"
            )
        return raw, None
    dropped: set[str] = set()
    if api == "_msearch":
        raise ClauseError(f"_msearch takes its searches in its body: {where(field)}")
    if "source" in values:
        if raw.strip():
            raise ClauseError("the search has a source= parameter and a body: send one")
        raw = values["source"].encode()
        dropped |= set(URL_BODY)
    if "q" in values:
        try:
            body = decode_json(raw) if raw.strip() else {}
        except ValueError:
            raise BadBody("the search body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadBody("the search body must be a JSON object")
        if "query" in body:
            raise ClauseError(
                f"the search has a q= parameter and a query in its body: put the {field}:(...) "
                "clause in one of them"
            )
        raw = encode_json({**body, "query": url_query(pairs)})
        dropped |= set(URL_QUERY_STRING)
    return raw, without_parameters(raw_query, dropped)


# -- _msearch ------------------------------------------------------------------------------


def msearch_searches(
    lines: list[bytes], target: str | None, field: str
) -> Iterator[tuple[int, str | None, dict[str, Any]]]:
    """(line of the header, index it names, body) of each search of an `_msearch` NDJSON.
    A pair that is not two JSON objects is the upstream's to answer, unless it names the field:
    then it is refused, since it would go to the upstream unrewritten (a header `[]` searches
    every index)."""
    position = 0
    while position + 1 < len(lines):
        header_line, body_line = lines[position], lines[position + 1]
        if not header_line.strip():
            position += 1
            continue
        pair = position // 2 + 1
        try:
            header, body = decode_json(header_line), decode_json(body_line)
        except ValueError:
            if raw_mentions(header_line + body_line, field):
                raise ClauseError(
                    f"_msearch search {pair} is not valid JSON and names {field}: fix its header "
                    "and body lines"
                ) from None
            position += 2
            continue
        if not isinstance(body, dict) or not isinstance(header, dict):
            if mentions(body, field) or mentions_clause(body_line, field):
                raise ClauseError(
                    f"_msearch search {pair} names {field} but its header or body is not a JSON "
                    "object: each header is an object whose `index` names the indexes, each "
                    "body an object with the query"
                )
            position += 2
            continue
        index = header.get("index", target)
        if isinstance(index, list):
            index = ",".join(str(name) for name in index)
        elif index is not None and not isinstance(index, str):
            index = str(index)
        yield position, index, body
        position += 2
