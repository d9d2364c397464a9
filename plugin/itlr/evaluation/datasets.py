"""BEIR-format datasets: corpus.jsonl, queries.jsonl and qrels, plus explicit negative judgments.

Layout (https://github.com/beir-cellar/beir):
    corpus.jsonl     {"_id", "title", "text", ...}      (title is embedded with the text)
    queries.jsonl    {"_id", "text", "metadata"?}
    qrels/<split>.tsv  query-id <TAB> corpus-id <TAB> score, with a header line

A qrels file may also be given by path, in BEIR's three-column form or TREC's four-column form
(query-id iteration corpus-id score). A query may carry its logical form in a "logical" field,
top-level or inside "metadata", which evaluation then uses instead of parsing the text.

Explicit negatives (documents judged to violate the query, e.g. about an excluded topic) come
from a second qrels-format file: every row is a negative whatever its score. Rows of the main
qrels with a negative score are read as explicit negatives too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from itlr.documents import json_records, read_jsonl
from itlr.errors import ConfigurationError
from itlr.records import Document

Qrels = dict[str, dict[str, int]]
LOGICAL_KEYS = ("logical", "logical_query")


@dataclass(frozen=True)
class EvalQuery:
    id: str
    text: str
    logical: str | None = None
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class BeirDataset:
    path: Path
    corpus: tuple[Document, ...]
    queries: tuple[EvalQuery, ...]
    qrels: Qrels
    negatives: dict[str, frozenset[str]] = field(default_factory=dict)
    skipped_queries: int = 0

    @property
    def name(self) -> str:
        return self.path.name


def _is_int(value: str) -> bool:
    try:
        int(float(value))
    except ValueError:
        return False
    return True


def read_qrels(path: Path) -> Qrels:
    """Read a BEIR (3 columns, optional header) or TREC (4 columns) qrels file."""
    if not path.is_file():
        raise ConfigurationError(f"no such qrels file: {path}")
    qrels: Qrels = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            parts = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            parts = [p.strip() for p in parts]
            if not any(parts):
                continue
            if len(parts) == 4:
                qid, _iteration, docid, score = parts
            elif len(parts) == 3:
                qid, docid, score = parts
            else:
                raise ConfigurationError(
                    f"{path}:{number}: expected 'query-id corpus-id score' (BEIR) or "
                    f"'query-id 0 corpus-id score' (TREC), got {len(parts)} columns"
                )
            if not _is_int(score):
                if number == 1:
                    continue  # the BEIR header line
                raise ConfigurationError(f"{path}:{number}: score {score!r} is not a number")
            qrels.setdefault(qid, {})[docid] = int(float(score))
    return qrels


def _read_queries(path: Path) -> dict[str, EvalQuery]:
    queries: dict[str, EvalQuery] = {}
    for number, record in json_records(path):
        qid = record.get("_id", record.get("id"))
        text = record.get("text", record.get("query"))
        if qid is None or not isinstance(text, str):
            raise ConfigurationError(
                f"{path}:{number}: each query needs _id and text, got keys {sorted(record)}"
            )
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        logical = next(
            (
                source[k]
                for source in (record, metadata)
                for k in LOGICAL_KEYS
                if isinstance(source.get(k), str) and source[k].strip()
            ),
            None,
        )
        queries[str(qid)] = EvalQuery(str(qid), text, logical, metadata)
    return queries


def _qrels_for_split(folder: Path, split: str) -> Path:
    path = folder / "qrels" / f"{split}.tsv"
    if path.is_file():
        return path
    available = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
    if available:
        raise ConfigurationError(
            f"{folder} has no qrels/{split}.tsv: choose `split` from {available}"
        )
    raise ConfigurationError(f"{folder} has no qrels/ folder: give a qrels file as `qrels`")


def load_beir(
    folder: str | Path,
    split: str = "test",
    qrels: str | Path | None = None,
    negatives: str | Path | None = None,
) -> BeirDataset:
    """Load a BEIR folder; only queries with judgments in the chosen qrels are kept."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigurationError(f"no such dataset folder: {root}")
    for required in ("corpus.jsonl", "queries.jsonl"):
        if not (root / required).is_file():
            raise ConfigurationError(f"{root} has no {required}: not a BEIR folder")
    judged = read_qrels(Path(qrels) if qrels else _qrels_for_split(root, split))
    corpus = tuple(read_jsonl(root / "corpus.jsonl"))
    all_queries = _read_queries(root / "queries.jsonl")

    explicit: dict[str, set[str]] = {}
    relevance: Qrels = {}
    for qid, docs in judged.items():
        for docid, score in docs.items():
            if score < 0:
                explicit.setdefault(qid, set()).add(docid)
            else:
                relevance.setdefault(qid, {})[docid] = score
    if negatives:
        for qid, docs in read_qrels(Path(negatives)).items():
            explicit.setdefault(qid, set()).update(docs)

    kept = tuple(
        all_queries[q]
        for q in all_queries
        if q in relevance and any(s > 0 for s in relevance[q].values())
    )
    if not kept:
        raise ConfigurationError(
            f"no query in {root / 'queries.jsonl'} has a relevant document in the qrels: "
            "check the split and that the ids match"
        )
    kept_ids = {q.id for q in kept}
    return BeirDataset(
        path=root,
        corpus=corpus,
        queries=kept,
        qrels={q: relevance[q] for q in kept_ids},
        negatives={q: frozenset(d) for q, d in explicit.items() if q in kept_ids},
        skipped_queries=len({q for q in judged if q not in kept_ids}),
    )
