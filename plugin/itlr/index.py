"""The front door: one object per index, on any engine.

    idx = itlr.Index.open("notes")                       # embedded, under $ITLR_HOME/indexes
    idx.add([{"id": "d1", "text": "..."}])
    idx.search('"vitamin D" AND NOT "bone health"', k=10, hard_filter=0.6).hits

The CLI and the HTTP service are thin layers over this class: they parse their input into the
same names and call the same methods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, Unpack
from warnings import warn

from itlr.changes import Change, Delete, Patch, Update
from itlr.documents import BadLine, Reading
from itlr.embed import Embedder
from itlr.engines import Backend
from itlr.engines.connection import Connection
from itlr.engines.factory import EngineSpec, engine_name, open_backend
from itlr.engines.layout import IndexLayout
from itlr.errors import ConfigurationError
from itlr.ingest import delete, ingest, writer_session
from itlr.limits import LIMITS
from itlr.option_groups import (
    BackfillKeywords,
    BackfillOptions,
    EncoderKeywords,
    EncoderOptions,
    OpenKeywords,
    fold,
    fold_connection,
    refuse_unknown,
)
from itlr.options import SearchOptions, search_options
from itlr.prompts import settle
from itlr.query import Node, Query
from itlr.records import Document, Fields, NotADocument, check_document
from itlr.results import Hit, SearchResult
from itlr.retriever import Retriever
from itlr.translation import Request, Translation, translate_requests, truths_to_build
from itlr.write_report import WriteReport

if TYPE_CHECKING:
    from itlr.follow import FollowCycle
    from itlr.results import Coverage
    from itlr.rewrite.llm import LLMConfig

QueryLike = str | Query | Node


def _backfill_spec(
    name: str,
    url: str | None,
    connection: Connection | None,
    text_field: str,
    vector_field: str,
    engine: str | None,
    keywords: Mapping[str, Any],
) -> EngineSpec:
    """The EngineSpec `Index.backfill` and `Index.follow` read the index by."""
    reached = fold_connection(url, connection, keywords)
    if reached is None:
        raise ConfigurationError("back-fill works on a cluster index: give `url` (or `connection`)")
    return EngineSpec(
        engine=engine or "auto",
        index_name=str(name),
        connection=reached,
        layout=IndexLayout(vector_field, text_field),
    )


def as_query(query: QueryLike) -> Query:
    """A query from text (parsed), a built tree (`Term("a") & ~Term("b")`) or a query."""
    return Query.of(query)


class Index:
    """An index and the model that embeds its documents and query terms.

    Open it with `Index.open`; the model is loaded once per process and shared by every index
    that uses it.
    """

    def __init__(self, spec: EngineSpec, backend: Backend, embedder: Embedder) -> None:
        self.spec = spec
        self.backend = backend
        self.embedder = embedder
        self._retriever = Retriever(backend, embedder)

    @classmethod
    def open(
        cls,
        name: str | Path,
        *,
        url: str | None = None,
        engine: str | None = None,
        connection: Connection | None = None,
        encoding: EncoderOptions | None = None,
        vector_field: str = "embedding",
        text_field: str = "text",
        inline_script: bool = False,
        create: bool | None = None,
        knn_engine: str | None = None,
        **keywords: Unpack[OpenKeywords],
    ) -> Index:
        """Open an index by name.

        Without `url` (or `connection`) the index is embedded: a bare name lives under
        `$ITLR_HOME/indexes/NAME` (the same place the CLI's `--index NAME` uses), a path is used
        as given, and a missing index is created for the model (the bundled all-MiniLM-L6-v2 by
        default). With `url` the engine is asked what it is (OpenSearch or Elasticsearch) unless
        `engine` says so. A missing cluster index is created only with `create=True`.

        The cluster is reached by `connection` (itlr.engines.connection.Connection), or by `url`
        and the keywords `user`, `password`, `api_key`, `ca_file`, `verify_certs` (each else
        from ITLR_USER / ITLR_PASSWORD / ITLR_API_KEY / ITLR_CA_FILE). Texts are embedded as
        `encoding` says (itlr.option_groups.EncoderOptions), or as the keywords `model`,
        `encoder`, `encoder_url`, `query_prompt`, `passage_prompt` say: `encoder` runs the
        model with its ONNX export (`"onnx"`, the default, `"onnx-int8"`) or torch, or asks the
        OpenAI-compatible endpoint at `encoder_url` (`"openai"`: `model` is the name it serves;
        the key comes from ITLR_ENCODER_API_KEY); itlr.embed.ENCODERS.
        `query_prompt` / `passage_prompt` go in front of query terms / documents (E5's
        `"query: "`); an index itlr makes records them, and later opens use the recorded ones
        (itlr.prompts): giving others is an error. A group and its own keywords together are
        an error.
        """
        refuse_unknown("Index.open", keywords, OpenKeywords)
        chosen = fold(EncoderOptions, encoding, keywords, "encoding")
        clustered = url is not None or connection is not None
        engine = engine_name(engine) if engine else ("auto" if clustered else "embedded")
        reached = None
        if clustered and engine != "embedded":
            reached = fold_connection(url, connection, keywords)
        elif engine != "embedded":
            raise ConfigurationError(f"`engine={engine!r}` needs a cluster: give `url`")
        spec = EngineSpec(
            engine=engine,
            index_name=str(name),
            connection=reached,
            layout=IndexLayout(vector_field, text_field),
            inline_script=inline_script,
            knn_engine=knn_engine,
        )
        if create is None:
            create = engine == "embedded"
        return cls.from_spec(spec, encoding=chosen, create=create)

    @classmethod
    def from_spec(
        cls,
        spec: EngineSpec,
        *,
        encoding: EncoderOptions | None = None,
        create: bool = False,
        **keywords: Unpack[EncoderKeywords],
    ) -> Index:
        """Open the index an EngineSpec describes (what the CLI's engine flags build), its texts
        embedded as `encoding` (or the keywords `model`, `encoder`, ... of `Index.open`) says."""
        refuse_unknown("Index.from_spec", keywords, EncoderKeywords)
        chosen = fold(EncoderOptions, encoding, keywords, "encoding")
        embedder = chosen.embedder()
        given = embedder.with_prompts(chosen.query_prompt or "", chosen.passage_prompt or "")
        backend = open_backend(spec, given, create=create)
        prompts = settle(
            chosen.query_prompt,
            chosen.passage_prompt,
            backend.prompts,
            f"index {spec.index_name!r}",
        )
        return cls(spec, backend, embedder.with_prompts(prompts.query, prompts.passage))

    @classmethod
    def backfill(
        cls,
        name: str,
        *,
        url: str | None = None,
        text_field: str,
        vector_field: str = "embedding",
        engine: str | None = None,
        connection: Connection | None = None,
        encoding: EncoderOptions | None = None,
        backfill: BackfillOptions | None = None,
        follow: bool = False,
        stop: threading.Event | None = None,
        on_cycle: Callable[[FollowCycle], None] | None = None,
        on_line: Callable[[str], None] | None = None,
        **keywords: Unpack[BackfillKeywords],
    ) -> WriteReport:
        """Embed `text_field` of every document already in a cluster index (one itlr did not
        make) and write the vectors into `vector_field`; re-runs embed only changed texts.
        The cluster is reached as `Index.open` says (`connection`, or `url` and its keywords);
        texts are embedded as `encoding` (or `model`, `encoder`, `encoder_url`,
        `passage_prompt`) says; how to back-fill is `backfill` (itlr.option_groups.
        BackfillOptions), or its keywords `into`, `alias`, `install_pipeline`, `exact_only`,
        `batch_size`.

        With `into`, mirror the source into that index instead (created like the source plus
        the vector field; documents copied whole, those gone from the source deleted; `alias`
        then points at it); an existing `into` is written only if itlr made it as a copy of
        this source (itlr.into). Open the result with `Index.open(..., vector_field=...)`.

        `install_pipeline` makes itlr's hash guard the index's final pipeline, so rewritten
        texts lose their hash (itlr.hash_guard). To keep the vectors current afterwards, use
        `Index.follow` (`follow=True` here still does, with a DeprecationWarning).
        `exact_only` (OpenSearch, in place): the vector mapped without an ANN method, so an
        index created without `index.knn` is back-filled where it is and searched with
        `mode="exact"`. Either way the result is a WriteReport (itlr.write_report), as `add`
        returns."""
        if follow:
            warn(
                "Index.backfill(..., follow=True) is deprecated: call Index.follow(...) with the "
                "same arguments (without follow=)",
                DeprecationWarning,
                stacklevel=2,
            )
            return cls.follow(
                name,
                url=url,
                text_field=text_field,
                vector_field=vector_field,
                engine=engine,
                connection=connection,
                encoding=encoding,
                backfill=backfill,
                stop=stop,
                on_cycle=on_cycle,
                on_line=on_line,
                **keywords,
            )
        from itlr.backfill import backfill_spec

        refuse_unknown("Index.backfill", keywords, BackfillKeywords)
        spec = _backfill_spec(name, url, connection, text_field, vector_field, engine, keywords)
        return backfill_spec(
            spec,
            fold(EncoderOptions, encoding, keywords, "encoding"),
            fold(BackfillOptions, backfill, keywords, "backfill"),
        )

    @classmethod
    def follow(
        cls,
        name: str,
        *,
        url: str | None = None,
        text_field: str,
        vector_field: str = "embedding",
        engine: str | None = None,
        connection: Connection | None = None,
        encoding: EncoderOptions | None = None,
        backfill: BackfillOptions | None = None,
        stop: threading.Event | None = None,
        on_cycle: Callable[[FollowCycle], None] | None = None,
        on_line: Callable[[str], None] | None = None,
        **keywords: Unpack[BackfillKeywords],
    ) -> WriteReport:
        """Back-fill as `Index.backfill` does (the same arguments), then keep running until
        `stop` is set (`itlr backfill --follow`): every `interval` seconds it embeds the
        documents written since (no `itlr_hash`), or with `into` copies every write of the
        source, calling `on_cycle` after each busy look and `on_line` with its start, idle and
        re-check lines, and returns the follower's report (itlr.follow). In place a hash sweep
        re-reads `verify_rate` documents a second (default 1000; 0: none) to catch texts
        changed without the hash noticing. `interval` and `verify_rate` are BackfillOptions'
        fields too."""
        from itlr.follow_run import follow_spec

        refuse_unknown("Index.follow", keywords, BackfillKeywords)
        return follow_spec(
            _backfill_spec(name, url, connection, text_field, vector_field, engine, keywords),
            fold(EncoderOptions, encoding, keywords, "encoding"),
            fold(BackfillOptions, backfill, keywords, "backfill"),
            stop=stop,
            on_cycle=on_cycle,
            on_line=on_line,
        )

    # -- what it is ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.index_name

    @property
    def engine(self) -> str:
        """embedded, opensearch or elasticsearch (what auto-detection found)."""
        return self.backend.engine

    @property
    def warnings(self) -> tuple[str, ...]:
        """What opening the index noticed (e.g. a mapping that lacks something)."""
        return tuple(self.backend.warnings)

    def count(self) -> int:
        return self.backend.count()

    def coverage(self) -> Coverage | None:
        """How many documents of a cluster index have a text but no vector, so that no search
        can find them (counted at most every few seconds); None for an embedded index, whose
        documents always get their vector with their text."""
        return self.backend.coverage()

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        return f"Index({self.name!r}, engine={self.engine!r}, model={self.embedder.name!r})"

    def to_dict(self) -> dict[str, Any]:
        """What the index is, without any credential."""
        return {
            "index": self.name,
            "engine": self.engine,
            "model": self.embedder.name,
            "dims": self.embedder.dims,
        }

    # -- writing ---------------------------------------------------------------------------

    def add(
        self,
        documents: Iterable[Mapping[str, Any] | Change | BadLine],
        *,
        batch_size: int = 64,
        on_batch: Any = None,
        id_field: str | None = None,
        text_field: str | None = None,
        merge: bool = False,
    ) -> WriteReport:
        """Embed and store documents as upserts: a new id is added, an id whose text changed is
        embedded again and replaced, one whose fields only changed is replaced with its stored
        vector, an unchanged one is skipped (compared by content hash, never by vector).

        `documents` is read lazily unless it is a sequence: an iterator of any length (e.g.
        itlr.documents.DocumentStream's entries) costs the memory of a few batches; a stream's
        lines that are not documents are warnings (UserWarning) and skipped. Updates,
        patches and deletions (itlr.changes) apply in their place.

        A document is a Document or a mapping with an id and a text (`id`/`_id`/`doc_id`,
        `text`/`body`/`content`, or the keys `id_field` / `text_field` name); its other keys
        are stored as fields for filters. A document nested deeper than ITLR_MAX_DEPTH, with a
        NaN / Infinity value or an empty text is refused with a one-line error.

        Into a cluster index itlr did not make (no `_meta.itlr`) documents keep their shape:
        their keys stay at the top of `_source`, the id goes to `_id` (and stays a field only
        where the index maps its key or `id_field` names it), and itlr's own fields are mapped
        before the first write; what cannot be written safely is refused in one line first.

        With `merge`, each document is a partial update (`_bulk` `update` with `doc`): its
        fields merge into the stored document's, whose other fields stay; a mapping without a
        text patches the stored document's fields and keeps its text and vector.
        """
        reading = Reading(Fields(id_field, text_field), merge)
        docs: Iterable[Change] = (
            _change(d, n, reading)
            for n, d in enumerate(documents, 1)
            if _entry(d)  # a DocumentStream's line that is no document: warned, skipped
        )
        if isinstance(documents, Sequence):
            docs = list(docs)  # all checked (and, into a foreign index, compared) before writing
        with writer_session(self.backend):
            report = ingest(
                docs,
                self.backend,
                self.embedder,
                batch_size=batch_size,
                on_batch=on_batch,
                id_field=id_field,
            )
        self._refresh(report)
        return report

    def delete(self, ids: Iterable[str]) -> WriteReport:
        """Delete documents by id; `report.deleted` counts those the index held."""
        report = delete(ids, self.backend)
        self._refresh(report)
        return report

    def compact(self) -> tuple[int, int]:
        """Rewrite an embedded index without the rows of replaced and deleted documents:
        (committed rows before, after). Crash-safe; writes do it by themselves once dead rows
        are over ITLR_COMPACT_DEAD_RATIO of the rows. A cluster merges its own segments."""
        return self.backend.compact()

    def _refresh(self, report: WriteReport) -> None:
        if report.changed:
            self.backend.refresh()  # a search right after a write should see it

    # -- reading ---------------------------------------------------------------------------

    def options(self, options: SearchOptions | None = None, **names: Any) -> SearchOptions:
        """SearchOptions from keyword names (k, mode, hard_filter, and_, truth, ...)."""
        if options is not None:
            if names:
                raise ConfigurationError(
                    f"give either `options` or keyword options, not both (got {sorted(names)})"
                )
            return options
        return search_options(model=self.embedder.name, **names)

    def search(
        self,
        query: QueryLike,
        k: int = 10,
        *,
        options: SearchOptions | None = None,
        rewrite: str | None = None,
        llm: LLMConfig | None = None,
        **names: Any,
    ) -> SearchResult:
        """Run a logical query: hits with score and per-term truths, best first, and warnings.

        Options by name (itlr.options.OPTIONS): mode ("knn" or "exact"), candidates, plan,
        hard_filter, hard_filter_rule, and_, or_, not_, not_strength, truth, tau, lam, filter,
        exclude_lexical, explain, from_, search_after, source_fields, highlight. With `rewrite="rules"` (or "llm" and
        an `llm` config) `query` is a plain-language question, rewritten first; text that is
        already a logical query is used as typed.
        """
        if options is None:
            names["k"] = k
        options = self.options(options, **names)  # bad options fail before any model call
        if rewrite in (None, "none"):
            return self._retriever.search(as_query(query), options)
        if not isinstance(query, str):
            raise ConfigurationError("`rewrite` takes a question as text, not a built query")
        if rewrite == "llm" and llm is None:
            raise ConfigurationError('`rewrite="llm"` needs an `llm` configuration (a model)')
        from itlr.rewrite import rewrite_for_search

        rewritten = rewrite_for_search(query, rewrite, llm)
        result = self._retriever.search(rewritten.query, options)
        return replace(result, rewrite=rewritten)

    def dense(self, text: str, k: int = 10, *, filter: dict[str, Any] | None = None) -> list[Hit]:
        """Plain dense retrieval of the whole text: the baseline logical retrieval improves on."""
        return self._retriever.dense(text, k, filter)

    def request(
        self,
        query: QueryLike,
        k: int = 10,
        *,
        engine: str | None = None,
        options: SearchOptions | None = None,
        **names: Any,
    ) -> dict[str, Any]:
        """The search body this query becomes on the engine, without any network call.

        A cluster index gives its own engine's body; an embedded one the body for `engine`
        (opensearch by default), as `itlr translate --format json` prints it.
        """
        return self.requests(query, k, engine=engine, options=options, **names)[-1].body

    def requests(
        self,
        query: QueryLike,
        k: int = 10,
        *,
        engine: str | None = None,
        options: SearchOptions | None = None,
        with_install: bool = False,
        **names: Any,
    ) -> list[Request]:
        """The requests to send, in order: the script installs (with_install), then the search.
        What `translate` notes is also issued as a warning."""
        translated = self.translate(
            query, k, engine=engine, options=options, with_install=with_install, **names
        )
        for note in translated.warnings:
            warn(note, UserWarning, stacklevel=2)
        return translated.requests

    def translate(
        self,
        query: QueryLike,
        k: int = 10,
        *,
        engine: str | None = None,
        options: SearchOptions | None = None,
        with_install: bool = False,
        **names: Any,
    ) -> Translation:
        """The requests to send (`requests`) and what building them noted.

        Hybrid truths need the index's token statistics: a cluster index counts them (one
        request). An embedded index cannot count a cluster index's: hybrid truths asked for
        (`truth="hybrid"`, or `options` whose truth map is not the default one) are refused,
        and when they are only the default the requests use cosine truths, noted."""
        # The default truths are the ones not named in `names`, or a default truth map.
        explicit = "truth" in names if options is None else options.truth != SearchOptions().truth
        if options is None:
            names["k"] = k
        options = self.options(options, **names)
        from itlr.engines.cluster import ClusterBackend
        from itlr.engines.elasticsearch import ElasticsearchBackend

        engine = engine or (self.engine if self.engine != "embedded" else "opensearch")
        # A cluster index's own requests: its server's version, its statistics, its tie-break.
        cluster = self.backend if isinstance(self.backend, ClusterBackend) else None
        version = None
        if engine == "elasticsearch" and isinstance(self.backend, ElasticsearchBackend):
            version = self.backend.capabilities.version
        parsed = as_query(query)
        LIMITS.check_tree(parsed.root)
        count = partial(cluster.term_statistics, parsed) if cluster is not None else None
        options, statistics, notes = truths_to_build(options, explicit, self.name, count)
        requests = translate_requests(
            parsed,
            engine,
            self.name,
            options,
            self.embedder,
            with_install=with_install,
            inline_script=self.spec.inline_script,
            vector_field=self.spec.layout.vector_field,
            text_field=self.spec.layout.text_field,
            server_version=version,
            # Learnt from a cluster index's mapping (no doc_id: _id / _doc).
            tiebreak=(cluster.layout if cluster is not None else self.spec.layout).tiebreak,
            statistics=statistics,
        )
        return Translation(requests, notes)


def _entry(given: object) -> TypeGuard[Mapping[str, Any] | Change]:
    """Whether `given` is a document or change; a stream's bad line is a warning."""
    if isinstance(given, BadLine):
        warn(str(given), stacklevel=4)
        return False
    return True


def _change(given: Mapping[str, Any] | Change, number: int, reading: Reading) -> Change:
    """One item given to `Index.add` as a checked change (a one-line error for a bad one)."""
    where = f"document {number}"
    if isinstance(given, Update | Patch | Delete):  # e.g. from itlr.documents.DocumentStream
        return given
    if isinstance(given, Document):
        document = check_document(given, where)
        return Update(document) if reading.merge else document
    try:
        return reading.change(dict(given), "", number)
    except NotADocument as bad:
        raise ConfigurationError(f"{where}: {bad}") from None
