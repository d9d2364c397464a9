"""Crash-consistent storage for the embedded engine: one commit point per batch, one writer.

Layout of an index directory:
    index.db      SQLite in WAL mode: `meta` (format, model, dims, similarity, `committed` row
                  count, vector file generation), `rows` (row number, id, text, fields as
                  JSON, deleted flag, token count) and `postings` (per token and batch, the
                  batch's rows holding the token and its count in each: hybrid truths'
                  lexical side, itlr.engines.embedded_lexical)
    vectors.f32   float32 unit vectors, row i at byte offset i * dims * 4, memory-mapped for
                  scans; after a compaction `vectors.<generation>.f32`
    write.lock    the writer lock (`filelock`: an OS advisory lock, released by the kernel when
                  its process dies, even by SIGKILL)

Why a kill at any instant leaves a consistent index. The commit point of a batch is one SQLite
transaction that inserts the batch's rows and raises `committed` to the new row count. Before it
starts, the batch's vectors are written at rows [committed, committed + n) of the vector file
and fsync'ed. So:
  - killed before that transaction commits, SQLite holds neither the rows nor the new count:
    the index is exactly the previous batches. Vector bytes past `committed` belong to no row;
    readers never map them and the next writer cuts them off before it appends;
  - killed after it, the rows and the count are durable (WAL, synchronous=FULL) and every row
    points at vector bytes that reached the disk before the rows existed.
Row i's vector is always at row i of the file, so no document can carry another's vector.
A row's token count and postings are written in the transaction that inserts it (compaction
writes them anew in the one that swaps the rows), so they always describe exactly the committed
rows; statistics over the live rows are counted from them at search time, never stored, so no
crash can leave statistics that disagree with the rows.
Readers take `committed` and the rows in one read transaction (a WAL snapshot) and map exactly
`committed` vectors, so they never see half a batch. Compaction writes a whole new vector file
under the next generation, fsyncs it, and swaps rows and generation in one transaction; an
orphaned file of another generation (a kill in between) is deleted by the next writer.

Why SQLite plus a flat file, not vectors in SQLite or an embedded vector database: exact search
must stay one memory-speed pass over a contiguous float32 matrix (np.memmap), and the standard
library's SQLite already gives the atomic, durable commit point and the document store.

One writer at a time: every write holds `write.lock`; a second writer waits up to its timeout
and then gets an IndexStateError naming the lock. A writer first catches up with what other
processes committed, so two writers in turn never lose or duplicate each other's rows.

Indexes written by itlr before this format are migrated in place on first open: format 1
(manifest.json + docs.jsonl + vectors.f32), only once itlr.engines.legacy has proved the folder
holds nothing else and every line is one of its rows (a user's folder with a `manifest.json` is
never touched), keeps the rows that have both a document line and a vector, a torn last line
dropped; format 2 (no token counts or postings) gets them in one
transaction, every row tokenised once (docs/cli.md says how long that takes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from itlr.engines import legacy
from itlr.engines.writer_lock import LOCK, LOCK_WAIT_SECONDS, held, writer_lock
from itlr.errors import IndexStateError
from itlr.lexical import tokenize
from itlr.prompts import Prompts

FORMAT_VERSION = 3
# Format 2 lacks the token counts and postings; opening it adds them (_add_postings).
POSTINGS_FORMAT = 3
DATABASE = "index.db"
# Rows tokenised at a time when a format 2 index gets its postings.
_UPGRADE_ROWS = 4096

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows (
    row INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    text TEXT NOT NULL,
    fields TEXT NOT NULL,
    deleted INTEGER NOT NULL,
    length INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS postings (
    token TEXT NOT NULL,
    start INTEGER NOT NULL,
    rows BLOB NOT NULL,
    counts BLOB NOT NULL,
    PRIMARY KEY (token, start)
) WITHOUT ROWID;
"""
# A posting's row as an offset from its batch's first row, and its count: little-endian uint32.
_POSTING = np.dtype("<u4")
assert array("I").itemsize == _POSTING.itemsize


@dataclass(frozen=True)
class StoredRow:
    """One committed row: a document, or the tombstone of a deleted id."""

    id: str
    text: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False

    def to_dict(self) -> dict[str, Any]:
        if self.deleted:
            return {"id": self.id, "deleted": True}
        return {"id": self.id, "text": self.text, "fields": self.fields}


def _posting_bytes(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def vector_file(generation: int) -> str:
    return "vectors.f32" if generation == 0 else f"vectors.{generation}.f32"


VECTOR_FILE = re.compile(r"vectors(\.\d+)?\.f32")
_OWN_TABLES = frozenset({"meta", "rows", "postings"})
_REQUIRED_TABLES = frozenset({"meta", "rows"})  # format 2 has no postings


def exists(path: Path) -> bool:
    """Whether an index (this format or, proved by its files, the legacy one) lives at path."""
    if _has_meta(path / DATABASE):
        return True
    return legacy.present(path) and legacy.refusal(path, leftover_of_creation) is None


def _peek(database: Path, sql: str) -> list[tuple[Any, ...]] | None:
    """Rows of a query on a database file that may not be itlr's, or None when it is not
    SQLite at all. No pragma, no schema, only a SELECT: looking never changes someone else's
    file (a read-only open would leave -wal/-shm files beside a WAL database)."""
    if not database.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
            return db.execute(sql).fetchall()
    except sqlite3.DatabaseError:
        return None


def _has_meta(database: Path) -> bool:
    tables = _peek(database, "SELECT name FROM sqlite_master WHERE type = 'table'")
    if not tables or not {name for (name,) in tables} >= _REQUIRED_TABLES:
        return False  # not SQLite, or created but killed before its first commit
    return bool(_peek(database, "SELECT 1 FROM meta WHERE key = 'format'"))


def leftover_of_creation(file: Path) -> bool:
    """Whether `file` is what a cut-short `VectorStore.create` left: its own empty files, or a
    database holding nothing but its own empty tables. Anything else is someone's data."""
    if file.is_symlink() or not file.is_file():
        return False
    if file.name == DATABASE:
        return _empty_database(file)
    if file.name.startswith(DATABASE + "-"):  # -wal, -shm, -journal beside it
        database = file.with_name(DATABASE)
        return _empty_database(database) if database.exists() else file.stat().st_size == 0
    if file.name == LOCK or VECTOR_FILE.fullmatch(file.name):
        return file.stat().st_size == 0
    return False


def _empty_database(database: Path) -> bool:
    if database.stat().st_size == 0:
        return True
    tables = _peek(database, "SELECT name FROM sqlite_master WHERE type = 'table'")
    if tables is None or not {name for (name,) in tables} <= _OWN_TABLES:
        return False
    return all(_peek(database, f"SELECT 1 FROM {name} LIMIT 1") == [] for (name,) in tables)


def _connect(database: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit BEGIN ... COMMIT. Ingestion writes from a worker
    # thread; self._db_guard serialises all use of the connection.
    db = sqlite3.connect(database, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


class VectorStore:
    """The committed rows of an index and their vectors, in a directory."""

    def __init__(
        self, path: Path, lock_timeout: float = LOCK_WAIT_SECONDS, lock: FileLock | None = None
    ) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._lock = lock or writer_lock(self.path)
        self._db = _connect(self.path / DATABASE)
        self._db.executescript(_SCHEMA)
        self._db_guard = threading.RLock()
        self.model = ""
        self.dims = 0
        self.prompts = Prompts()
        self.generation = 0
        self.committed = 0

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: Path,
        model: str,
        dims: int,
        lock_timeout: float = LOCK_WAIT_SECONDS,
        exist_ok: bool = False,
        prompts: Prompts | None = None,
    ) -> VectorStore:
        """A new, empty index; with exist_ok, the one another process just created wins.

        The writer lock is held from before the database file exists, so another process
        never sees a creation half done (itlr.engines.writer_lock.wait_for_creation) nor races it to set up the
        database."""
        path.mkdir(parents=True, exist_ok=True)
        lock = writer_lock(path)
        with held(lock, path, lock_timeout):
            store = cls(path, lock_timeout, lock)
            store._create(model, dims, exist_ok, prompts)
        return store

    def _create(self, model: str, dims: int, exist_ok: bool, prompts: Prompts | None) -> None:
        """Write the meta of a new index, under the writer lock `create` holds."""
        if self._read_meta() is not None:
            if exist_ok:
                self._add_postings()
                self._load_meta()
                return
            raise IndexStateError(f"an index already exists at {self.path}: open it instead")
        vectors = self.path / vector_file(0)
        if vectors.exists() and vectors.stat().st_size:
            raise IndexStateError(
                f"{vectors} holds data that is not this index's: give an empty folder"
            )
        vectors.touch()
        self._fsync_directory()
        with self._transaction():
            self._write_meta(
                model=model,
                dims=dims,
                committed=0,
                generation=0,
                **(prompts or Prompts()).to_meta(),
            )
        self._load_meta()

    @classmethod
    def open(cls, path: Path, lock_timeout: float = LOCK_WAIT_SECONDS) -> VectorStore:
        if not _has_meta(path / DATABASE):
            if legacy.present(path):
                # Proved whole before the first byte is written (the database, the lock).
                legacy.read(path, str(path), leftover_of_creation)
            else:
                raise IndexStateError(
                    f"no itlr index at {path}: create one by adding documents (`itlr ingest FILE` or `Index.add`)"
                )
        store = cls(path, lock_timeout)
        if store._read_meta() is None:
            store._migrate_legacy()
        store._add_postings()
        store._load_meta()
        return store

    def close(self) -> None:
        with self._db_guard:
            self._db.close()

    # -- reads -----------------------------------------------------------------------------

    def read_rows(self, start: int) -> tuple[list[StoredRow], np.ndarray, np.ndarray]:
        """Committed rows from `start` on, their token counts, and the vectors of all committed
        rows (memory-mapped).

        One read transaction: the rows and the count come from the same snapshot.
        """
        with self._db_guard:
            self._db.execute("BEGIN")
            try:
                self._load_meta()
                found = self._db.execute(
                    "SELECT id, text, fields, deleted, length FROM rows "
                    "WHERE row >= ? AND row < ? ORDER BY row",
                    (start, self.committed),
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        rows = [
            StoredRow(doc_id, text, json.loads(fields), bool(deleted))
            for doc_id, text, fields, deleted, _ in found
        ]
        lengths = np.array([length for *_, length in found], dtype=np.float64)
        return rows, lengths, self.vectors()

    def postings(
        self, token: str, start: int, stop: int, generation: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows in [start, stop) that hold the token (ascending) and its count in each, or
        None when the rows were renumbered since `generation` (another process compacted).
        Batches are committed whole, so a batch starting below `stop` ends at or below it."""
        found = self._read_at(
            generation,
            "SELECT start, rows, counts FROM postings "
            "WHERE token = ? AND start >= ? AND start < ? ORDER BY start",
            (token, start, stop),
        )
        if found is None:
            return None
        rows = [first + np.frombuffer(held, _POSTING).astype(np.int64) for first, held, _ in found]
        counts = [np.frombuffer(c, _POSTING).astype(np.float64) for *_, c in found]
        return (
            np.concatenate([np.zeros(0, dtype=np.int64), *rows]),
            np.concatenate([np.zeros(0, dtype=np.float64), *counts]),
        )

    def tokens(self, stop: int, generation: int) -> list[str] | None:
        """Every token some row below `stop` holds (None as `postings` says): a full pass over
        the postings, for statistics over every token."""
        found = self._read_at(
            generation, "SELECT DISTINCT token FROM postings WHERE start < ?", (stop,)
        )
        return None if found is None else [token for (token,) in found]

    def _read_at(
        self, generation: int, sql: str, params: tuple[Any, ...]
    ) -> list[tuple[Any, ...]] | None:
        """The query's rows read in one transaction with the store's generation, or None when
        the rows were renumbered since `generation` (another process compacted)."""
        with self._db_guard:
            self._db.execute("BEGIN")
            try:
                meta = self._read_meta() or {}
                if int(meta.get("generation", -1)) != generation:
                    return None
                return list(self._db.execute(sql, params).fetchall())
            finally:
                self._db.execute("COMMIT")

    def vectors(self) -> np.ndarray:
        """The committed rows' vectors: exactly `committed` rows, never bytes past them."""
        if self.committed == 0:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.memmap(
            self.path / vector_file(self.generation),
            dtype=np.float32,
            mode="r",
            shape=(self.committed, self.dims),
        )

    def commit_point(self) -> tuple[int, int]:
        """(vector file generation, committed rows) as the database says now: one small read
        that another process's commit or compaction moves."""
        meta = self._read_meta() or {}
        return int(meta.get("generation", -1)), int(meta.get("committed", -1))

    def changed_generation(self) -> bool:
        """Whether another writer compacted the index since this store last read it."""
        before = self.generation
        with self._db_guard:
            self._load_meta()
        return self.generation != before

    # -- writes ----------------------------------------------------------------------------

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Hold the writer lock (re-entrant within this store, across threads)."""
        return held(self._lock, self.path, self.lock_timeout)

    def append(self, rows: Sequence[StoredRow], vectors: np.ndarray) -> np.ndarray:
        """Commit rows with their vectors as one batch (see the module docstring); returns
        their token counts."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.writing(), self._db_guard:
            self._load_meta()
            start = self.committed
            self._write_vectors(vector_file(self.generation), start, vectors, truncate=True)
            with self._transaction():
                lengths = self._insert(start, rows)
                self._write_meta(committed=start + len(rows))
            self._load_meta()
        return lengths

    def rewrite(self, rows: Sequence[StoredRow], vectors: np.ndarray) -> None:
        """Replace every row (compaction): a new vector file, swapped in by one transaction."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self.writing(), self._db_guard:
            self._load_meta()
            old, new = self.generation, self.generation + 1
            self._write_vectors(vector_file(new), 0, vectors, truncate=True)
            self._fsync_directory()
            with self._transaction():
                self._db.execute("DELETE FROM rows")
                self._db.execute("DELETE FROM postings")
                self._insert(0, rows)
                self._write_meta(committed=len(rows), generation=new)
            self._load_meta()
            # Readers that mapped the old file keep their mapping; POSIX frees it when they close.
            (self.path / vector_file(old)).unlink(missing_ok=True)

    def remove_orphans(self) -> None:
        """Delete vector files of other generations (left by a kill during compaction)."""
        with self.writing():
            current = vector_file(self.generation)
            for candidate in self.path.glob("vectors*.f32"):
                if VECTOR_FILE.fullmatch(candidate.name) and candidate.name != current:
                    candidate.unlink(missing_ok=True)

    # -- internals -------------------------------------------------------------------------

    def _write_vectors(self, name: str, start: int, vectors: np.ndarray, truncate: bool) -> None:
        row_bytes = 4 * self.dims
        (self.path / name).touch(exist_ok=True)
        with open(self.path / name, "r+b") as handle:
            if truncate:
                # Bytes past the commit point are a killed writer's batch: not part of any row.
                handle.truncate(start * row_bytes)
            handle.seek(start * row_bytes)
            handle.write(vectors.tobytes())
            handle.flush()
            os.fsync(handle.fileno())

    def _insert(self, start: int, rows: Sequence[StoredRow]) -> np.ndarray:
        """The rows, their token counts and their postings (a tombstone holds no token)."""
        counts = [Counter(tokenize(r.text)) if not r.deleted else Counter() for r in rows]
        self._db.executemany(
            "INSERT INTO rows (row, id, text, fields, deleted, length) VALUES (?, ?, ?, ?, ?, ?)",
            (
                (
                    start + i,
                    r.id,
                    r.text,
                    json.dumps(r.fields, ensure_ascii=False),
                    int(r.deleted),
                    sum(c.values()),
                )
                for i, (r, c) in enumerate(zip(rows, counts, strict=True))
            ),
        )
        self._insert_postings(start, counts)
        return np.array([sum(c.values()) for c in counts], dtype=np.float64)

    def _insert_postings(self, start: int, counts: Sequence[Counter[str]]) -> None:
        """One postings entry per token of these rows (the rows from `start` on)."""
        held: dict[str, tuple[array[int], array[int]]] = {}
        for offset, row in enumerate(counts):
            for token, count in row.items():
                found = held.get(token)
                if found is None:
                    found = held[token] = (array("I"), array("I"))
                found[0].append(offset)
                found[1].append(count)
        # In key order: the B-tree takes them as an append where it can.
        self._db.executemany(
            "INSERT INTO postings (token, start, rows, counts) VALUES (?, ?, ?, ?)",
            (
                (token, start, _posting_bytes(offsets), _posting_bytes(found))
                for token, (offsets, found) in sorted(held.items())
            ),
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._db_guard:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read_meta(self) -> dict[str, str] | None:
        with self._db_guard:
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        return meta or None

    def _add_postings(self) -> None:
        """Format 2 -> 3: every row's token count and postings, in one transaction (a kill
        leaves format 2, and the next open starts again)."""
        meta = self._read_meta()
        if meta is None or int(meta["format"]) != POSTINGS_FORMAT - 1:
            return
        with self.writing(), self._db_guard:
            meta = self._read_meta()
            if meta is None or int(meta["format"]) != POSTINGS_FORMAT - 1:
                return  # another process upgraded it meanwhile
            with self._transaction():
                columns = {c[1] for c in self._db.execute("PRAGMA table_info(rows)")}
                if "length" not in columns:
                    self._db.execute(
                        "ALTER TABLE rows ADD COLUMN length INTEGER NOT NULL DEFAULT 0"
                    )
                self._db.execute("DELETE FROM postings")
                committed = int(meta["committed"])
                for start in range(0, committed, _UPGRADE_ROWS):
                    found = self._db.execute(
                        "SELECT text, deleted FROM rows WHERE row >= ? AND row < ? ORDER BY row",
                        (start, min(committed, start + _UPGRADE_ROWS)),
                    ).fetchall()
                    counts = [Counter(tokenize(t)) if not d else Counter() for t, d in found]
                    self._db.executemany(
                        "UPDATE rows SET length = ? WHERE row = ?",
                        ((sum(c.values()), start + i) for i, c in enumerate(counts)),
                    )
                    self._insert_postings(start, counts)
                self._db.execute(
                    "UPDATE meta SET value = ? WHERE key = 'format'", (str(POSTINGS_FORMAT),)
                )

    def _load_meta(self) -> None:
        meta = self._read_meta()
        if meta is None:
            raise IndexStateError(f"index at {self.path} has no metadata: re-ingest it")
        if int(meta["format"]) != FORMAT_VERSION:
            raise IndexStateError(
                f"index at {self.path} has format {meta['format']}, this itlr reads "
                f"{FORMAT_VERSION}: upgrade itlr or re-ingest into a new index"
            )
        self.model = meta["model"]
        self.dims = int(meta["dims"])
        self.prompts = Prompts.from_meta(meta)
        self.committed = int(meta["committed"])
        self.generation = int(meta["generation"])

    def _write_meta(self, **values: Any) -> None:
        values = {"format": FORMAT_VERSION, "similarity": "cosine", **values}
        self._db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(k, str(v)) for k, v in values.items()],
        )

    def _fsync_directory(self) -> None:
        descriptor = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _migrate_legacy(self) -> None:
        """Format 1 -> this format, in one transaction; the old files go after it commits."""
        with self.writing(), self._db_guard:
            if self._read_meta() is not None:  # another process migrated it meanwhile
                return
            old = legacy.read(self.path, str(self.path), leftover_of_creation)
            rows = [StoredRow(r.id, r.text, r.fields, r.deleted) for r in old.rows]
            with self._transaction():
                self._insert(0, rows)
                self._write_meta(model=old.model, dims=old.dims, committed=len(rows), generation=0)
            for name in (legacy.MANIFEST, legacy.MANIFEST + ".tmp", legacy.DOCS):
                (self.path / name).unlink(missing_ok=True)
