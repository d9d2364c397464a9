"""`itlr eval --engine opensearch`: the corpus loaded into a real OpenSearch and the methods run
there, against the in-process evaluation of the same dataset."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from itlr.cli import app
from itlr.engines.connection import Connection
from itlr.engines.opensearch import OpenSearchBackend
from itlr.evaluation.beir import resolve
from itlr.evaluation.datasets import load_beir
from itlr.evaluation.engine_runs import EngineRunner
from itlr.evaluation.methods import build_methods
from itlr.evaluation.runner import VectorCorpus, run_methods
from itlr.lexical import LexicalCorpus

pytestmark = pytest.mark.opensearch

runner = CliRunner()
METHODS = "dense,itlr,itlr-hard,setops"
DOCUMENTS = [
    ("imm", "Immunity", "Vitamin D helps the immune system fight infections."),
    ("flu", "", "People low in vitamin D catch colds and flu more often."),
    ("bone", "Bones", "Vitamin D lets the gut absorb calcium for strong bones."),
    ("frac", "", "Vitamin D with calcium prevents hip fractures in old age."),
    ("mood", "", "Some studies link winter low mood to too little vitamin D."),
    ("cof", "", "Coffee beans are roasted to bring out their aroma."),
    ("tea", "", "Green tea is steamed right after picking to keep it green."),
    ("esp", "", "Espresso is coffee brewed under pressure in a small cup."),
    ("aq", "", "Roman aqueducts carried fresh water into the city."),
    ("col", "", "The Colosseum in Rome hosted gladiator fights."),
]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    """A tiny BEIR folder; its unique name gives every test its own default index."""
    folder = tmp_path / f"tiny-{uuid.uuid4().hex[:8]}"
    (folder / "qrels").mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl",
        [{"_id": i, "title": title, "text": text} for i, title, text in DOCUMENTS],
    )
    write_jsonl(
        folder / "queries.jsonl",
        [
            {
                "_id": "q1",
                "text": "benefits of vitamin D other than bone health",
                "logical": '"vitamin D benefits" AND NOT "bone health"',
            },
            {"_id": "q2", "text": "coffee or tea", "logical": '"coffee" OR "tea"'},
            {
                "_id": "q3",
                "text": "coffee but not espresso",
                "logical": '"coffee" AND NOT "espresso"',
            },
            {"_id": "q4", "text": "water supply of ancient Rome"},
        ],
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        "q1\timm\t2\nq1\tflu\t1\nq1\tmood\t1\nq1\tbone\t-1\n"
        "q2\tcof\t1\nq2\ttea\t1\nq2\tesp\t1\n"
        "q3\tcof\t1\nq3\tesp\t-1\n"
        "q4\taq\t1\n"
    )
    (folder / "negatives.tsv").write_text("q1\tfrac\t1\n")
    return folder


def run_eval(beir: Path, out: Path, *extra: str):
    args = ["eval", str(beir), "--methods", METHODS, "--negatives", str(beir / "negatives.tsv")]
    return runner.invoke(app, [*args, "--out", str(out), *extra])


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_eval_on_opensearch_loads_the_corpus_and_records_the_engine_in_results(
    beir: Path, tmp_path: Path, opensearch_url: str
) -> None:
    out = tmp_path / "os"
    result = run_eval(beir, out, "--engine", "opensearch", "--url", opensearch_url)
    assert result.exit_code == 0, result.output
    index = f"itlr-eval-{beir.name}-all-minilm-l6-v2"  # the default name: folder and model
    assert f"index {index} (created): added 10, skipped 0 already present, failed 0" in (
        result.stdout
    )
    assert "setops computed in process" in result.stderr
    payload = results(out)
    config = payload["config"]
    assert (config["engine"], config["url"], config["index"]) == (
        "opensearch",
        opensearch_url,
        index,
    )
    assert config["mode"] == "knn" and config["candidates"] == 1000  # depth 100 on a cluster
    assert config["depth"] == 100
    assert config["computed_in_process"] == ["setops"]
    assert config["index_sync"]["count"] == 10
    assert set(payload["metrics"]) == set(METHODS.split(","))
    for values in payload["metrics"].values():
        assert set(values) == {"nDCG@10", "MRR@10", "MAP", "R@100", "NegRecall@10"}
        assert all(0.0 <= v <= 1.0 for v in values.values())
    assert set(payload["per_query"]["itlr"]) == {"q1", "q2", "q3", "q4"}


def test_exact_mode_on_opensearch_gives_the_in_process_metrics(
    beir: Path, tmp_path: Path, opensearch_url: str
) -> None:
    memory = run_eval(beir, tmp_path / "memory", "--depth", "100")
    assert memory.exit_code == 0, memory.output
    remote = run_eval(
        beir, tmp_path / "os", "--engine", "opensearch", "--url", opensearch_url, "--mode", "exact"
    )
    assert remote.exit_code == 0, remote.output
    local, engine = results(tmp_path / "memory"), results(tmp_path / "os")
    assert engine["config"]["mode"] == "exact" and engine["config"]["candidates"] is None
    for method in ("itlr", "itlr-hard", "setops"):
        for query, values in local["per_query"][method].items():
            assert engine["per_query"][method][query] == pytest.approx(values, abs=1e-9), (
                method,
                query,
            )


def test_exact_mode_itlr_rankings_on_opensearch_equal_the_in_process_rankings(
    beir: Path, opensearch_url: str, embedder
) -> None:
    data = load_beir(beir)
    cases = [resolve(q, None).case for q in data.queries]
    corpus = VectorCorpus(
        tuple(d.id for d in data.corpus), embedder.encode([d.text for d in data.corpus])
    )
    texts = [c.text for c in cases] + sorted({t for c in cases for t in c.query.terms})
    text_vectors = dict(zip(texts, embedder.encode(texts), strict=True))
    # The default truths are hybrid: in process they read the corpus' tokens.
    lexical = LexicalCorpus([d.text for d in data.corpus])
    names = ["itlr", "itlr-hard", "itlr-hard-absolute"]
    methods = build_methods(names, hard_filter=0.3, lexical_corpus=lexical)
    backend = OpenSearchBackend(
        Connection(opensearch_url).opensearch(),
        f"itlr-eval-rank-{uuid.uuid4().hex[:8]}",
        embedder.name,
        embedder.dims,
        url=opensearch_url,
    )
    engine = EngineRunner(backend, mode="exact", index_created=backend.ensure_index())
    assert engine.sync(data.corpus, corpus.vectors).failed == {}
    on_engine = engine.run(cases, methods, corpus, text_vectors, depth=100)
    in_process = run_methods(cases, methods, corpus, text_vectors, depth=100)
    for method in names:
        for case in cases:
            assert list(on_engine[method][case.id]) == list(in_process[method][case.id]), (
                method,
                case.id,
            )
    # The absolute hard filter really dropped something: q1's bone-health document (the
    # relative one keeps it: it is closer to "vitamin D benefits" than to "bone health").
    assert "bone" in in_process["itlr"]["q1"]
    assert "bone" not in on_engine["itlr-hard-absolute"]["q1"]


def test_a_second_eval_run_adds_no_documents(
    beir: Path, tmp_path: Path, opensearch_url: str
) -> None:
    args = ["--url", opensearch_url, "--index", f"itlr-eval-twice-{uuid.uuid4().hex[:8]}"]
    first = run_eval(beir, tmp_path / "first", *args)
    assert first.exit_code == 0, first.output
    second = run_eval(beir, tmp_path / "second", *args)
    assert second.exit_code == 0, second.output
    assert "added 0, skipped 10 already present, failed 0; it holds 10 documents" in (second.stdout)
    assert "(created)" not in second.stdout
    sync = results(tmp_path / "second")["config"]["index_sync"]
    assert (sync["added"], sync["skipped"], sync["count"]) == (0, 10, 10)
    assert results(tmp_path / "first")["metrics"] == results(tmp_path / "second")["metrics"]


def test_documents_opensearch_refuses_are_named_and_the_run_exits_1(
    beir: Path, tmp_path: Path, opensearch_url: str
) -> None:
    rows = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    # A real mapping conflict: metadata.topic is a keyword in one document, an object in another.
    rows[0]["topic"] = "health"
    rows[6]["topic"] = {"nested": "drinks"}
    write_jsonl(beir / "corpus.jsonl", rows)
    result = run_eval(beir, tmp_path / "out", "--engine", "opensearch", "--url", opensearch_url)
    assert result.exit_code == 1, result.output
    assert "added 9, skipped 0 already present, failed 1" in result.stdout
    assert "failed tea:" in result.stderr and "metadata.topic" in result.stderr
    payload = results(tmp_path / "out")  # the results are still written
    assert list(payload["config"]["index_sync"]["failed"]) == ["tea"]


def test_eval_with_an_unreachable_url_exits_2_in_one_line(beir: Path, tmp_path: Path) -> None:
    result = run_eval(
        beir, tmp_path / "out", "--engine", "opensearch", "--url", "http://127.0.0.1:9"
    )
    assert result.exit_code == 2
    assert "cannot reach OpenSearch at http://127.0.0.1:9" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
