"""The embedded engine's lexical evidence: every row's token count and the postings of the
tokens a search asks for, read from the store, where each commit writes them with its rows
(itlr.engines.store), and statistics over the live rows counted from them. A process's first
hybrid search reads a few postings, as every later one does for tokens it has not asked for
before; nothing is tokenised at search time. It is handed the rows, never the index."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from itlr.engines.store import StoredRow, VectorStore
from itlr.lexical import POSTINGS_KEPT, CorpusStats, LexicalCorpus, PostingsMatrix, query_tokens

Rows = Sequence[StoredRow | None]


class StoredPostings(PostingsMatrix):
    """The postings of one store generation's rows below `len(self)`, read from the store and
    kept for the POSTINGS_KEPT tokens asked for last; each kept list is extended by the rows
    committed since when it is asked for again.

    When another process compacted the store meanwhile, the rows this object holds are no
    longer the stored ones until the index object catches up: their postings are then counted
    from the rows' texts (a tokenisation of every row, as before the store kept postings)."""

    def __init__(self, store: VectorStore, generation: int) -> None:
        self.store = store
        self.generation = generation
        self.rows: Rows = []
        self.lengths = np.zeros(0, dtype=np.float64)
        self._kept: OrderedDict[str, tuple[np.ndarray, np.ndarray, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._from_texts: LexicalCorpus | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def follow(self, rows: Rows, lengths: np.ndarray) -> None:
        """The rows (and their token counts) the index object holds now."""
        self.rows, self.lengths = rows, lengths

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        stop = len(self.rows)
        with self._lock:
            kept = self._kept.get(token)
            if kept is not None:
                self._kept.move_to_end(token)
                if kept[2] == stop:
                    return kept[0], kept[1]
        start = kept[2] if kept is not None else 0
        read = self.store.postings(token, start, stop, self.generation)
        if read is None:
            return self._counted_from_texts().postings(token)
        rows, counts = read
        if kept is not None:
            rows, counts = np.concatenate([kept[0], rows]), np.concatenate([kept[1], counts])
        with self._lock:
            self._kept[token] = (rows, counts, stop)
            while len(self._kept) > POSTINGS_KEPT:
                self._kept.popitem(last=False)
        return rows, counts

    def stats(self, live: np.ndarray, tokens: Iterable[str] | None) -> CorpusStats:
        """Statistics over the live rows; document frequencies of these tokens (None: of
        every token, a pass over all postings)."""
        if tokens is None:
            listed = self.store.tokens(len(self.rows), self.generation)
            tokens = listed if listed is not None else self._counted_from_texts().stats().df
        df: Counter[str] = Counter()
        for token in tokens:
            df[token] = int(np.count_nonzero(live[self.postings(token)[0]]))
        total = int(self.lengths[live].sum())
        return CorpusStats(int(np.count_nonzero(live)), total, +df)

    def _counted_from_texts(self) -> LexicalCorpus:
        corpus = self._from_texts
        if corpus is None or len(corpus) != len(self.rows):
            # Dead rows keep an empty text: they count in no statistic.
            texts = [row.text if row is not None else "" for row in self.rows]
            corpus = self._from_texts = LexicalCorpus(texts)
        return corpus


class LexicalState:
    """One index object's postings and statistics, kept per store generation (a compaction
    renumbers the rows)."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self._postings: StoredPostings | None = None

    def current(self, rows: Rows, lengths: np.ndarray, generation: int) -> StoredPostings:
        postings = self._postings
        if postings is None or postings.generation != generation:
            postings = self._postings = StoredPostings(self.store, generation)
        postings.follow(rows, lengths)
        return postings

    def stats(
        self,
        rows: Rows,
        lengths: np.ndarray,
        live: np.ndarray,
        generation: int,
        tokens: Iterable[str] | None = None,
    ) -> CorpusStats:
        return self.current(rows, lengths, generation).stats(live, tokens)

    def matrix(
        self,
        rows: Rows,
        lengths: np.ndarray,
        live: np.ndarray,
        generation: int,
        chosen: np.ndarray,
        terms: tuple[str, ...],
    ) -> np.ndarray:
        """(chosen rows x terms) lexical truths, statistics over every live row."""
        postings = self.current(rows, lengths, generation)
        return postings.matrix(chosen, terms, postings.stats(live, query_tokens(terms)))


class LexicalStream:
    """Per streamed term, the rows that mention it in order of lexical truth, best first: the
    lexical side of knn mode's candidates for hybrid truths (itlr.certificate). A round of
    budget n takes each streamed term's first n rows; every row it leaves has a lexical truth
    at most the n-th's. `truths` holds every one of `terms` (streamed or not) for every row, so
    that a pass over every row need not compute them again."""

    def __init__(
        self,
        truths: np.ndarray,
        rows: np.ndarray,
        terms: tuple[str, ...],
        streamed: tuple[str, ...] | None = None,
    ) -> None:
        self.rows = rows
        self.streamed = terms if streamed is None else streamed
        self.truths = truths  # (rows x terms) lexical truths
        self._columns = [terms.index(term) for term in self.streamed]
        self.order: list[np.ndarray] = []
        for j in self._columns:
            column = self.truths[:, j]
            mentioned = np.flatnonzero(column > 0)
            self.order.append(mentioned[np.argsort(-column[mentioned], kind="stable")])

    def top(self, budget: int) -> tuple[np.ndarray, dict[str, float]]:
        """The rows of each streamed term's first `budget`, and their `limits`."""
        taken = [self.rows[order[:budget]] for order in self.order]
        return np.concatenate([np.zeros(0, dtype=np.int64), *taken]), self.limits(budget)

    def limits(self, budget: int) -> dict[str, float]:
        """Per streamed term, the most the lexical truth of a row outside its first `budget`
        can be (0 once every row that mentions it is taken)."""
        return {
            term: float(self.truths[order[budget - 1], j]) if len(order) > budget else 0.0
            for term, order, j in zip(self.streamed, self.order, self._columns, strict=True)
        }
