"""The reads both stacks make of a cluster, written once: which engine answers (`GET /`), whether
the stored scripts under itlr's ids are ours (`GET _scripts/<id>`, stored again when missing),
what a mapping says of the vector field (its kind and dimension) and which field sorts ties.
Each is what to send (`ClusterRead`: method, path, body) and how to read the answer into a
typed value, raising the one-line errors; where a read takes steps, the steps are one operation
(itlr.engines.cluster_client: a generator of reads).

Pure: no client. The backends (itlr.engines) run them through the sync face (opensearch-py /
elasticsearch-py, the configured credentials); the proxy (itlr.proxy) through the async face
(httpx, each caller's own credentials, or its own for its integrity watch).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from itlr.engines.cluster_client import ClusterAnswer, ClusterRead, ClusterRefused, Operation
from itlr.engines.connection import error_reason
from itlr.engines.coverage import coverage_body, parse_coverage
from itlr.engines.integrity import ScriptMismatch, check_stored
from itlr.engines.lexical_requests import read_term_statistics, term_statistics_request
from itlr.errors import EngineError, short_text

if TYPE_CHECKING:
    from itlr.engines.dialect import Dialect
    from itlr.engines.painless import StoredScript
    from itlr.lexical import CorpusStats
    from itlr.query import Query
    from itlr.results import Coverage


# -- engine detection ----------------------------------------------------------------------

ROOT = ClusterRead("GET", "/")


def engine_from_root(url: str, info: Any) -> tuple[str, str]:
    """(engine, version) from a cluster's `GET /` answer (`ROOT`)."""
    if isinstance(info, dict):
        version = cast(
            "dict[str, Any]", info.get("version") if isinstance(info.get("version"), dict) else {}
        )
        number = str(version.get("number", "?"))
        if version.get("distribution") == "opensearch":
            return "opensearch", number
        if "tagline" in info or version.get("build_flavor"):
            return "elasticsearch", number
    shown = info if isinstance(info, str) else json.dumps(info)
    raise EngineError(
        f"{url} is neither OpenSearch nor Elasticsearch: GET / answered "
        f"{short_text(shown)}; check `url`"
    )


def engine_of(url: str) -> Operation[tuple[str, str]]:
    """(engine, version) of the cluster at `url`: its `GET /` read. ClusterRefused when the
    root refuses (its status) or answers as neither engine (`engine_from_root`'s line)."""
    answer = yield ROOT
    if not answer.ok:
        raise ClusterRefused(f"{url} answered {answer.status} to GET /", answer)
    try:
        return engine_from_root(url, answer.body)
    except EngineError as unknown:
        raise ClusterRefused(str(unknown), answer) from None


# The local node's version: what Elasticsearch answers where its root is refused.
NODE_VERSION = ClusterRead("GET", "/_nodes/_local", params={"filter_path": "nodes.*.version"})


def server_version() -> Operation[str | None]:
    """The server's version: from `GET /`, or from the local node where the root is refused (a
    minimal distribution such as Maven Central's integ-test-zip, some proxies); None when the
    node info is refused too (403: a user without `monitor`, who may only read its indexes)."""
    root = yield ROOT
    if root.ok:
        return str(root.body["version"]["number"])
    nodes = yield NODE_VERSION
    if nodes.status == 403:
        return None
    if not nodes.ok or not isinstance(nodes.body, dict):
        raise ClusterRefused(f"reading the node info was refused ({nodes.status})", nodes)
    return next((str(node["version"]) for node in nodes.body["nodes"].values()), None)


# -- stored scripts ------------------------------------------------------------------------


def stored_scripts(dialect: Dialect) -> tuple[StoredScript, StoredScript]:
    """The scripts a dialect's searches run, in the order they are checked and stored."""
    return dialect.score_script, dialect.exclude_script


def script_read(script: StoredScript) -> ClusterRead:
    return ClusterRead("GET", f"/_scripts/{script.id}")


def script_write(script: StoredScript) -> ClusterRead:
    return ClusterRead("PUT", f"/_scripts/{script.id}", script.body())


def script_is_ours(script: StoredScript, found: Any, url: str) -> bool:
    """Read a `script_read` answer (`found` None: the engine answered 404): True when the
    packaged source is stored, False when nothing is (store it); ScriptMismatch naming
    `itlr install` when other source is stored under the id."""
    if found is None:
        return False
    check_stored(script, found, url)
    return True


@dataclass
class ScriptCheck:
    """What a check of a dialect's stored scripts found: the ids compared, those it stored
    (missing, or foreign and repaired), and the first foreign one it left in place."""

    checked: list[str] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    foreign: ScriptMismatch | None = None


def check_scripts(
    dialect: Dialect, url: str, *, store: bool = True, repair: bool = False
) -> Operation[ScriptCheck]:
    """Compare each of the dialect's stored scripts with the packaged source: a missing one is
    stored when `store`, a foreign one overwritten when `repair` (what `itlr install` asks for)
    and else kept in the result (the caller refuses with it). ClusterRefused when a read or a
    store is refused, or an answer is not JSON."""
    check = ScriptCheck()
    for script in stored_scripts(dialect):
        answer = yield script_read(script)
        if answer.status == 404:
            found = None
        elif not answer.ok:
            raise ClusterRefused(
                f"reading itlr's script {script.id} was refused ({answer.status})", answer
            )
        elif not answer.is_json:
            raise ClusterRefused(f"the answer for itlr's script {script.id} is not JSON", answer)
        else:
            found = answer.body
        try:
            ours = script_is_ours(script, found, url)
        except ScriptMismatch as foreign:
            if not repair:
                check.foreign = check.foreign or foreign
                check.checked.append(script.id)
                continue
            ours = False
        if not ours:
            if not store:
                continue  # missing, left missing: not checked
            put = yield script_write(script)
            if not put.ok:
                raise ClusterRefused(
                    f"storing itlr's script {script.id} was refused ({put.status})", put
                )
            check.stored.append(script.id)
        check.checked.append(script.id)
    return check


# -- the mapping of an index or pattern -----------------------------------------------------


def index_segment(target: str) -> str:
    """An index, alias or pattern (comma-separated for several) as a path segment: escaped as
    the engines' clients escape it, but for `*` and `,`."""
    return quote(target, safe="*,")


def index_mappings(target: str) -> Operation[dict[str, Any]]:
    """`{index: {"mappings": ...}}` of every index `target` resolves to (`GET <target>/_mapping`).
    ClusterRefused when the read is refused (a missing index: 404) or its answer is no object."""
    answer = yield ClusterRead("GET", f"/{index_segment(target)}/_mapping")
    if not answer.ok:
        raise ClusterRefused(
            f"cannot read the mapping of {target!r}: the cluster answered {answer.status}", answer
        )
    if not isinstance(answer.body, dict):
        raise ClusterRefused(f"the mapping of {target!r} is not a JSON object", answer)
    return answer.body


# -- counts: coverage and token statistics --------------------------------------------------


def _counted(answer: ClusterAnswer, what: str) -> dict[str, Any]:
    """A count's answer, or ClusterRefused saying `what` could not be counted and why."""
    if not answer.ok or not isinstance(answer.body, dict):
        reason = error_reason(answer.body, answer.body)
        raise ClusterRefused(f"{what}: the cluster answered {answer.status} ({reason})", answer)
    return answer.body


def count_coverage(
    target: str, vector_field: str, text_field: str, *, follow_state: bool = True
) -> Operation[Coverage]:
    """How many documents of `target` have a text but no vector (itlr.engines.coverage: one
    size-0 search); with `follow_state`, what a follower recorded in the mapping's `_meta`
    too (a mapping the reader may not read: the counts without it)."""
    answer = yield ClusterRead(
        "POST", f"/{index_segment(target)}/_search", coverage_body(vector_field, text_field)
    )
    counts = _counted(answer, f"cannot count the documents of {target!r} without a vector")
    mappings: list[dict[str, Any]] | None = None
    if follow_state:
        try:
            found = yield from index_mappings(target)
            mappings = [dict(one.get("mappings") or {}) for one in found.values()]
        except ClusterRefused:
            pass
    return parse_coverage(target, counts, mappings)


def count_statistics(target: str, query: Query) -> Operation[CorpusStats]:
    """The token statistics of the query's tokens in `target` that hybrid truths need: one
    aggregation, refused by the engine when some shard fails (statistics from some shards
    only would score unlike `itlr search` on the embedded engine)."""
    what = f"cannot count the token statistics of {target!r} that hybrid truths need"
    answer = yield ClusterRead(
        "POST",
        f"/{index_segment(target)}/_search",
        term_statistics_request(query),
        {"allow_partial_search_results": "false"},
    )
    try:
        return read_term_statistics(_counted(answer, what))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ClusterRefused(
            f"{what}: the cluster's answer has no statistics aggregations", answer
        ) from None


# -- the vector field of a mapping ---------------------------------------------------------

# The mapping types of a vector field: OpenSearch's and Elasticsearch's.
VECTOR_TYPES = ("knn_vector", "dense_vector")


@dataclass(frozen=True)
class MappedVector:
    """What a mapping records of a field: its type ("object" when it names none) and its
    dimension count (None while none is recorded: Elasticsearch 8.11+ before the first vector,
    an OpenSearch field made from a trained model)."""

    kind: str
    dims: int | None

    @property
    def is_vector(self) -> bool:
        return self.kind in VECTOR_TYPES


def vector_dims(field: Any) -> int | None:
    """The dimension count a field's mapping records (OpenSearch `dimension`, Elasticsearch
    `dims`), None when it records none."""
    if not isinstance(field, dict):
        return None
    dims = field.get("dimension", field.get("dims"))
    return None if dims is None else int(dims)


def mapped_vector(properties: Mapping[str, Any], field: str) -> MappedVector | None:
    """The field's entry in a mapping's `properties` (None: the mapping has no such field)."""
    entry = properties.get(field)
    if entry is None:
        return None
    kind = entry.get("type", "object") if isinstance(entry, dict) else "object"
    return MappedVector(str(kind), vector_dims(entry))


# -- the tie-break sort key ----------------------------------------------------------------

# itlr's own sort key after _score, mapped in every index itlr makes.
DOC_ID = "doc_id"


def tiebreak_for(properties: Mapping[str, Any], fallback: str | None) -> str | None:
    """The field that sorts ties after _score: itlr's `doc_id` where the mapping has it, else
    `fallback` (the engine's: `Dialect.fallback_tiebreak`, `_id` refused by Elasticsearch)."""
    return DOC_ID if DOC_ID in properties else fallback


__all__ = [
    "DOC_ID",
    "NODE_VERSION",
    "ROOT",
    "VECTOR_TYPES",
    "MappedVector",
    "ScriptCheck",
    "check_scripts",
    "count_coverage",
    "count_statistics",
    "engine_from_root",
    "engine_of",
    "index_mappings",
    "index_segment",
    "mapped_vector",
    "script_is_ours",
    "script_read",
    "script_write",
    "server_version",
    "stored_scripts",
    "tiebreak_for",
    "vector_dims",
]
