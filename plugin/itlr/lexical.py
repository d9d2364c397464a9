"""Lexical evidence per term: one tokeniser, corpus statistics and BM25 scaled to [0, 1].

Hybrid truth values (TruthMap kind "hybrid") mix each term's cosine with how strongly a passage
*mentions* the term. Every engine must compute the very same number, so nothing here depends on
an engine's analyzer:

- Tokens come from `tokenize` only (NFKC, casefold, unicode words, a short English stop list),
  at ingest for passages and at search time for terms.
- A cluster stores them beside the vector as keyword values "<token> <count>" (TOKENS_FIELD,
  indexed: the mention clauses and document frequencies query it), the same as longs
  `token_key(token) | count` (TOKEN_KEYS_FIELD, doc values only: what the stored script reads)
  and the token count (LENGTH_FIELD): `lexical_fields(text)`. Keyword doc values are a set,
  hence the count inside the value; the script reads longs because a keyword value costs a
  term-dictionary lookup each (docs/benchmarks.md, "Latency").
- Statistics (documents, total length, document frequency of each query token) are counted over
  the live documents of the whole index: on a cluster by one aggregation request (global over
  shards, unlike Lucene's per-shard term statistics), in the embedded engine from its rows.
- A term's lexical truth is BM25 divided by its upper bound (tf -> infinity), which needs no
  look at other documents: sum over the term's tokens q of w_q * tf_q / (tf_q + k1 * norm),
  w_q = idf_q / sum idf, norm = 1 - b + b * length / average length.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TypeVar

import numpy as np

# One passage's token count, or an array of them (length_norm takes either).
LengthT = TypeVar("LengthT", float, np.ndarray)

TOKENS_FIELD = "itlr_tokens"
TOKEN_KEYS_FIELD = "itlr_token_keys"
LENGTH_FIELD = "itlr_length"
# What itlr writes beside a text (never a user's field).
LEXICAL_FIELDS = (TOKENS_FIELD, TOKEN_KEYS_FIELD, LENGTH_FIELD)
# A token key keeps the low COUNT_BITS of its long for the count (capped there: at 65,535
# occurrences tf / (tf + k1 * norm) is within 1e-4 of its limit) and 47 digest bits above them,
# so every key is a positive long. Two tokens share a key with odds 2^-47 a pair.
COUNT_BITS = 16
MAX_KEYED_COUNT = (1 << COUNT_BITS) - 1
_DIGEST_BITS = 47
K1 = 1.2
B = 0.75
# Longer "words" are base64, URLs or DNA: never worth a keyword value of their own.
MAX_TOKEN_CHARS = 64
# Query terms whose tokens are remembered (term_words), and sets of them (query_tokens).
QUERY_TERMS_REMEMBERED = 4096
# Tokens whose postings a LexicalCorpus (or the embedded engine's stored postings) keeps.
POSTINGS_KEPT = 4096
# LexicalCorpus.extend by more rows than this drops the kept postings rather than extend them.
EXTEND_POSTINGS_ROWS = 1024
_WORD = re.compile(r"\w+")
# Function words only: a NOT term such as "the Beatles" should weigh "beatles", and a term
# made of stop words alone falls back to its cosine (weight 0, see term_tokens).
_STOPWORDS = """a an and are as at be but by for from has have he her his i in into is it its of
on or she that the their them they this to was were which who will with without you your"""
STOPWORDS = frozenset(_STOPWORDS.split())


def tokenize(text: str) -> list[str]:
    """The one tokeniser of itlr's lexical evidence (passages and terms alike)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return [w for w in words if w not in STOPWORDS and len(w) <= MAX_TOKEN_CHARS]


@lru_cache(maxsize=QUERY_TERMS_REMEMBERED)
def term_words(term: str) -> tuple[str, ...]:
    """A query term's tokens (`tokenize`), remembered: every search reads them several times."""
    return tuple(tokenize(term))


@lru_cache(maxsize=1 << 14)
def token_key(token: str) -> int:
    """The token's key: a digest, stable across processes and versions (stored documents
    depend on it), shifted past the count bits."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> (64 - _DIGEST_BITS)) << COUNT_BITS


def lexical_fields(text: str) -> dict[str, object]:
    """What a cluster document stores for its text: "<token> <count>" values, the same as
    keyed longs, and the length."""
    tokens = tokenize(text)
    counts = sorted(Counter(tokens).items())
    return {
        TOKENS_FIELD: [f"{token} {count}" for token, count in counts],
        TOKEN_KEYS_FIELD: sorted(
            token_key(token) | min(count, MAX_KEYED_COUNT) for token, count in counts
        ),
        LENGTH_FIELD: len(tokens),
    }


@dataclass(frozen=True)
class CorpusStats:
    """Live documents, their summed token count and the document frequency of some tokens.
    `unkeyed`: documents of a cluster index whose token counts are stored only as keyword
    values (written before the token keys), which the scripts read slowly."""

    documents: int
    total_length: int
    df: Mapping[str, int]
    unkeyed: int = 0

    @property
    def average_length(self) -> float:
        return self.total_length / self.documents if self.documents else 1.0

    def idf(self, token: str) -> float:
        """Lucene's BM25 idf: always > 0, so a token no document has still counts."""
        df = self.df.get(token, 0)
        return math.log(1.0 + (self.documents - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class TermTokens:
    """A term's distinct tokens and their shares of its idf (summing to 1, or empty)."""

    tokens: tuple[str, ...]
    weights: tuple[float, ...]


def query_tokens(terms: Iterable[str]) -> list[str]:
    """Every distinct token of these terms: what the statistics request counts."""
    return list(_distinct_tokens(tuple(terms)))


@lru_cache(maxsize=QUERY_TERMS_REMEMBERED)
def _distinct_tokens(terms: tuple[str, ...]) -> tuple[str, ...]:
    # A search asks three times (remembered statistics, their age, the certificate's check).
    return tuple(dict.fromkeys(t for term in terms for t in term_words(term)))


def mentions_at_most(terms: Iterable[str], stats: CorpusStats) -> int:
    """How many documents mention one of these terms, at most: the sum of their tokens'
    document frequencies (a document holding two of them counts twice)."""
    return sum(stats.df.get(token, 0) for token in query_tokens(terms))


def term_tokens(term: str, stats: CorpusStats) -> TermTokens:
    tokens = tuple(dict.fromkeys(term_words(term)))
    idfs = [stats.idf(t) for t in tokens]
    total = sum(idfs)
    if not tokens or total <= 0:
        return TermTokens((), ())
    return TermTokens(tokens, tuple(i / total for i in idfs))


def length_norm(length: LengthT, average_length: float) -> LengthT:
    """BM25's length normalisation of one passage's token count, or of an array of them."""
    return K1 * (1.0 - B + B * length / max(average_length, 1e-9))


def bm25_truth(counts: Mapping[str, int], length: int, term: TermTokens, avgdl: float) -> float:
    """BM25 of one term in one passage divided by the term's upper bound: in [0, 1)."""
    norm = length_norm(length, avgdl)
    value = 0.0
    for token, weight in zip(term.tokens, term.weights, strict=True):
        tf = counts.get(token, 0)
        if tf:
            value += weight * tf / (tf + norm)
    return value


class PostingsMatrix:
    """Lexical truth matrices from postings (the rows holding a token, ascending, and its count
    in each) and every row's token count: what LexicalCorpus counts from texts and the embedded
    engine reads from its store (itlr.engines.embedded_lexical), scored by the same code."""

    lengths: np.ndarray

    def __len__(self) -> int:
        raise NotImplementedError

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def matrix(
        self, rows: Sequence[int] | np.ndarray, terms: Sequence[str], stats: CorpusStats
    ) -> np.ndarray:
        """(rows x terms) lexical truths: bm25_truth for every pair, vectorised.

        Only the rows in a token's postings get a truth above 0, so for ascending rows (every
        engine's row sets) the work goes by the postings, not by the rows: a pass over every
        row costs what its mentions cost."""
        rows = np.asarray(rows, dtype=np.int64)
        if np.any(rows[1:] <= rows[:-1]):
            return self._matrix_by_rows(rows, terms, stats)
        out = np.zeros((len(rows), len(terms)), dtype=np.float64)
        if not len(rows):
            return out
        # Strictly ascending, ending at len - 1 and as many as the texts: every row, row r at
        # position r (postings may hold any of the texts' rows).
        every = len(rows) == len(self) and rows[-1] == len(rows) - 1
        for j, term in enumerate(terms):
            tokens = term_tokens(term, stats)
            for token, weight in zip(tokens.tokens, tokens.weights, strict=True):
                held, counts = self.postings(token)
                if not len(held):
                    continue
                if every:
                    at, tf, lengths = held, counts, self.lengths[held]
                else:
                    found = np.minimum(np.searchsorted(rows, held), len(rows) - 1)
                    hit = rows[found] == held
                    at, tf, lengths = found[hit], counts[hit], self.lengths[held[hit]]
                norm = length_norm(lengths, stats.average_length)
                out[at, j] += weight * tf / (tf + norm)
        return out

    def _matrix_by_rows(
        self, rows: np.ndarray, terms: Sequence[str], stats: CorpusStats
    ) -> np.ndarray:
        """`matrix` for rows in any order, repeats allowed: each row looked up in the postings."""
        out = np.zeros((len(rows), len(terms)), dtype=np.float64)
        norm = length_norm(self.lengths[rows], stats.average_length)
        for j, term in enumerate(terms):
            tokens = term_tokens(term, stats)
            for token, weight in zip(tokens.tokens, tokens.weights, strict=True):
                held, counts = self.postings(token)
                tf = np.zeros(len(rows), dtype=np.float64)
                if len(held):
                    at = np.minimum(np.searchsorted(held, rows), len(held) - 1)
                    hit = held[at] == rows
                    tf[hit] = counts[at[hit]]
                out[:, j] += weight * tf / (tf + norm)
        return out


class LexicalCorpus(PostingsMatrix):
    """Token counts of a fixed list of texts, their statistics and lexical truth matrices.

    The evaluation methods and the ablation build one over a whole dataset; the embedded
    engine reads postings its store wrote instead, and builds one from its rows' texts only
    while another process's compaction has renumbered the stored rows
    (itlr.engines.embedded_lexical)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.counts = [Counter(tokenize(t)) for t in texts]
        self.lengths = np.array([sum(c.values()) for c in self.counts], dtype=np.float64)
        self._postings: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.counts)

    def extend(self, texts: Sequence[str]) -> None:
        """Rows appended after these: their counts, and the kept postings brought up to date
        (a few rows are scanned for each kept token; many new rows drop the kept postings)."""
        start = len(self.counts)
        added = [Counter(tokenize(t)) for t in texts]
        self.counts.extend(added)
        self.lengths = np.concatenate(
            [self.lengths, np.array([sum(c.values()) for c in added], dtype=np.float64)]
        )
        with self._lock:
            if len(added) > EXTEND_POSTINGS_ROWS:
                self._postings.clear()
                return
            for token, (rows, counts) in self._postings.items():
                more = [(start + i, c[token]) for i, c in enumerate(added) if token in c]
                if more:
                    new_rows, new_counts = zip(*more, strict=True)
                    self._postings[token] = (
                        np.concatenate([rows, np.array(new_rows, dtype=np.int64)]),
                        np.concatenate([counts, np.array(new_counts, dtype=np.float64)]),
                    )

    @cached_property
    def full_stats(self) -> CorpusStats:
        return self.stats()

    def stats(self, rows: Sequence[int] | np.ndarray | None = None) -> CorpusStats:
        """Statistics over these rows (default: all), counting every token."""
        chosen = range(len(self.counts)) if rows is None else rows
        df: Counter[str] = Counter()
        total = 0
        for row in chosen:
            df.update(self.counts[row].keys())
            total += int(self.lengths[row])
        return CorpusStats(len(chosen), total, df)

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding the token (ascending) and its count in each. One scan of the rows'
        counts the first time (10 ms at 100k rows), kept for the POSTINGS_KEPT tokens asked
        for last: a full inverted index would cost seconds to build and memory for every
        word, where a search asks for a handful."""
        with self._lock:
            found = self._postings.get(token)
            if found is not None:
                self._postings.move_to_end(token)
                return found
        counts = np.fromiter(
            (c.get(token, 0) for c in self.counts), dtype=np.float64, count=len(self.counts)
        )
        rows = np.flatnonzero(counts)
        found = (rows, counts[rows])
        with self._lock:
            self._postings[token] = found
            while len(self._postings) > POSTINGS_KEPT:
                self._postings.popitem(last=False)
        return found


__all__ = [
    "K1",
    "LENGTH_FIELD",
    "LEXICAL_FIELDS",
    "MAX_KEYED_COUNT",
    "TOKENS_FIELD",
    "TOKEN_KEYS_FIELD",
    "B",
    "CorpusStats",
    "LexicalCorpus",
    "PostingsMatrix",
    "TermTokens",
    "bm25_truth",
    "lexical_fields",
    "mentions_at_most",
    "query_tokens",
    "term_tokens",
    "term_words",
    "token_key",
    "tokenize",
]
