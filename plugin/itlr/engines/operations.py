"""The cluster requests that ingestion, back-fill and the follower compose: read an index
(exists, mapping, settings, count, search, scan, mget), change it (create, put mapping, put
settings, put an ingest pipeline, move an alias, refresh) and bulk-write with the error report
of every refused action. Each request is written once here and raises itlr's one-line errors
(itlr.engines.connection) about the index it names.

opensearch-py and elasticsearch-py differ in how a request's body is passed (`body=` against
keyword arguments) and in which `helpers` module streams scrolls and bulk requests: an engine
module subclasses ClusterOperations with those few shapes, so that nothing built on these
operations asks which engine it talks to (opensearch-py's own `reindex` is scan -> generator ->
bulk in the same way).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from itlr.engines.connection import error_reason, missing_index
from itlr.errors import EngineError, IndexStateError

if TYPE_CHECKING:
    from itlr.engines.cluster_client import Operation

T = TypeVar("T")

# How long a scroll context lives between two pages of a scan.
SCROLL = "5m"


@dataclass(frozen=True)
class IndexState:
    """One concrete index as `GET /NAME` describes it: a name may be an alias or a pattern
    that resolves to several (itlr.into and the follower compare these between looks)."""

    name: str
    uuid: str
    settings: dict[str, Any]
    mappings: dict[str, Any]
    aliases: frozenset[str]


@dataclass(frozen=True)
class Refusal:
    """Why the engine refused one bulk action: its HTTP status, error type and reason."""

    status: int
    type: str
    reason: str

    @property
    def conflict(self) -> bool:
        """The document changed since it was read (`if_seq_no` no longer matches). Known by
        status and type: the words differ (Elasticsearch "version_conflict_engine_exception",
        OpenSearch "version conflict, required seqNo ...")."""
        return self.status == 409 or self.type == "version_conflict_engine_exception"

    @property
    def missing(self) -> bool:
        """The document is gone (a delete or an update of an id the index no longer holds)."""
        return self.status == 404 or self.type == "document_missing_exception"


class ClusterOperations:
    """Requests to one cluster through its client; subclasses supply the engine's call shapes."""

    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    # -- engine shapes ---------------------------------------------------------------------

    def errors(self, index: str) -> contextlib.AbstractContextManager[None]:
        """The client's exceptions become one actionable line about `index`."""
        raise NotImplementedError

    def vector_field_refusal(self, index: str, field: str) -> str | None:
        """Why the engine cannot add the vector field `field` to `index` in place (one line),
        or None when it can."""
        return None

    def _helpers(self) -> ModuleType:
        raise NotImplementedError

    def _create(self, index: str, settings: dict[str, Any], mappings: dict[str, Any]) -> None:
        raise NotImplementedError

    def _mget(self, index: str, ids: list[str], source: list[str] | bool) -> Any:
        raise NotImplementedError

    def _mget_excluding(self, index: str, ids: list[str], excludes: list[str]) -> Any:
        raise NotImplementedError

    def _mget_docs(self, index: str, docs: list[dict[str, Any]], source: list[str] | bool) -> Any:
        """mget of `{"_id", "routing"}` entries (documents written with a routing)."""
        raise NotImplementedError

    def _count(self, index: str, query: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        raise NotImplementedError

    def _put_settings(self, index: str, settings: dict[str, Any]) -> None:
        raise NotImplementedError

    def _put_meta(self, index: str, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _put_pipeline(self, pipeline_id: str, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _update_aliases(self, actions: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _simulate(self, pipeline_id: str, docs: list[dict[str, Any]]) -> Any:
        raise NotImplementedError

    # -- reading ---------------------------------------------------------------------------

    def exists(self, index: str) -> bool:
        with self.errors(index):
            return bool(self.client.indices.exists(index=index))

    def run(self, operation: Operation[T], index: str) -> T:
        """One operation of the cluster client layer over this client (itlr.engines.
        cluster_client): an error names `index`, the one it is made for."""
        from itlr.engines.cluster_client import ClientTransport, run

        with self.errors(index):
            return run(operation, ClientTransport(self.client))

    def mapping(self, index: str) -> dict[str, Any]:
        """The `mappings` object of one index (an alias of one index: of that one)."""
        from itlr.engines.cluster_reads import index_mappings

        return dict(one_index(index, self.run(index_mappings(index), index))["mappings"])

    def settings(self, index: str) -> dict[str, Any]:
        """The `settings.index` object of one index (an alias of one index: of that one)."""
        with self.errors(index):
            answer = dict(self.client.indices.get_settings(index=index))
        return dict(one_index(index, answer)["settings"]["index"])

    def describe(self, index: str) -> list[IndexState]:
        """Every concrete index `index` names (itself, an alias's indexes, a pattern's
        matches), with its settings, mappings and aliases, in one request."""
        with self.errors(index):
            answer = dict(self.client.indices.get(index=index))
        return [
            IndexState(
                name,
                str(body["settings"]["index"].get("uuid", "")),
                dict(body["settings"]["index"]),
                dict(body.get("mappings") or {}),
                frozenset(body.get("aliases") or {}),
            )
            for name, body in sorted(answer.items())
        ]

    def shard_checkpoints(self, index: str) -> dict[int, int]:
        """{shard number: global checkpoint} of one index: every operation up to that
        sequence number is done on every in-sync copy, so a refresh after this read shows
        them all (itlr.change_feed reads the index in `_seq_no` order up to it)."""
        with self.errors(index):
            answer = dict(self.client.indices.stats(index=index, level="shards", metric="docs"))
        shards = one_index(index, answer["indices"])["shards"]
        return {
            int(number): int(copy["seq_no"]["global_checkpoint"])
            for number, copies in shards.items()
            for copy in copies
            if copy["routing"]["primary"]
        }

    def count(self, index: str, query: dict[str, Any] | None = None) -> int:
        """How many documents `index` holds (that match `query`), as last refreshed."""
        with self.errors(index):
            if query is None:
                return int(self.client.count(index=index)["count"])
            return int(self._count(index, query)["count"])

    def search(
        self, index: str, body: dict[str, Any], preference: str | None = None
    ) -> dict[str, Any]:
        """One search; `preference` (e.g. `_shards:0`) picks the shards that answer."""
        with self.errors(index):
            if preference is None:
                return dict(self.client.search(index=index, body=body))
            return dict(self.client.search(index=index, body=body, preference=preference))

    def scan(
        self, index: str, source: list[str] | bool = True, size: int = 256, seq_no: bool = False
    ) -> Iterator[Any]:
        """Every document of `index` (these `_source` fields; True: whole, False: none), read
        with the client's scrolling `helpers.scan` in pages of `size`; `seq_no`: each hit with
        its `_seq_no` and `_primary_term` (for a write conditional on them)."""
        query: dict[str, Any] = {"query": {"match_all": {}}, "_source": source}
        if seq_no:
            query["seq_no_primary_term"] = True
        with self.errors(index):
            yield from self._helpers().scan(
                self.client,
                index=index,
                query=query,
                size=size,
                scroll=SCROLL,
            )

    def mget(
        self,
        index: str,
        ids: list[str],
        source: list[str] | bool = True,
        excludes: list[str] | None = None,
        routing: dict[str, str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """{id: _source} of the ids `index` holds: these fields (True: whole, False: none), or
        the whole but `excludes`; `routing` gives the routing of ids written with one (without
        it the engine looks on another shard and does not find them). A document the engine
        could not read (a missing index, a failed shard) is an error, never taken for one the
        index does not hold."""
        if not ids:
            return {}
        with self.errors(index):
            if routing:
                docs = [
                    {"_id": i, **({"routing": routing[i]} if i in routing else {})} for i in ids
                ]
                found = self._mget_docs(index, docs, source)
            elif excludes is not None:
                found = self._mget_excluding(index, ids, excludes)
            else:
                found = self._mget(index, ids, source)
        refused = next((d for d in found["docs"] if "error" in d), None)
        if refused is not None:
            reason = error_reason(refused, refused["error"])
            if "index_not_found" in reason:
                raise missing_index(self.url, index)
            raise EngineError(
                f"{self.url} could not read document {refused.get('_id')!r} of {index!r}: {reason}"
            )
        return {d["_id"]: dict(d.get("_source") or {}) for d in found["docs"] if d.get("found")}

    # -- changing --------------------------------------------------------------------------

    def refresh(self, index: str) -> None:
        with self.errors(index):
            self.client.indices.refresh(index=index)

    def create_index(self, index: str, settings: dict[str, Any], mappings: dict[str, Any]) -> None:
        with self.errors(index):
            self._create(index, settings, mappings)

    def put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        """Add these fields to the index's mapping."""
        with self.errors(index):
            self._put_mapping(index, properties)

    def put_settings(self, index: str, settings: dict[str, Any]) -> None:
        """Change these (dynamic) index settings, nested as in `{"index": {...}}`."""
        with self.errors(index):
            self._put_settings(index, settings)

    def put_meta(self, index: str, meta: dict[str, Any]) -> None:
        """Replace the index's mapping `_meta` (the engines replace it whole: merge first)."""
        with self.errors(index):
            self._put_meta(index, meta)

    def put_pipeline(self, pipeline_id: str, body: dict[str, Any], index: str) -> None:
        """Store an ingest pipeline (an error names `index`, the one it is put for)."""
        with self.errors(index):
            self._put_pipeline(pipeline_id, body)

    def move_alias(self, alias: str, index: str) -> None:
        """Point `alias` at `index` alone, in one atomic request."""
        with self.errors(index):
            actions: list[dict[str, Any]] = []
            if self.client.indices.exists_alias(name=alias):
                holders = dict(self.client.indices.get_alias(name=alias))
                actions += [{"remove": {"index": name, "alias": alias}} for name in holders]
            actions.append({"add": {"index": index, "alias": alias}})
            self._update_aliases(actions)

    def simulate(
        self,
        pipeline_id: str,
        index: str,
        ids: list[str],
        sources: list[dict[str, Any] | None],
    ) -> list[dict[str, Any] | None]:
        """Each `_source` as the ingest pipeline would leave it in `index`, in order; None for
        one it drops, refuses, or that is None already."""
        docs = [
            {"_index": index, "_id": i, "_source": s}
            for i, s in zip(ids, sources, strict=True)
            if s is not None
        ]
        if not docs:
            return list(sources)
        with self.errors(index):
            answer = self._simulate(pipeline_id, docs)
        results = iter(answer.get("docs") or [])
        simulated: list[dict[str, Any] | None] = []
        for source in sources:
            result = next(results, None) if source is not None else None
            doc = result.get("doc") if isinstance(result, dict) else None
            kept = doc.get("_source") if isinstance(doc, dict) else None
            simulated.append(dict(kept) if isinstance(kept, dict) else None)
        return simulated

    def bulk(
        self, actions: Iterable[dict[str, Any]], index: str, chunk_size: int = 500
    ) -> dict[str, str]:
        """Send bulk actions (a generator streams them) written into `index`; returns
        {id: reason} of every action the engine refused ("not found" for a delete or an update
        of a missing document). A failure of the whole request is a one-line EngineError."""
        refused = self.bulk_refusals(actions, index, chunk_size)
        return {doc_id: refusal.reason for doc_id, refusal in refused.items()}

    def bulk_refusals(
        self, actions: Iterable[dict[str, Any]], index: str, chunk_size: int = 500
    ) -> dict[str, Refusal]:
        """`bulk`, with each refused action's status and error type (a conflict is known by
        them, not by the engine's words).

        A whole request refused for what one of its actions holds (400: an id over 512 bytes;
        413: more than the cluster takes in one request) is sent again in halves until each
        refusal is one action's, so such a document costs itself only, never its batch."""
        failures: dict[str, Refusal] = {}
        again: list[dict[str, Any]] = []
        with self.errors(index):
            # streaming_bulk retries 429s with exponential backoff (1 s doubling to 30 s, five
            # tries); the client retries 5xx and time-outs.
            for ok, item in self._helpers().streaming_bulk(
                self.client,
                actions,
                chunk_size=chunk_size,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=5,
                initial_backoff=1,
                max_backoff=30,
            ):
                if ok:
                    continue
                ((op_type, result),) = item.items()
                if chunk_size > 1 and "exception" in result and result.get("status") in _SPLIT:
                    again.append(_action_again(op_type, result))
                else:
                    failures[str(result.get("_id"))] = refusal(result)
        if again:
            smaller = max(1, min(chunk_size, len(again)) // 2)
            failures.update(self.bulk_refusals(again, index, smaller))
        return failures


# Statuses of a whole bulk request refused for what some of its actions hold.
_SPLIT = (400, 413)
# The keys the client's report of a refused request adds to an action's metadata.
_REPORT_KEYS = frozenset({"error", "status", "exception", "data"})


def _action_again(op_type: str, result: dict[str, Any]) -> dict[str, Any]:
    """The action a refused request's report describes, to send again."""
    action = {"_op_type": op_type, **{k: v for k, v in result.items() if k not in _REPORT_KEYS}}
    if op_type == "delete":
        return action
    data = result.get("data")
    if op_type == "update" and isinstance(data, dict):
        return {**action, **data}  # its body: doc, upsert, script, ...
    return {**action, "_source": data}


def one_index(name: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The one index's part of an answer keyed by index name; a name that resolves to several
    (an alias of many, `*`, `_all`, `a,b`) is refused in one line."""
    if len(answer) == 1:
        return dict(next(iter(answer.values())))
    if not answer:
        # A pattern that matches nothing, or an index just created whose shards have not
        # started (its statistics are empty for a moment): a follower tries again.
        raise EngineError(
            f"{name!r} names no index with started shards: give the name of one index"
        )
    names = sorted(answer)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise IndexStateError(
        f"{name!r} names {len(names)} indexes ({shown}): give the name of one index"
    )


def refusal(result: dict[str, Any]) -> Refusal:
    """One refused bulk action's status, error type and reason."""
    error = result.get("error", {})
    kind = str(error.get("type", "")) if isinstance(error, dict) else ""
    return Refusal(int(result.get("status") or 0), kind, refused_reason(result))


def refused_reason(result: dict[str, Any]) -> str:
    """Why the engine refused one bulk action, as the report names it."""
    if result.get("result") == "not_found":
        return "not found"
    exception = result.get("exception")
    if exception is not None:  # the whole request was refused: the engine's own reason
        info = getattr(exception, "info", None) or getattr(exception, "body", None)
        return _shortened(error_reason(info, str(exception)))
    error = result.get("error", {})
    return _shortened(str(error.get("reason", str(error)) if isinstance(error, dict) else error))


_LONG_WORD = re.compile(r"\S{61,}")


def _shortened(reason: str, most: int = 300) -> str:
    """A reason that may quote a whole document or id, cut to one readable line: a long word
    (an id the engine quotes) keeps its ends."""
    reason = _LONG_WORD.sub(
        lambda m: f"{m.group()[:24]}…{m.group()[-12:]}", " ".join(reason.split())
    )
    return reason if len(reason) <= most else reason[: most - 1] + "…"
