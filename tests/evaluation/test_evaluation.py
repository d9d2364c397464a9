"""Evaluation: BEIR loading, metrics, the synthetic generator, methods, and the eval/bench CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from itlr import ConfigurationError, parse
from itlr.calibrations import BUNDLED_HARD_FILTER, default_hard_filter, load_calibration
from itlr.cli import app
from itlr.documents import Document
from itlr.embed import get_embedder
from itlr.engines.embedded import EmbeddedBackend
from itlr.evaluation.cache import EmbeddingCache
from itlr.evaluation.calibration import HARD_FILTER_KEEP, fit_sigmoid, hard_filter_threshold
from itlr.evaluation.datasets import load_beir, read_qrels
from itlr.evaluation.engine_runs import EngineRunner, default_index_name
from itlr.evaluation.methods import Case, Logical, SetOps, build_methods
from itlr.evaluation.metrics import evaluate_run
from itlr.evaluation.runner import VectorCorpus, run_methods
from itlr.evaluation.synthetic import (
    TopicBank,
    calibration_docs,
    chain_queries,
    satisfies,
    template_queries,
    templates,
)
from itlr.options import SearchOptions
from itlr.scoring import Operators, TruthMap

runner = CliRunner()


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    """A tiny BEIR folder about vitamin D, coffee and Rome, with explicit negatives."""
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {
                "_id": "imm",
                "title": "Immunity",
                "text": "Vitamin D helps the immune system fight infections.",
            },
            {
                "_id": "flu",
                "title": "",
                "text": "People low in vitamin D catch colds and flu more often.",
            },
            {
                "_id": "bone",
                "title": "Bones",
                "text": "Vitamin D lets the gut absorb calcium for strong bones.",
            },
            {
                "_id": "frac",
                "title": "",
                "text": "Vitamin D with calcium prevents hip fractures in old age.",
            },
            {
                "_id": "cof",
                "title": "",
                "text": "Coffee beans are roasted to bring out their aroma.",
            },
            {
                "_id": "tea",
                "title": "",
                "text": "Green tea is steamed right after picking to keep it green.",
            },
            {
                "_id": "aq",
                "title": "",
                "text": "Roman aqueducts carried fresh water into the city.",
            },
            {"_id": "col", "title": "", "text": "The Colosseum in Rome hosted gladiator fights."},
        ],
    )
    write_jsonl(
        folder / "queries.jsonl",
        [
            {
                "_id": "q1",
                "text": "benefits of vitamin D other than bone health",
                "metadata": {"logical": '"vitamin D benefits" AND NOT "bone health"'},
            },
            {"_id": "q2", "text": "coffee OR tea", "logical": '"coffee" OR "tea"'},
            {"_id": "q3", "text": "water supply of ancient Rome"},
            {"_id": "q4", "text": "a query nobody judged"},
        ],
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        "q1\timm\t2\nq1\tflu\t1\nq1\tbone\t-1\n"
        "q2\tcof\t1\nq2\ttea\t1\n"
        "q3\taq\t1\nq3\tcol\t0\n"
    )
    (folder / "negatives.tsv").write_text("q1\tfrac\t1\nq2\taq\t0\n")
    return folder


# -- datasets ----------------------------------------------------------------------------------


def test_beir_loader_reads_corpus_queries_qrels_and_negatives(beir: Path) -> None:
    data = load_beir(beir, negatives=beir / "negatives.tsv")
    assert [q.id for q in data.queries] == ["q1", "q2", "q3"]
    assert data.queries[0].logical == '"vitamin D benefits" AND NOT "bone health"'
    assert data.queries[1].logical == '"coffee" OR "tea"'
    assert data.queries[2].logical is None
    texts = {d.id: d.text for d in data.corpus}
    assert texts["imm"].startswith("Immunity. Vitamin D")  # the title is embedded with the text
    assert data.qrels["q1"] == {"imm": 2, "flu": 1}
    assert data.qrels["q3"] == {"aq": 1, "col": 0}
    # A negative score in the qrels and every row of the negatives file are explicit negatives.
    assert data.negatives == {"q1": frozenset({"bone", "frac"}), "q2": frozenset({"aq"})}


def test_beir_loader_reads_trec_qrels_by_path(beir: Path, tmp_path: Path) -> None:
    trec = tmp_path / "trec.qrels"
    trec.write_text("q2 0 cof 1\nq2 0 tea 0\n")
    assert read_qrels(trec) == {"q2": {"cof": 1, "tea": 0}}
    data = load_beir(beir, qrels=trec)
    assert [q.id for q in data.queries] == ["q2"]


def test_beir_loader_names_the_available_splits(beir: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"choose `split` from \['test'\]"):
        load_beir(beir, split="dev")


# -- metrics -----------------------------------------------------------------------------------


def test_metrics_match_hand_computed_values() -> None:
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"x": 1}, "q3": {"y": 1}}
    run = {
        "q1": {"a": 3.0, "b": 2.0, "n1": 1.0},  # relevant first
        "q2": {"z": 2.0, "x": 1.0},  # relevant second
        "q3": {},  # nothing retrieved: still counts, as 0
    }
    result = evaluate_run(run, qrels, negatives={"q1": ["n1", "n2"], "q3": ["w"]})
    q2 = result.per_query["q2"]
    assert q2["MRR@10"] == pytest.approx(0.5)
    assert q2["nDCG@10"] == pytest.approx(1 / math.log2(3))
    assert q2["MAP"] == pytest.approx(0.5)
    assert q2["R@100"] == 1.0
    assert result.per_query["q1"]["nDCG@10"] == 1.0
    assert result.per_query["q3"]["nDCG@10"] == 0.0
    assert result.metrics["MRR@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    # NegRecall@10: q1 has one of its two negatives in the top 10, q3 none of its one.
    assert result.per_query["q1"]["NegRecall@10"] == pytest.approx(0.5)
    assert result.per_query["q3"]["NegRecall@10"] == 0.0
    assert "NegRecall@10" not in result.per_query["q2"]
    assert result.metrics["NegRecall@10"] == pytest.approx(0.25)


# -- calibration -------------------------------------------------------------------------------


def test_fit_sigmoid_recovers_tau_and_lambda() -> None:
    rng = np.random.default_rng(0)
    cosines = rng.uniform(-0.2, 0.9, 4000)
    labels = rng.random(4000) < 1 / (1 + np.exp(-(cosines - 0.35) * 12))
    fit = fit_sigmoid(cosines, labels.astype(int))
    assert fit.tau == pytest.approx(0.35, abs=0.03)
    assert fit.lam == pytest.approx(12, rel=0.2)


def test_fit_sigmoid_stays_finite_on_separable_data() -> None:
    fit = fit_sigmoid([0.5, 0.6, 0.7, 0.1, 0.0, 0.2], [1, 1, 1, 0, 0, 0])
    assert 0.2 < fit.tau < 0.5 and 0 < fit.lam < 1000


def test_fit_sigmoid_rejects_one_sided_labels() -> None:
    with pytest.raises(ConfigurationError, match="positive and negative"):
        fit_sigmoid([0.1, 0.2], [1, 1])


# -- synthetic generator -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bank() -> TopicBank:
    return TopicBank.load()


def test_there_are_32_templates_with_0_to_3_negations() -> None:
    found = templates()
    assert len(found) == 32 and len({t.name for t in found}) == 32
    counts = [sum(t.negations == n for t in found) for n in range(4)]
    assert counts == [4, 12, 12, 4]
    assert found[0].name == "A AND B AND C"
    assert "(A AND NOT B) OR C" in {t.name for t in found}


def test_topic_bank_holds_out_sentences_for_calibration(bank: TopicBank) -> None:
    assert len(bank.topics) >= 60
    for topic in bank.topics:
        assert len(topic.held_out) == 3 and len(topic.sentences) >= 5
        assert not set(topic.held_out) & set(topic.sentences)
    topic = bank.topics[0]
    docs = calibration_docs(bank, topic)
    assert sum(d.about for d in docs) == 20 and len(docs) == 40
    held_out = {s for t in bank.topics for s in t.held_out}
    test_sentences = {s for t in bank.topics for s in t.sentences}
    for doc in docs:
        assert any(s in doc.text for s in held_out)
        assert not any(s in doc.text for s in test_sentences)


def test_synthetic_generation_is_deterministic_and_prefix_stable(bank: TopicBank) -> None:
    first = list(template_queries(bank, 3, seed=7))
    again = list(template_queries(bank, 3, seed=7))
    assert first == again and len(first) == 96
    longer = list(template_queries(bank, 5, seed=7))
    assert [q for q in longer if int(q.id[-3:]) < 3] == first
    assert list(template_queries(bank, 3, seed=8)) != first


def test_every_query_has_positives_and_one_move_hard_negatives(bank: TopicBank) -> None:
    for query in [*template_queries(bank, 4), *chain_queries(bank, 2)]:
        assert 2 <= len(query.docs) <= 6
        assert len(set(query.terms)) == len(query.terms)
        relevant = [d for d in query.docs if d.relevant]
        negatives = [d for d in query.docs if not d.relevant]
        assert relevant and negatives
        for doc in query.docs:
            assert doc.relevant == satisfies(query.query, doc.covers)
            assert doc.text
        for doc in negatives:
            # Moving exactly one term to the other side makes some positive a negative.
            assert any(len(doc.covers ^ p.covers) == 1 for p in relevant)


def test_template_queries_count_their_negations(bank: TopicBank) -> None:
    query = next(q for q in template_queries(bank, 1) if q.template == "(A AND NOT B) OR NOT C")
    assert query.negations == 2
    a, b, c = query.terms
    assert query.text == f"({a} AND NOT {b}) OR NOT {c}"
    assert str(query.query) == f'(("{a}" AND NOT "{b}") OR NOT "{c}")'


# -- methods -----------------------------------------------------------------------------------


def test_setops_intersects_unites_and_subtracts() -> None:
    query = parse('"a" AND NOT "b"')
    cosines = np.array(
        [  # a,   b
            [0.9, 0.8],  # in top(a) and top(b): removed by the difference
            [0.8, 0.1],  # in top(a) only: kept, scored 0.8 - 0.1
            [0.7, 0.0],  # in top(a) only: kept, scored 0.7 - 0.0
            [0.1, 0.9],  # in top(b) only
            [0.0, 0.85],  # in top(b) only
        ]
    )
    scores = SetOps(depth=3).score(Case("q", "", query), cosines, np.zeros(5))
    assert list(np.isfinite(scores)) == [False, True, True, False, False]
    assert scores[1] == pytest.approx(0.7) and scores[2] == pytest.approx(0.7)
    union = SetOps(depth=1).score(Case("q", "", parse("a OR b")), cosines, np.zeros(5))
    assert list(np.isfinite(union)) == [True, False, False, True, False]
    assert union[0] == pytest.approx(0.9) and union[3] == pytest.approx(0.9)
    both = SetOps(depth=3).score(Case("q", "", parse("a AND b")), cosines, np.zeros(5))
    assert list(np.isfinite(both)) == [True, False, False, False, False]
    assert both[0] == pytest.approx(1.7)


def test_logical_method_ranks_as_the_embedded_engine_exact_mode(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    terms = rng.normal(size=(3, 8)).astype(np.float32)
    terms /= np.linalg.norm(terms, axis=1, keepdims=True)
    ids = [f"d{i:02d}" for i in range(60)]
    index = EmbeddedBackend.create(tmp_path / "idx", "m", 8)
    index.add(ids, ids, vectors)
    query = parse('("x" OR "y") AND NOT "z"')
    ops, truth = Operators("product", "max", "complement"), TruthMap("shift")
    engine = index.search(
        query, terms, SearchOptions(k=20, mode="exact", ops=ops, truth=truth, hard_filter=0.6)
    )
    method = Logical("itlr-hard", ops, truth, hard_filter=0.6)
    text_vectors = dict(zip(query.terms, terms, strict=True)) | {"text": terms[0]}
    runs = run_methods(
        [Case("q", "text", query)], [method], VectorCorpus(tuple(ids), vectors), text_vectors, 20
    )
    assert list(runs["itlr-hard"]["q"]) == [hit.id for hit in engine]


# -- runs on an engine (the cluster path, here over the embedded engine) ------------------------


class EmbeddedAsCluster:
    """The embedded engine behind the cluster interface EngineRunner uses; refuses `refuse`."""

    engine = "test-engine"
    url = "http://user:secret@example.test:9200/"

    def __init__(self, inner: EmbeddedBackend, refuse: set[str] | None = None) -> None:
        self.inner = inner
        self.model = inner.model
        self.index_name = "eval-index"
        self.refuse = refuse or set()

    def existing_ids(self, ids: list[str]) -> set[str]:
        return self.inner.existing_ids(ids)

    # The rest of the engine contract (itlr.engines.Backend), as the embedded engine keeps it.
    foreign = False
    top_fields: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()

    def writing(self):
        return self.inner.writing()

    def prepare_writes(self) -> None:
        self.inner.prepare_writes()

    def check_replacements(self, fields, stored) -> None:
        self.inner.check_replacements(fields, stored)

    def fingerprints(self, ids: list[str]):
        return self.inner.fingerprints(ids)

    def stored_vectors(self, ids: list[str]):
        return self.inner.stored_vectors(ids)

    def stored_documents(self, ids: list[str]):
        return self.inner.stored_documents(ids)

    def written_fields(self, documents):
        return self.inner.written_fields(documents)

    def add(self, ids, texts, vectors, fields=None) -> dict[str, str]:
        keep = [i for i, doc_id in enumerate(ids) if doc_id not in self.refuse]
        if keep:
            self.inner.add(
                [ids[i] for i in keep],
                [texts[i] for i in keep],
                vectors[keep],
                [fields[i] for i in keep] if fields else None,
            )
        return {doc_id: "mapper_parsing_exception" for doc_id in ids if doc_id in self.refuse}

    def refresh(self) -> None:
        pass

    def count(self) -> int:
        return self.inner.count()

    def search(self, query, term_vectors, options):
        return self.inner.search(query, term_vectors, options)

    def search_vector(self, vector, k, filter=None):
        return self.inner.search_vector(vector, k, filter)


def random_eval_setup(tmp_path: Path):
    rng = np.random.default_rng(11)

    def unit(rows: int) -> np.ndarray:
        vectors = rng.normal(size=(rows, 8)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    ids = [f"d{i:02d}" for i in range(40)]
    documents = [Document(i, f"text of {i}") for i in ids]
    corpus = VectorCorpus(tuple(ids), unit(len(ids)))
    queries = ['"x" AND NOT "y"', '("x" OR "z") AND NOT "y"', '"z"', 'NOT "x"']
    cases = [Case(f"q{n}", f"question {n}", parse(q)) for n, q in enumerate(queries)]
    texts = [c.text for c in cases] + ["x", "y", "z"]
    text_vectors = dict(zip(texts, unit(len(texts)), strict=True))
    backend = EmbeddedAsCluster(EmbeddedBackend.create(tmp_path / "idx", "m", 8))
    return documents, corpus, cases, text_vectors, backend


def test_engine_runs_in_exact_mode_equal_the_in_process_runs(tmp_path: Path) -> None:
    documents, corpus, cases, text_vectors, backend = random_eval_setup(tmp_path)
    methods = build_methods(
        ["dense", "itlr", "itlr-hard", "setops", "random"],
        truth=TruthMap("clamp"),
        hard_filter=0.4,
    )
    engine = EngineRunner(backend, mode="exact")
    engine.sync(documents, corpus.vectors)
    on_engine = engine.run(cases, methods, corpus, text_vectors, depth=100)
    in_process = run_methods(cases, methods, corpus, text_vectors, depth=100)
    assert list(on_engine) == list(in_process)
    for name in in_process:
        for case in cases:
            # Same documents, same order, same depth - rank scores.
            assert list(on_engine[name][case.id].items()) == list(
                in_process[name][case.id].items()
            ), (name, case.id)
    config = engine.describe(methods, 100)
    assert config["url"] == "http://example.test:9200/"  # no credentials in results.json
    assert config["computed_in_process"] == ["setops", "random"]
    assert (config["engine"], config["index"], config["mode"]) == (
        "test-engine",
        "eval-index",
        "exact",
    )


def test_engine_sync_reports_refused_documents_and_then_adds_only_what_is_missing(
    tmp_path: Path,
) -> None:
    documents, corpus, _cases, _text_vectors, backend = random_eval_setup(tmp_path)
    backend.refuse = {"d07"}
    first = EngineRunner(backend, index_created=True, batch_size=16).sync(documents, corpus.vectors)
    assert (first.created, first.added, first.skipped, first.count) == (True, 39, 0, 39)
    assert first.failed == {"d07": "mapper_parsing_exception"}
    backend.refuse = set()
    second = EngineRunner(backend, batch_size=16).sync(documents, corpus.vectors)
    assert (second.added, second.skipped, second.failed, second.count) == (1, 39, {}, 40)


def test_engine_runner_caps_the_default_candidate_budget_at_the_knn_limit(tmp_path: Path) -> None:
    backend = random_eval_setup(tmp_path)[-1]
    assert EngineRunner(backend).candidate_budget(100) == 1000
    assert EngineRunner(backend).candidate_budget(2000) == 10_000
    with pytest.raises(ConfigurationError, match="between 1 and 10000"):
        EngineRunner(backend, candidates=20_000)


def test_default_eval_index_name_is_a_valid_lowercase_index_name() -> None:
    name = default_index_name(Path("/data/SciFact v2"), "sentence-transformers/all-MiniLM-L6-v2")
    assert name == "itlr-eval-scifact-v2-all-minilm-l6-v2"


# -- embeddings cache --------------------------------------------------------------------------


def test_embedding_cache_encodes_each_text_once(embedder, tmp_path: Path) -> None:
    first = EmbeddingCache(embedder, tmp_path / "cache")
    vectors = first.encode(["volcanoes erupt", "penguins swim", "volcanoes erupt"])
    assert vectors.shape == (3, embedder.dims)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    reopened = EmbeddingCache(embedder, tmp_path / "cache")
    assert reopened.missing(["penguins swim", "volcanoes erupt"]) == []
    np.testing.assert_allclose(reopened.encode(["penguins swim"])[0], vectors[1])


# -- command line ------------------------------------------------------------------------------


def test_eval_writes_results_json_with_every_method_and_metric(beir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "eval",
            str(beir),
            "--methods",
            "dense,itlr,itlr-hard,setops",
            "--negatives",
            str(beir / "negatives.tsv"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "nDCG@10" in result.stdout and "itlr-hard" in result.stdout
    payload = json.loads((out / "results.json").read_text())
    methods = {"dense", "itlr", "itlr-hard", "setops"}
    assert set(payload["metrics"]) == methods
    for values in payload["metrics"].values():
        assert set(values) == {"nDCG@10", "MRR@10", "MAP", "R@100", "NegRecall@10"}
        assert all(0.0 <= v <= 1.0 for v in values.values())
    assert set(payload["per_query"]["itlr"]) == {"q1", "q2", "q3"}
    queries = payload["queries"]
    assert queries["q1"]["query"] == '("vitamin D benefits" AND NOT "bone health")'
    assert queries["q1"]["source"] == "dataset"
    assert queries["q3"]["source"] == "parsed text"
    assert payload["metrics"]["itlr"]["NegRecall@10"] <= payload["metrics"]["dense"]["NegRecall@10"]
    assert (out / "metrics.png").stat().st_size > 0
    assert (out / "by_negations.png").stat().st_size > 0


def test_eval_with_rule_rewrite_stores_the_rewritten_query(beir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["eval", str(beir), "--rewrite", "rules", "--methods", "dense,itlr", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    queries = json.loads((out / "results.json").read_text())["queries"]
    assert queries["q1"]["source"] == "rewrite"
    assert "bone health" in queries["q1"]["query"] and "NOT" in queries["q1"]["query"]
    assert queries["q1"]["rewrite"]["method"] == "rules"


def test_eval_on_a_cluster_engine_without_url_exits_2_in_one_line(
    beir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ITLR_URL", raising=False)
    result = runner.invoke(app, ["eval", str(beir), "--engine", "opensearch"])
    assert result.exit_code == 2
    assert "needs --url" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_eval_refuses_a_depth_no_cluster_request_returns_before_any_work(beir: Path) -> None:
    args = ["eval", str(beir), "--engine", "opensearch", "--url", "http://127.0.0.1:9"]
    result = runner.invoke(app, [*args, "--depth", "20000"])
    assert result.exit_code == 2
    assert "10000" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_eval_names_unknown_methods(beir: Path) -> None:
    result = runner.invoke(app, ["eval", str(beir), "--methods", "dense,bm25"])
    assert result.exit_code == 2 and "unknown method(s) ['bm25']" in result.stderr


def test_calibrate_saves_a_truth_map_that_search_can_load(
    beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its own home: a saved calibration must not change how other tests search.
    monkeypatch.setenv("ITLR_HOME", str(tmp_path / "home"))
    assert load_calibration(None) is None
    result = runner.invoke(app, ["calibrate", str(beir)])
    assert result.exit_code == 0, result.output
    assert "saved to" in result.stdout
    truth = load_calibration(None)
    assert truth is not None and truth.kind == "sigmoid" and truth.lam > 0
    # q1 excludes "bone health"; its relevant documents are imm and flu.
    embedder = get_embedder(None)
    docs = {d.id: d.text for d in load_beir(beir).corpus}
    cosines = embedder.encode([docs["imm"], docs["flu"]]) @ embedder.encode(["bone health"])[0]
    expected = float(np.quantile(np.clip(cosines, 0, 1), HARD_FILTER_KEEP))
    assert default_hard_filter(None) == pytest.approx(expected, abs=1e-5)
    assert "hard filter" in result.stdout


def test_hard_filter_threshold_keeps_that_share_of_relevant_documents() -> None:
    values = np.linspace(0.0, 0.99, 100)
    theta = hard_filter_threshold(values)
    assert np.mean(values < theta) <= HARD_FILTER_KEEP + 1e-9
    assert np.mean(values <= theta) >= HARD_FILTER_KEEP
    with pytest.raises(ConfigurationError, match="excludes anything"):
        hard_filter_threshold([])


def test_without_a_calibration_the_hard_filter_defaults_to_the_bundled_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ITLR_HOME", str(tmp_path / "home"))
    assert default_hard_filter(None) == BUNDLED_HARD_FILTER


def test_tiny_bench_synthetic_has_the_tables_and_itlr_beats_dense_on_negations(
    tmp_path: Path,
) -> None:
    out = tmp_path / "synthetic"
    args = ["bench", "synthetic", "--queries-per-template", "2", "--chain-queries", "1"]
    args += ["--topics", "12", "--calibration-docs", "3", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "results.json").read_text())
    table1 = payload["table1"]
    assert {"dense", "itlr", "itlr-calibrated", "setops"} <= set(table1)
    for row in table1.values():
        assert set(row) == {"0", "1", "2", "3", "all"}
        assert all(0.0 <= v <= 1.0 for v in row.values())
    for negations in ("2", "3"):
        assert table1["itlr"][negations] > table1["dense"][negations]
    assert len(payload["table2"]) == 6
    assert all(set(row) == {"complement", "reciprocal"} for row in payload["table2"].values())
    for family in ("and-chain", "or-chain"):
        assert set(payload["figure3"][family]["itlr"]) == {str(n) for n in range(1, 9)}
    assert payload["config"]["template_queries"] == 64
    for name in ("synthetic.md", "table1.png", "table2.png", "figure3.png"):
        assert (out / name).stat().st_size > 0
    assert "Table 1" in (out / "synthetic.md").read_text()
