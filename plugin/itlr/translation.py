"""The requests a logical query becomes on OpenSearch or Elasticsearch, built offline.

No cluster is contacted here: the terms are embedded with the local model and the body is built by
the engine's dialect, which a search uses too, so what `itlr translate` prints is exactly what
runs. Hybrid truths also need the index's token statistics (`itlr.engines.lexical_requests.
term_statistics_request`): the caller counts them on the cluster and passes them in, or, without a
cluster, decides with `without_statistics` what to build instead.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from itlr.engines.factory import CLUSTER_ENGINES as ENGINES
from itlr.engines.factory import dialect_for
from itlr.engines.layout import IndexLayout
from itlr.engines.lexical_requests import counted_truths
from itlr.errors import ConfigurationError
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.query import Query
from itlr.scoring import TruthName

FORMATS = ("console", "json", "curl")
HEREDOC = "ITLR_JSON"
JSON_IS_ONE_BODY = (
    "the json format prints one request body: leave out the script installs (`with_install`), "
    "or use the console or curl format"
)
# Without a cluster to count the index's token statistics on, hybrid truths that are only the
# default give way to the cosine truths every engine computes alone.
OFFLINE_TRUTH: TruthName = "clamp"
NO_STATISTICS = (
    '`truth="hybrid"` needs the index\'s token statistics, counted on the cluster: give `url` '
    "to count them there (one request), or choose another `truth`"
)
COSINE_INSTEAD = (
    "the default hybrid truths need the index's token statistics, counted on the cluster: "
    f'built with cosine truths (`truth="{OFFLINE_TRUTH}"`) instead; give `url` for the hybrid '
    "request"
)


def without_statistics(options: SearchOptions, truth_given: bool) -> tuple[SearchOptions, str]:
    """The options of a request built with no cluster to count the statistics on, and a note
    ("" for none): hybrid truths asked for (`truth_given`) are refused with one line; hybrid
    truths that are only the default become cosine truths, and the note says so."""
    if not options.truth.uses_lexical:
        return options, ""
    if truth_given:
        raise ConfigurationError(NO_STATISTICS)
    return replace(options, truth=replace(options.truth, kind=OFFLINE_TRUTH)), COSINE_INSTEAD


def truths_to_build(
    options: SearchOptions,
    truth_given: bool,
    index_name: str,
    count: Callable[[], CorpusStats] | None,
) -> tuple[SearchOptions, CorpusStats | None, tuple[str, ...]]:
    """The options a translated request is built with, the token statistics it carries and
    what to say: hybrid truths count the statistics with `count` (the cluster's, one request)
    and fall back to cosine truths on an index without lexical fields (`counted_truths`);
    with no cluster (`count` None), `without_statistics` decides."""
    if not options.truth.uses_lexical:
        return options, None, ()
    if count is None:
        options, note = without_statistics(options, truth_given)
        return options, None, (note,)
    statistics = count()
    options, notes = counted_truths(options, statistics, index_name)
    return options, statistics, notes


def pretty_json(value: Any, indent: int = 2, level: int = 0) -> str:
    """Indented JSON, except that a list of numbers stays on one line: a 384-dim vector is one
    line in Dev Tools instead of 384."""
    pad = " " * (indent * (level + 1))
    end = " " * (indent * level)
    if isinstance(value, dict) and value:
        items = [
            f"{pad}{json.dumps(key, ensure_ascii=False)}: {pretty_json(item, indent, level + 1)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(value, list) and value:
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            return json.dumps(value)
        items = [pad + pretty_json(item, indent, level + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + end + "]"
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Request:
    """One HTTP request as Dev Tools shows it: method, path without the host, JSON body."""

    method: str
    path: str
    body: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "body": self.body}

    def console(self) -> str:
        """Kibana / OpenSearch Dashboards Dev Tools syntax: `METHOD path` then the JSON body."""
        return f"{self.method} {self.path}\n{pretty_json(self.body)}"

    def curl(self, url: str) -> str:
        """A runnable curl command; the body goes through a quoted heredoc so no shell quoting
        can break it."""
        target = shlex.quote(f"{url.rstrip('/')}/{self.path}")
        return (
            f"curl -sS -X {self.method} {target} -H 'Content-Type: application/json' "
            f"--data-binary @- <<'{HEREDOC}'\n"
            f"{pretty_json(self.body)}\n{HEREDOC}"
        )


@dataclass(frozen=True)
class Translation:
    """The requests of one logical query, and what building them changed (a hybrid default
    built with cosine truths for want of a cluster)."""

    requests: list[Request]
    warnings: tuple[str, ...] = ()


def translate_requests(
    query_text: str | Query,
    engine: str,
    index_name: str,
    options: SearchOptions,
    embedder: Any,
    with_install: bool = False,
    inline_script: bool = False,
    vector_field: str = "embedding",
    text_field: str = "text",
    server_version: str | None = None,
    tiebreak: str | None = "doc_id",
    statistics: CorpusStats | None = None,
) -> list[Request]:
    """The requests, in order: the stored scripts (with_install), then the search. `tiebreak`:
    the sort key after the score (itlr's `doc_id`; `_id` on OpenSearch or `_doc` on
    Elasticsearch for an index without it; None for none). `statistics`: the index's token
    statistics for the query (`ClusterBackend.term_statistics`), which hybrid truths need."""
    if engine not in ENGINES:
        raise ConfigurationError(f"unknown engine {engine!r}: choose one of {list(ENGINES)}")
    if options.truth.uses_lexical and statistics is None:
        raise ConfigurationError(NO_STATISTICS)  # before the model encodes anything
    query = Query.of(query_text)
    dialect = dialect_for(
        engine,
        IndexLayout(vector_field, text_field, tiebreak=tiebreak),
        inline_script,
        server_version,
    )
    vectors = embedder.encode_terms(list(query.terms))
    # A pasted request explains with the engine's own `explain`: the score script then describes
    # each hit by its per-term truths, without echoing the term vectors in its params, and the
    # hits' own vectors stay out of `_source` (itlr's --explain needs them; a reader does not).
    body = dialect.search_body(query, vectors, replace(options, explain=False), statistics)
    if options.explain:
        body["explain"] = True
    requests = []
    if with_install and not inline_script:
        requests += [Request("PUT", path, script) for path, script in dialect.script_installs()]
    requests.append(Request("GET", f"{index_name}/_search", body))
    return requests


def render(requests: list[Request], output: str, url: str) -> str:
    if output not in FORMATS:
        raise ConfigurationError(f"unknown format {output!r}: choose one of {list(FORMATS)}")
    if output == "json":
        if len(requests) > 1:
            raise ConfigurationError(JSON_IS_ONE_BODY)
        return pretty_json(requests[0].body)
    if output == "curl":
        return "\n\n".join(r.curl(url) for r in requests)
    # Dev Tools separates requests by their method line; a blank line keeps it readable.
    return "\n\n".join(r.console() for r in requests)
