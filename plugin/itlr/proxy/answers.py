"""The answer to a rewritten search, made to say what an ordinary search would.

- **Hidden fields.** itlr's own fields (every name starting with `itlr_`) and the index's vector
  field are left out of every hit: `_source`, `fields` (and so `docvalue_fields`), highlights and
  inner hits, unless the request names that field exactly. The rewritten request already leaves
  them out of `_source` (`itlr.proxy.rewrite`); the answer is combed too, for the places a
  request cannot exclude from (the `fields` API has no excludes).
- **hits.total.** A logical search in knn mode matches only its candidates (the per-term kNN
  neighbours of every shard), so the engine's total counts those: about the per-shard budget
  times the shards. The rewritten request counts the documents the rest of the query matches
  (every one of them has a logical score; paging further reaches them) in a `global` aggregation
  of its own (`COUNT_AGGREGATION`), which the answer's `hits.total` takes, capped as the
  request's `track_total_hits` caps it; the aggregation is taken out of the answer. Where that
  number is not known (the request's `min_score`, or a hard filter that only a script can apply),
  the total is the candidates' with `relation: gte`: at least that many match.

`fix_search` works on one search response; `fix_answer` on the body of a `_search`,
`_async_search` or `_msearch` answer (JSON only).
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from itlr.proxy.codec import encode_json

ITLR_PREFIX = "itlr_"
COUNT_AGGREGATION = "itlr_total_hits"
COUNTED = "matched"
# The engines' own default: totals are exact up to this many hits (`track_total_hits`).
DEFAULT_TRACKED_HITS = 10_000


@dataclass(frozen=True)
class AnswerPlan:
    """What to fix in the answer to one rewritten search."""

    vector_field: str
    # Field names the request asked for by name: shown even when itlr's own.
    asked: frozenset[str] = frozenset()
    # "counted": hits.total from COUNT_AGGREGATION; "lower_bound": the candidates' count, with
    # relation gte; "as_is": the engine's (every document the rest matches was scored).
    total: str = "as_is"
    # The request's track_total_hits (True, False, a number; None when it sent none).
    track_total_hits: Any = None
    # Whether the request had aggregations of its own (else the answer's go when empty).
    own_aggregations: bool = False

    def hidden(self, name: str) -> bool:
        if name in self.asked:
            return False
        root = name.split(".", 1)[0]
        return root not in self.asked and (
            root == self.vector_field or root.startswith(ITLR_PREFIX)
        )


@dataclass(frozen=True)
class Rewrite:
    """A rewritten request: the body to forward, the query string (None: as sent), what to fix
    in the answer by search (0, or an `_msearch` pair's ordinal) and the indexes searched."""

    content: bytes
    query: bytes | None
    plans: dict[int, AnswerPlan]
    targets: list[str]


def _comb(names: Any, plan: AnswerPlan) -> Any:
    if not isinstance(names, dict):
        return names
    return {name: value for name, value in names.items() if not plan.hidden(str(name))}


def _fix_hit(hit: Any, plan: AnswerPlan) -> None:
    if not isinstance(hit, dict):
        return
    for key in ("_source", "fields", "highlight"):
        if key in hit:
            hit[key] = _comb(hit[key], plan)
    inner = hit.get("inner_hits")
    if isinstance(inner, dict):
        for found in inner.values():
            hits = found.get("hits") if isinstance(found, dict) else None
            if isinstance(hits, dict):
                for nested in hits.get("hits") or []:
                    _fix_hit(nested, plan)


def _tracked_limit(track: Any) -> int | None:
    """How many hits the request's track_total_hits counts exactly (None: all)."""
    if track is True or (isinstance(track, str) and track.lower() == "true"):
        return None
    with contextlib.suppress(TypeError, ValueError):
        return int(track) if track is not None else DEFAULT_TRACKED_HITS
    return DEFAULT_TRACKED_HITS


def _fix_total(response: dict[str, Any], plan: AnswerPlan) -> None:
    if plan.total == "as_is":
        return
    aggregations = response.get("aggregations")
    counted = None
    # With `typed_keys` the names come prefixed by their types (`global#itlr_total_hits`).
    for name in (COUNT_AGGREGATION, f"global#{COUNT_AGGREGATION}"):
        if isinstance(aggregations, dict) and name in aggregations:
            own = aggregations.pop(name)
            with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
                matched = own.get(COUNTED, own.get(f"filter#{COUNTED}"))
                counted = int(matched["doc_count"])
            if not aggregations and not plan.own_aggregations:
                del response["aggregations"]
    hits = response.get("hits")
    if not isinstance(hits, dict) or "total" not in hits:
        return
    total = hits["total"]
    if counted is None:
        if isinstance(total, dict):
            total["relation"] = "gte"  # the candidates: at least that many match
        return
    limit = _tracked_limit(plan.track_total_hits)
    value, relation = (counted, "eq") if limit is None or counted <= limit else (limit, "gte")
    if isinstance(total, dict):
        hits["total"] = {"value": value, "relation": relation}
    else:  # rest_total_hits_as_int
        hits["total"] = value


def fix_search(response: Any, plan: AnswerPlan) -> None:
    """One search response (a `_search` answer, an `_msearch` entry, an async search's
    `response`), fixed in place."""
    if not isinstance(response, dict):
        return
    _fix_total(response, plan)
    hits = response.get("hits")
    if isinstance(hits, dict):
        for hit in hits.get("hits") or []:
            _fix_hit(hit, plan)


def fix_answer(answer: Any, plans: dict[int, AnswerPlan], api: str) -> None:
    """An answer's body, fixed in place: `plans` by search (0 for `_search` and async search,
    the pair's ordinal for `_msearch`)."""
    if not isinstance(answer, dict):
        return
    if api == "_msearch":
        responses = answer.get("responses")
        if isinstance(responses, list):
            for ordinal, plan in plans.items():
                if ordinal < len(responses):
                    fix_search(responses[ordinal], plan)
    elif api == "_async_search":
        if 0 in plans:
            fix_search(answer.get("response"), plans[0])
    elif 0 in plans:
        fix_search(answer, plans[0])


def is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media.endswith("/json") or media.endswith("+json")


def fixed_body(
    content: bytes, headers: dict[str, str], plans: dict[int, AnswerPlan], api: str
) -> tuple[bytes | None, Any]:
    """The fixed answer body (sent uncompressed) and the answer read, or (None, None) to send
    `content` as it came: an answer that is not JSON, or that the proxy cannot read."""
    if not plans or not is_json(headers.get("content-type")):
        return None, None
    encoding = headers.get("content-encoding", "").strip().lower()
    data = content
    if encoding in ("gzip", "x-gzip", "deflate", "x-deflate"):
        try:
            data = zlib.decompress(content, 47 if "gzip" in encoding else zlib.MAX_WBITS)
        except zlib.error:
            try:
                data = zlib.decompress(content, -zlib.MAX_WBITS)
            except zlib.error:
                return None, None
    elif encoding not in ("", "identity"):
        return None, None
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, None
    fix_answer(answer, plans, api)
    return encode_json(answer), answer


def fixed_answer(
    content: bytes, headers: dict[str, str], done: Rewrite, api: str, kept: AsyncSearches
) -> bytes:
    """The answer's body to send for a rewritten search (`headers` set to match: no
    Content-Encoding, its length), or `content` as it came when it cannot be read; an async
    search's id kept for its polls."""
    fixed, answer = fixed_body(content, headers, done.plans, api)
    if fixed is None:
        return content
    if api == "_async_search" and isinstance(answer, dict) and isinstance(answer.get("id"), str):
        kept.remember(answer["id"], done)
    headers.pop("content-encoding", None)
    headers["content-length"] = str(len(fixed))
    return fixed


class AsyncSearches:
    """The rewrites of the async searches the proxy submitted, by the id the upstream gave
    them, so that their polls (`GET _async_search/<id>`) are fixed as the submit's answer was
    and carry its coverage warning. Bounded: the `MAX_KEPT` most recent, each for at most
    `MAX_AGE_SECONDS` (a UI polls within seconds; a forgotten one is polled unfixed)."""

    MAX_KEPT = 1024
    MAX_AGE_SECONDS = 3600.0

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[float, Rewrite]] = OrderedDict()

    def remember(self, search_id: str, done: Rewrite) -> None:
        self._kept[search_id] = (time.monotonic(), done)
        self._kept.move_to_end(search_id)
        while len(self._kept) > self.MAX_KEPT:
            self._kept.popitem(last=False)

    def recall(self, search_id: str) -> Rewrite | None:
        kept = self._kept.get(search_id)
        if kept is None:
            return None
        if time.monotonic() - kept[0] > self.MAX_AGE_SECONDS:
            del self._kept[search_id]
            return None
        return kept[1]


def asked_fields(body: dict[str, Any], source_includes: Iterable[str]) -> frozenset[str]:
    """The field names a search body asks for by name (no wildcard): `_source` includes,
    `fields`, `docvalue_fields`, `stored_fields` and highlighted fields."""
    names: list[str] = list(source_includes)
    for key in ("fields", "docvalue_fields", "stored_fields"):
        entries = body.get(key)
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, str):
                names.append(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("field"), str):
                names.append(entry["field"])
    highlight = body.get("highlight")
    if isinstance(highlight, dict):
        fields = highlight.get("fields")
        if isinstance(fields, dict):
            names += [str(name) for name in fields]
        elif isinstance(fields, list):
            names += [str(name) for entry in fields if isinstance(entry, dict) for name in entry]
    return frozenset(name for name in names if "*" not in name and "?" not in name)
