"""Where an itlr clause may sit in a request, and the refusal everywhere else.

One rule: a clause on the virtual field is rewritten only where its meaning is "rank by this":
the `query` of a search (`_search`, `_msearch`, `_async_search`), or its `q=` parameter, ANDed
with the rest of the query (`itlr.proxy.clause`). Everywhere else a clause would pass through
verbatim and match nothing (or everything, under a NOT), so the request is refused with a line
saying where the clause may go: `post_filter`, `rescore`, aggregations' filters, highlight
queries, kNN filters, `simple_query_string` (which has no field syntax), a clause negated or
ORed from outside, a logical query of NOT terms only, `_count` and the other query APIs.

`walk` finds the logical search of one search body; `query_names_field` says whether a query (or any part
of a request) names the field at all, so nothing slips past the walk unrewritten.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus, unquote_to_bytes

from itlr.limits import LIMITS
from itlr.proxy.bodies import (
    CBOR,
    JSON,
    SMILE,
    YAML,
    NotAcceptable,
    RequestBody,
    body_format,
    not_json,
    smile_may_name,
    unwrapped,
    values_of,
)
from itlr.proxy.clause import (
    ClauseError,
    LogicalSearch,
    clause_names_field,
    field_pattern,
    find_logical_search,
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


def query_names_field(query: Any, field: str) -> bool:
    """Whether a query names the field anywhere: as a key (`match`, `term`, `range`, ...), as a
    `field` / `default_field` / `fields` value, or as Lucene text `field:(` in a query string."""
    if isinstance(query, list):
        return any(query_names_field(item, field) for item in query)
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
        if query_names_field(value, field):
            return True
    return False


def names_field(value: Any, field: str) -> bool:
    """Whether a decoded body names the field anywhere: in a query (`query_names_field`), as a clause
    in any text (`clause_names_field`: a search template's source too), or inside a `wrapper`
    query that holds one."""
    value = unwrapped(value, field, _names_field_here)
    return _names_field_here(value, field)


def _names_field_here(value: Any, field: str) -> bool:
    return query_names_field(value, field) or clause_names_field(value, field)


def unwrap(body: Any, field: str) -> Any:
    """`body` with every `wrapper` query that names the field written out (itlr.proxy.bodies),
    so the walk places, rewrites or refuses the clause inside as any other."""
    return unwrapped(body, field, _names_field_here)


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
    if isinstance(simple, dict) and query_names_field({"query_string": simple}, field):
        return True
    return any(_in_simple_query_string(value, field) for value in query.values())


def walk(body: Mapping[str, Any], field: str) -> LogicalSearch | None:
    """The logical search of a search body, None when it names the field nowhere; a ClauseError
    when it names it anywhere but a place that ranks."""
    for place, value in other_places(body):
        if query_names_field(value, field):
            raise ClauseError(
                f"{field}:(...) cannot sit in {place}: it would pass through verbatim and match "
                f"nothing; {where(field)}"
            )
    query = body.get("query")
    found = find_logical_search(query, field)
    if found is None:
        if query_names_field(query, field):
            _refuse_unrankable(query, field)
        return None
    if query_names_field(found.rest, field):
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


def raw_may_name_field(raw: bytes, field: str) -> bool:
    """Whether bytes that are not JSON may still hold a clause: Lucene text or a quoted key."""
    text = raw.decode("utf-8", "replace")
    return bool(field_pattern(field).search(text)) or f'"{field}"' in text


def url_source(raw_query: bytes) -> RequestBody | None:
    """The body a `source=` parameter carries (its bytes: CBOR and SMILE are not text), in the
    format its `source_content_type` names (JSON without one)."""
    found = None
    for part in raw_query.split(b"&"):
        name, _, value = part.partition(b"=")
        if unquote_plus(name.decode("latin-1")) == "source":
            found = unquote_to_bytes(value.replace(b"+", b" "))
    if found is None:
        return None
    content_type = dict(parameters(raw_query)).get("source_content_type", "application/json")
    return RequestBody(found, found, body_format(content_type), content_type)


def body_names_field(body: RequestBody, field: str, what: str) -> bool:
    """Whether a body, in any format an engine reads, names the field (`names_field`)."""
    if body.kind == SMILE:
        return smile_may_name(body.data, field)
    if body.kind in (YAML, CBOR):
        return any(names_field(value, field) for value in values_of(body.data, body.kind, what))
    return raw_names_field(body.data, field)


def url_names_field(raw_query: bytes, field: str) -> bool:
    """Whether `q=`, `df=` or a `source=` body names the field."""
    values = dict(parameters(raw_query))
    if "q" in values and field_pattern(field).search(values["q"]):
        return True
    if values.get("df") == field:
        return True
    source = url_source(raw_query)
    return source is not None and body_names_field(source, field, "the source= parameter")


def refuse_other_answer_formats(raw_query: bytes, accept: str | None, field: str) -> None:
    """A logical search's answer is read (hidden fields, hits.total) as JSON: a request that
    asks for YAML, CBOR or SMILE (`format=`, `Accept`) is refused before it runs."""
    asked = [text for text in (dict(parameters(raw_query)).get("format"), accept) if text]
    for text in asked:
        lowered = text.lower()
        for kind in (YAML, CBOR, SMILE):
            if kind in lowered and JSON not in lowered:
                raise NotAcceptable(
                    f"a search with an {field}:(...) clause answers in JSON, and this one asks "
                    f"for {kind.upper()} ({'format=' if text != accept else 'Accept: '}{text}): "
                    "ask for JSON"
                )


def url_query(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The query_string a search's `q=` (and its companions) stands for."""
    options: dict[str, Any] = {}
    for name, value in pairs:
        if name in URL_QUERY_STRING:
            options[URL_QUERY_STRING[name]] = (
                value.lower() != "false" if name in URL_BOOLEANS else value
            )
    return {"query_string": options}


def url_body(
    raw_query: bytes, body: RequestBody, api: str, field: str
) -> tuple[RequestBody, bytes | None]:
    """A search whose URL holds the clause (`q=`, or a `source=` body): the body it stands
    for, and the query string to forward without those parameters (None: unchanged)."""
    values = dict(parameters(raw_query))
    if not url_names_field(raw_query, field):
        if "q" in values and body_names_field(body, field, "the search body"):
            # The cluster puts q='s query in place of the body's: the logical one would go.
            raise ClauseError(
                f"the search has a q= parameter, which replaces the body's query on the "
                f"cluster: put the {field}:(...) clause and the rest in one of them"
            )
        return body, None
    dropped: set[str] = set()
    if api == "_msearch":
        raise ClauseError(f"_msearch takes its searches in its body: {where(field)}")
    raw = body.data
    if body.kind != JSON and raw.strip():
        raise not_json(body.kind, field)
    source = url_source(raw_query)
    if source is not None:
        if raw.strip():
            raise ClauseError("the search has a source= parameter and a body: send one")
        if source.kind != JSON:
            raise not_json(source.kind, field, "source= parameter")
        raw = source.data
        dropped |= set(URL_BODY)
    if "q" in values:
        try:
            decoded = decode_json(raw) if raw.strip() else {}
        except ValueError:
            raise BadBody("the search body is not valid JSON") from None
        if not isinstance(decoded, dict):
            raise BadBody("the search body must be a JSON object")
        if "query" in decoded:
            raise ClauseError(
                f"the search has a q= parameter and a query in its body: put the {field}:(...) "
                "clause in one of them"
            )
        raw = encode_json({**decoded, "query": url_query(list(parameters(raw_query)))})
        dropped |= set(URL_QUERY_STRING)
    built = RequestBody(raw, raw, JSON, "application/json")
    return built, without_parameters(raw_query, dropped)


# Search parameters a URL may carry in place of the body's (the URL's win on the engine).
URL_SEARCH_BODY = {
    "size",
    "from",
    "sort",
    "track_total_hits",
    "stored_fields",
    "docvalue_fields",
    "_source",
    "_source_includes",
    "_source_include",
    "_source_excludes",
    "_source_exclude",
}


def _url_number(value: str) -> Any:
    return int(value) if value.lstrip("-").isdigit() else value


def _url_list(value: str) -> list[str]:
    return [part for part in value.split(",") if part]


def _url_sort(value: str) -> list[Any]:
    """`sort=field:order,other` as the engines read it."""
    entries: list[Any] = []
    for part in _url_list(value):
        name, _, order = part.rpartition(":")
        entries.append({name: {"order": order}} if name else part)
    return entries


def _url_source(values: dict[str, str]) -> Any:
    """The `_source` the URL's source parameters stand for (they replace the body's)."""
    fetch: bool | None = None
    includes: list[str] = []
    source = values.get("_source")
    if source is not None:
        if source.lower() in ("true", "false"):
            fetch = source.lower() == "true"
        else:
            includes = _url_list(source)
    includes += _url_list(values.get("_source_includes", values.get("_source_include", "")))
    excludes = _url_list(values.get("_source_excludes", values.get("_source_exclude", "")))
    if fetch is False:
        return False
    return {"includes": includes, "excludes": excludes}


def folded_url_parameters(
    body: dict[str, Any], raw_query: bytes
) -> tuple[dict[str, Any], bytes | None]:
    """A search body with the URL's search parameters (`URL_SEARCH_BODY`, which the engine
    would let override the body's) written into it, and the query string left without them
    (None when it had none): the rewrite then sees the page, sort and `_source` the engine
    would use, and no URL parameter can undo what it built."""
    values = {name: value for name, value in parameters(raw_query) if name in URL_SEARCH_BODY}
    if not values:
        return body, None
    folded = dict(body)
    for name in ("size", "from"):
        if name in values:
            folded[name] = _url_number(values[name])
    if "track_total_hits" in values:
        tracked = values["track_total_hits"].lower()
        folded["track_total_hits"] = (
            tracked == "true" if tracked in ("true", "false") else _url_number(tracked)
        )
    if "sort" in values:
        folded["sort"] = _url_sort(values["sort"])
    if "stored_fields" in values:
        folded["stored_fields"] = _url_list(values["stored_fields"])
    if "docvalue_fields" in values:  # added to the body's, as the engines do
        own = folded.get("docvalue_fields")
        folded["docvalue_fields"] = [
            *(own if isinstance(own, list) else []),
            *_url_list(values["docvalue_fields"]),
        ]
    if any(name.startswith("_source") for name in values):
        folded["_source"] = _url_source(values)
    return folded, without_parameters(raw_query, set(values))


# -- _msearch ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MsearchSearch:
    """One search of an `_msearch`: its ordinal among the pairs (the answer's `responses`
    follow them), the line of its header, the header, the indexes it names and its body."""

    ordinal: int
    position: int
    header: dict[str, Any]
    index: str | None
    body: dict[str, Any]


def msearch_searches(lines: list[bytes], target: str | None, field: str) -> Iterator[MsearchSearch]:
    """Each search of an `_msearch` NDJSON whose header and body are JSON objects.
    A pair that is not two JSON objects is the upstream's to answer, unless it names the field:
    then it is refused, since it would go to the upstream unrewritten (a header `[]` searches
    every index)."""
    position = 0
    ordinal = -1
    while position + 1 < len(lines):
        header_line, body_line = lines[position], lines[position + 1]
        if not header_line.strip():
            position += 1
            continue
        ordinal += 1
        pair = ordinal + 1
        try:
            header, body = decode_json(header_line), decode_json(body_line)
        except ValueError:
            if raw_may_name_field(header_line + body_line, field):
                raise ClauseError(
                    f"_msearch search {pair} is not valid JSON and names {field}: fix its header "
                    "and body lines"
                ) from None
            position += 2
            continue
        if not isinstance(body, dict) or not isinstance(header, dict):
            if names_field(body, field) or raw_names_field(body_line, field):
                raise ClauseError(
                    f"_msearch search {pair} names {field} but its header or body is not a JSON "
                    "object: each header is an object whose `index` names the indexes, each "
                    "body an object with the query"
                )
            position += 2
            continue
        index = header.get("index", header.get("indices", target))
        if isinstance(index, list):
            index = ",".join(str(name) for name in index)
        elif index is not None and not isinstance(index, str):
            index = str(index)
        yield MsearchSearch(ordinal, position, header, index, body)
        position += 2


def raw_names_field(raw: bytes, field: str) -> bool:
    """Whether a request body (JSON or NDJSON) names the field anywhere (`placement.names_field`:
    a clause, a query on the field, a template's source, a `wrapper` query holding one). A body nested deeper than max_depth is a LimitError (before any parser recurses)."""
    LIMITS.check_json_depth(raw, "the request body")
    try:
        bodies = [json.loads(raw)]
    except ValueError:  # NDJSON (a template _msearch), or not ours to judge
        bodies = []
        for line in raw.splitlines():
            with contextlib.suppress(ValueError):
                bodies.append(json.loads(line))
    return any(names_field(body, field) for body in bodies)
