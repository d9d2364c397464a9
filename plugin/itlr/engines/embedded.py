"""The embedded engine: an in-process index persisted in a directory.

Storage, crash consistency and the writer lock live in itlr.engines.store (read its docstring).
Rows are only ever appended, so an update or delete is one more row and the newest row of an id
wins; `compact()` rewrites the index without the dead rows, by itself at the end of a write once
dead rows are over `ITLR_COMPACT_DEAD_RATIO` (default 0.5) of at least `ITLR_COMPACT_MIN_ROWS`
(default 1,000) committed rows, so an index updated in place stays near its live size.

Scores are always exact cosines of the stored float32 rows. From `ann_min_rows` documents on,
knn mode and plain kNN take their candidates from an HNSW graph (itlr.engines.ann), a derived
cache built on `committed_rows` (how many rows are committed, live or dead) and `vectors`
(their unit vectors, row i for row i); both only change at a commit. knn mode's rounds and
certificate live in itlr.engines.embedded_knn, the cosine and top-k kernels in
itlr.engines.kernels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from itlr.composition import compose, explainer
from itlr.engines.ann import ANN_MIN_ROWS, AnnGraph
from itlr.engines.embedded_knn import ROUTING_MIN_ROWS, knn_rounds
from itlr.engines.embedded_lexical import LexicalState
from itlr.engines.filters import filter_rows
from itlr.engines.folders import writable_folder
from itlr.engines.kernels import cosine_matrix, normalise, top_k
from itlr.engines.store import FORMAT_VERSION, StoredRow, VectorStore, exists
from itlr.engines.writer_lock import LOCK_WAIT_SECONDS
from itlr.errors import ConfigurationError, IndexStateError
from itlr.highlight import query_words, shaped_hit
from itlr.lexical import CorpusStats
from itlr.options import SearchOptions
from itlr.prompts import Prompts
from itlr.query import Query
from itlr.records import Document
from itlr.renamed import renamed
from itlr.results import Hit, Ranking, SearchResult
from itlr.settings import env_number
from itlr.transform import ItlrFields

# Compaction by itself: dead rows over this share of at least this many committed rows.
COMPACT_DEAD_RATIO = 0.5
COMPACT_MIN_ROWS = 1_000


class EmbeddedBackend:
    """The embedded engine's Backend (itlr.engines): an index in a local folder. knn mode
    gathers candidates from an HNSW graph (itlr.engines.ann) once the index holds `ann_min_rows`
    documents, and by an exact scan below that or when a filter is given."""

    engine = "embedded"
    # Its documents have itlr's shape (id, text, fields): nothing of their own to keep, no
    # mapping to prepare, no field a replace could drop without being given it.
    foreign: bool | None = False
    top_fields: frozenset[str] = frozenset()

    def __init__(self, store: VectorStore) -> None:
        try:
            # ITLR_ANN_MIN_ROWS moves the threshold (0: always use the graph; a huge value:
            # never); ITLR_ROUTING_MIN_ROWS likewise (0: always probe; a huge value: never for
            # several positive terms).
            self.ann_min_rows = env_number(
                "ITLR_ANN_MIN_ROWS", ANN_MIN_ROWS, least=0, meaning="a number of rows"
            )
            self.routing_min_rows = env_number(
                "ITLR_ROUTING_MIN_ROWS", ROUTING_MIN_ROWS, least=0, meaning="a number of rows"
            )
            # Above 1: never by itself (dead rows are at most all of them).
            self.compact_dead_ratio = env_number(
                "ITLR_COMPACT_DEAD_RATIO",
                COMPACT_DEAD_RATIO,
                least=0.0,
                meaning="the share of dead rows that starts a compaction",
            )
            self.compact_min_rows = env_number(
                "ITLR_COMPACT_MIN_ROWS", COMPACT_MIN_ROWS, least=0, meaning="a number of rows"
            )
        except ConfigurationError:
            store.close()  # the caller never gets an index to close
            raise
        self.store = store
        self._ann = AnnGraph(store.path, store.dims)
        self._writing_depth = 0
        self.path = store.path
        self.model = store.model
        self.dims = store.dims
        # Opening checks everything it could warn about, and refuses instead.
        self.warnings: list[str] = []
        self._rows: list[StoredRow | None] = []
        self._latest: dict[str, int] = {}
        self._vectors: np.ndarray = np.zeros((0, self.dims), dtype=np.float32)
        self._live_cache: np.ndarray | None = None
        self._live_mask_cache: np.ndarray | None = None
        self._fields_cache: set[str] | None = None
        self._lengths = np.zeros(0, dtype=np.float64)  # each row's token count
        self._lexical = LexicalState(store)
        self._ranks_cache: tuple[tuple[int, int], np.ndarray] | None = None
        self._catch_up()

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | Path,
        model: str,
        dims: int,
        lock_timeout: float = LOCK_WAIT_SECONDS,
        prompts: Prompts | None = None,
    ) -> EmbeddedBackend:
        return cls(
            VectorStore.create(writable_folder(path), model, dims, lock_timeout, prompts=prompts)
        )

    @classmethod
    def open(cls, path: str | Path, lock_timeout: float = LOCK_WAIT_SECONDS) -> EmbeddedBackend:
        return cls(VectorStore.open(Path(path), lock_timeout))

    @classmethod
    def open_or_create(
        cls,
        path: str | Path,
        model: str,
        dims: int,
        lock_timeout: float = LOCK_WAIT_SECONDS,
        prompts: Prompts | None = None,
    ) -> EmbeddedBackend:
        path = writable_folder(path)
        if exists(path):
            backend = cls.open(path, lock_timeout)
            backend.check_compatible(model, dims)
            return backend
        # Two processes may both find no index and create it: the second opens the first's.
        backend = cls(
            VectorStore.create(path, model, dims, lock_timeout, exist_ok=True, prompts=prompts)
        )
        backend.check_compatible(model, dims)
        return backend

    def close(self) -> None:
        self.store.close()

    def check_compatible(self, model: str, dims: int) -> None:
        if dims != self.dims:
            raise IndexStateError(
                f"index at {self.path} holds {self.dims}-dim vectors but model {model!r} makes "
                f'{dims}-dim ones: use `model="{self.model}"` or a new index'
            )
        if model != self.model:
            raise IndexStateError(
                f"index at {self.path} was built with model {self.model!r}, not {model!r}: "
                f'use `model="{self.model}"` or a new index'
            )

    @property
    def prompts(self) -> Prompts:
        """The prompts its documents were embedded with (itlr.prompts)."""
        return self.store.prompts

    def manifest(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "model": self.model,
            "dims": self.dims,
            "similarity": "cosine",
            "count": self.count(),
        }

    @property
    def committed_rows(self) -> int:
        """Rows committed and loaded, live or dead: row numbers 0 .. committed_rows - 1."""
        return len(self._rows)

    @property
    def vectors(self) -> np.ndarray:
        """(committed_rows, dims) float32 unit vectors, memory-mapped; read-only."""
        return self._vectors

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Be the index's only writer for the block (a whole ingestion, say), up to date with
        what other processes committed before. Each write takes it by itself too. When the
        block ends without an error, the ANN graph is saved with every row."""
        with self.store.writing():
            self._writing_depth += 1
            try:
                self._catch_up()
                if self._writing_depth == 1:
                    # A vector file of another generation is a compaction a kill cut short.
                    self.store.remove_orphans()
                yield
            finally:
                self._writing_depth -= 1
            if self._writing_depth == 0:
                self._compact_if_due()
            if self._writing_depth == 0 and self.uses_ann():
                self._ann.catch_up(self.store.generation, self._vectors)
                self._ann.save_if_due(force=True)

    def commit_point(self) -> tuple[int, int]:
        """(generation, committed rows) this object has loaded."""
        return self.store.generation, len(self._rows)

    def follow_commits(self) -> bool:
        """Load what other processes committed since this object last looked; whether anything
        moved. Costs one small database read when nothing did (a long-running reader calls it
        before each request)."""
        if self.store.commit_point() == self.commit_point():
            return False
        self._catch_up()
        return True

    def _catch_up(self) -> None:
        """Load rows committed since this object last looked (by this or another process)."""
        if self.store.changed_generation():
            self._rows, self._latest = [], {}
        rows, lengths, vectors = self.store.read_rows(len(self._rows))
        self._lengths = np.concatenate([self._lengths[: len(self._rows)], lengths])
        for row in rows:
            self._append_row(row)
        self._vectors = vectors
        self._live_cache = self._live_mask_cache = self._fields_cache = None

    def _append_row(self, row: StoredRow) -> None:
        number = len(self._rows)
        self._rows.append(None if row.deleted else row)
        # Only now: ingestion asks `id in index` from another thread while a batch is written.
        self._latest[row.id] = number

    # -- writes ----------------------------------------------------------------------------

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Add documents; an id that exists already is replaced."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dims:
            raise IndexStateError(
                f"vectors have shape {vectors.shape}, index at {self.path} wants (n, {self.dims})"
            )
        if not (len(ids) == len(texts) == vectors.shape[0]):
            raise ConfigurationError("ids, texts and vectors must have the same length")
        fields = fields or [{} for _ in ids]
        rows = [StoredRow(str(i), t, dict(f)) for i, t, f in zip(ids, texts, fields, strict=True)]
        self._append(rows, normalise(vectors))

    def prepare_writes(self) -> None:
        """Nothing to prepare: the store's format is the only shape its documents take."""

    def check_replacements(
        self,
        fields: dict[str, dict[str, Any]],
        stored: Mapping[str, tuple[str | None, dict[str, Any]]],
    ) -> None:
        """Nothing to refuse: a document's fields are what itlr was last given for it."""

    def refresh(self) -> None:
        """Nothing to do: a committed write is in the next search of this object."""

    def coverage(self) -> None:
        """None: every document gets its vector with its text."""
        return None

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed."""
        with self.writing():
            present = [str(i) for i in ids if str(i) in self]
            if present:
                rows = [StoredRow(i, deleted=True) for i in present]
                self._append(rows, np.zeros((len(present), self.dims), dtype=np.float32))
        return len(present)

    def _append(self, rows: list[StoredRow], vectors: np.ndarray) -> None:
        with self.store.writing():
            self._catch_up()
            if self._writing_depth == 0:  # else writing() did, once for the session
                self.store.remove_orphans()
            lengths = self.store.append(rows, vectors)
            self._lengths = np.concatenate([self._lengths, lengths])
            for row in rows:
                self._append_row(row)
            self._vectors = self.store.vectors()
            self._live_cache = self._live_mask_cache = self._fields_cache = None
            if self._writing_depth == 0:
                self._compact_if_due()
            if self.uses_ann():
                # The graph grows with ingestion and is saved now and then, under the lock.
                self._ann.catch_up(self.store.generation, self._vectors)
                self._ann.save_if_due()

    def compact(self) -> tuple[int, int]:
        """Rewrite the index with live rows only: (committed rows before, after). Crash-safe as
        every write is: a new vector file, then one transaction swaps rows and generation
        (itlr.engines.store); a kill before it leaves the index as it was."""
        with self.writing():
            return self._compact()

    def _compact(self) -> tuple[int, int]:
        before = self.committed_rows
        live = self._live_rows()
        if len(live) == before:
            return before, before
        vectors = np.array(self._vectors[live])
        rows = [self._rows[i] for i in live]
        self.store.rewrite([r for r in rows if r is not None], vectors)
        self._rows, self._latest = [], {}
        self._catch_up()
        self.store.remove_orphans()
        return before, self.committed_rows

    def dead_rows(self) -> int:
        """Committed rows no search reads: replaced or deleted documents."""
        return self.committed_rows - len(self._live_rows())

    def _compact_if_due(self) -> None:
        rows = self.committed_rows
        if (
            rows >= max(1, self.compact_min_rows)
            and self.dead_rows() > self.compact_dead_ratio * rows
        ):
            with self.store.writing():
                self._catch_up()
                self._compact()

    # -- reads -----------------------------------------------------------------------------

    def uses_ann(self) -> bool:
        """Whether knn mode and plain kNN take candidates from the graph (`ann_min_rows`)."""
        return self.count() >= self.ann_min_rows

    def ann_lists(self, queries: np.ndarray, budgets: Sequence[int]) -> list[np.ndarray]:
        """Live rows among each query's `budget` graph neighbours, nearest first (by the
        graph's own half-precision distances: nearly, not exactly, the cosines' order).

        Dead rows stay in the graph, so each search asks for more neighbours in proportion to
        them."""
        self._ann.catch_up(self.store.generation, self._vectors)
        live = self._live_rows()
        share = len(live) / max(1, self.committed_rows)
        counts = [int(np.ceil(budget / share)) for budget in budgets]
        mask = self._live_mask()
        return [
            found[mask[found]] for found in self._ann.search(queries, counts, self.committed_rows)
        ]

    def _ann_rows(self, queries: np.ndarray, budgets: Sequence[int]) -> np.ndarray:
        """Live rows among each query's `budget` graph neighbours, unioned, in row order."""
        return np.unique(np.concatenate(self.ann_lists(queries, budgets)))

    def _id_ranks(self) -> np.ndarray:
        """Each row's place in the order of the rows' ids (dead rows: ""), computed once per
        set of committed rows: the tie-break of a ranking without a Python sort over ids."""
        key = (self.store.generation, len(self._rows))
        if self._ranks_cache is None or self._ranks_cache[0] != key:
            ids = np.array([row.id if row is not None else "" for row in self._rows], dtype=str)
            ranks = np.empty(len(ids), dtype=np.int64)
            ranks[np.argsort(ids, kind="stable")] = np.arange(len(ids))
            self._ranks_cache = (key, ranks)
        return self._ranks_cache[1]

    def lexical_truths(self, rows: np.ndarray, terms: tuple[str, ...]) -> np.ndarray:
        """(rows x terms) lexical truths, statistics over every live row (hybrid truths)."""
        return self._lexical.matrix(
            self._rows, self._lengths, self._live_mask(), self.store.generation, rows, terms
        )

    def term_statistics(self, tokens: Iterable[str] | None = None) -> CorpusStats:
        """The statistics over the live rows that lexical truths use: document frequencies of
        these tokens (default: of every token, a pass over all postings)."""
        return self._lexical.stats(
            self._rows, self._lengths, self._live_mask(), self.store.generation, tokens
        )

    lexical_stats = renamed("term_statistics", "EmbeddedBackend.lexical_stats")

    def _live_mask(self) -> np.ndarray:
        if self._live_mask_cache is None or len(self._live_mask_cache) != self.committed_rows:
            mask = np.zeros(self.committed_rows, dtype=bool)
            mask[self._live_rows()] = True
            self._live_mask_cache = mask
        return self._live_mask_cache

    def _live_rows(self) -> np.ndarray:
        if self._live_cache is None:
            rows = sorted(r for r in self._latest.values() if self._rows[r] is not None)
            self._live_cache = np.array(rows, dtype=np.int64)
        return self._live_cache

    def count(self) -> int:
        return len(self._live_rows())

    def __len__(self) -> int:
        return self.count()

    def __contains__(self, doc_id: object) -> bool:
        row = self._latest.get(str(doc_id))
        return row is not None and self._rows[row] is not None

    def existing_ids(self, ids: list[str]) -> set[str]:
        return {i for i in ids if i in self}

    def fingerprints(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (content hash, fields)} of the stored ids. The row keeps the exact text its
        vector was computed from and the index one model, so the hash is derived from the row
        on demand: no second copy to keep consistent, no change to the crash-safe format."""
        found, hashed = {}, ItlrFields(self.model)
        for doc_id in ids:
            row = self._latest.get(doc_id)
            record = self._rows[row] if row is not None else None
            if record is not None:
                found[doc_id] = (hashed.digest(record.text), record.fields)
        return found

    def written_fields(self, documents: Sequence[Document]) -> list[dict[str, Any]]:
        """The fields as given: nothing runs between a write and the store."""
        return [dict(d.fields) for d in documents]

    def stored_documents(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """{id: (text, fields)} of the stored ids (an update or a patch merges into them)."""
        found = {}
        for doc_id in ids:
            row = self._latest.get(doc_id)
            record = self._rows[row] if row is not None else None
            if record is not None:
                found[doc_id] = (record.text, dict(record.fields))
        return found

    def stored_vectors(self, ids: list[str]) -> np.ndarray:
        """The stored vectors of these ids, in order (a fields-only update reuses them)."""
        if not ids:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.stack([self.vector(i) for i in ids])

    def ids(self) -> list[str]:
        return [self._rows[r].id for r in self._live_rows()]

    def get(self, doc_id: str) -> dict[str, Any] | None:
        row = self._latest.get(str(doc_id))
        record = self._rows[row] if row is not None else None
        if record is None:
            return None
        return {"id": record.id, "text": record.text, "fields": record.fields}

    def vector(self, doc_id: str) -> np.ndarray:
        row = self._latest.get(str(doc_id))
        if row is None or self._rows[row] is None:
            raise KeyError(doc_id)
        return np.array(self._vectors[row])

    # -- search ----------------------------------------------------------------------------

    def search(
        self, query: Query, term_vectors: np.ndarray, options: SearchOptions
    ) -> SearchResult:
        """Run a logical query whose terms (query.terms order) are embedded as term_vectors.

        Hits from_ .. from_ + k of the ranking (the top from_ + k are computed, then the first
        from_ dropped), with options.source_fields of each document's fields and, with
        options.highlight, the sentences that hold a positive term's word."""
        term_vectors = self._check_query_vectors(term_vectors, len(query.terms))
        if options.exclude_lexical:
            raise ConfigurationError(
                "`exclude_lexical` needs a text index: search an OpenSearch or Elasticsearch index"
            )
        rows, notes = self._filtered_rows(options.filter)
        if rows.size == 0:
            return SearchResult(query, [], tuple(notes), exact=True)
        window = replace(options, k=options.from_ + options.k) if options.from_ else options
        if options.mode == "exact" or not query.has_positive_term:
            ranked = self.scored_rows(query, term_vectors, rows, window, exact=True)
        else:
            ranked = knn_rounds(self, query, term_vectors, rows, window)
        words = query_words(query.positive_terms) if options.highlight else frozenset()
        return SearchResult(
            query,
            [shaped_hit(h, options, words) for h in ranked.hits[options.from_ :]],
            (*notes, *ranked.warnings),
            exact=ranked.exact,
        )

    def scored_rows(
        self,
        query: Query,
        term_vectors: np.ndarray,
        rows: np.ndarray,
        options: SearchOptions,
        exact: bool | None,
        lexical_truths: np.ndarray | None = None,
    ) -> Ranking:
        """The top k of these rows; `lexical_truths`: their lexical truths when already computed."""
        # One matrix product scores every term against every candidate.
        cosines = cosine_matrix(self.row_vectors(rows), term_vectors)
        if lexical_truths is None and options.truth.uses_lexical:
            lexical_truths = self.lexical_truths(rows, query.terms)
        scored = compose(query, cosines, options.ops, options.truth, options.hard, lexical_truths)
        scores, truths = scored.scores, scored.truths
        if not scored.kept.all():
            # The hard filter dropped rows; without it, no copy of an exact pass's matrices.
            kept = scored.kept
            rows, scores, truths, cosines = rows[kept], scores[kept], truths[kept], cosines[kept]
            lexical_truths = lexical_truths[kept] if lexical_truths is not None else None
        explained = (
            explainer(query, cosines, options.ops, options.truth, lexical_truths)
            if options.explain
            else None
        )
        return Ranking(
            self._hits(rows, scores, truths, query.terms, options.k, explained), exact=exact
        )

    def search_vector(
        self,
        vector: np.ndarray,
        k: int,
        filter: dict[str, Any] | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        """Plain dense retrieval: rank by cosine to one vector. With the ANN graph in use,
        `candidates` (default k) is how many graph neighbours are ranked; otherwise every row
        is."""
        vector = self._check_query_vectors(np.atleast_2d(vector), 1)[0]
        if filter is None and self.uses_ann():
            rows = self._ann_rows(vector[np.newaxis], [max(k, candidates or k)])
        else:
            rows, _ = self._filtered_rows(filter)
        if rows.size == 0:
            return []
        scores = cosine_matrix(self.row_vectors(rows), vector[np.newaxis])[:, 0]
        return self._hits(rows, scores, np.zeros((len(rows), 0)), (), k)

    def row_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of these rows; without a copy when they are all rows in order."""
        if len(rows) == len(self._rows) and (len(rows) == 0 or rows[-1] == len(rows) - 1):
            return self._vectors
        return cast(np.ndarray, self._vectors[rows])

    def _hits(
        self,
        rows: np.ndarray,
        scores: np.ndarray,
        truths: np.ndarray,
        terms: Sequence[str],
        k: int,
        explained: Callable[[int], dict[str, Any]] | None = None,
    ) -> list[Hit]:
        scores = np.asarray(scores)
        order = top_k(scores, rows, self._id_ranks(), k)
        hits = []
        for i in order:
            row = self._rows[rows[i]]
            assert row is not None
            hits.append(
                Hit(
                    id=row.id,
                    score=float(scores[i]),
                    truths={t: float(truths[i, j]) for j, t in enumerate(terms)},
                    text=row.text,
                    fields=row.fields,
                    explanation=explained(i) if explained else None,
                )
            )
        return hits

    def _check_query_vectors(self, vectors: np.ndarray, expected: int) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape != (expected, self.dims):
            raise IndexStateError(
                f"query vectors have shape {vectors.shape}, index at {self.path} wants "
                f"({expected}, {self.dims}): was it built with another model than {self.model!r}?"
            )
        return normalise(vectors)

    def _filtered_rows(self, filter: dict[str, Any] | None) -> tuple[np.ndarray, list[str]]:
        """The live rows the filter keeps, and a warning per filter field no document has."""
        rows = self._live_rows()
        if not filter:
            return rows, []
        kept, notes = filter_rows(filter, rows, self._rows, self._known_fields, str(self.path))
        return np.array(kept, dtype=np.int64), notes

    def _known_fields(self) -> set[str]:
        """Every field name some live document has (cached until the next commit)."""
        if self._fields_cache is None:
            known: set[str] = set()
            for r in self._live_rows():
                known.update(self._rows[r].fields)
            self._fields_cache = known
        return self._fields_cache
