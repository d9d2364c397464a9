"""The encoder backends: the bundled model run by torch, or its ONNX graph run by onnxruntime.

Real parts only: the ONNX graph is built from the bundled safetensors in the test run's
ITLR_HOME (once per session), and compared with the torch vectors of the same model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from itlr import onnx_encoder
from itlr.cli import app
from itlr.embed import Embedder, get_embedder, resolve_encoder, resolve_model
from itlr.errors import ConfigurationError, EmbeddingError, ItlrError
from itlr.term_cache import cache_for

TERMS = ["vitamin D", "bone health", "  immune system  ", "Ünïcödé café", "COVID-19 vaccines"]
PASSAGES = [
    "Vitamin D supports the immune system against infections.",
    "Roman aqueducts carried water into the city over long stone arches.",
    "A long passage that the tokenizer must cut at the model's 256 tokens. " * 40,
    "",
]


@pytest.fixture(scope="session")
def onnx_embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    # Session fixtures run before conftest's per-test ITLR_HOME: point at the same folder, so
    # the export lands in the run's home (never the user's) and later tests find it there.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ITLR_HOME", str(tmp_path_factory.getbasetemp() / "itlr-home"))
        return get_embedder(encoder="onnx")


@pytest.fixture(scope="session")
def torch_embedder() -> Embedder:
    """The reference: the model run by sentence-transformers on torch."""
    return get_embedder(encoder="torch")


def _bundled() -> Path:
    return Path(resolve_model(None)[1])


def test_onnx_vectors_match_torch_for_terms_and_passages(torch_embedder, onnx_embedder) -> None:
    texts = TERMS + PASSAGES
    reference = torch_embedder.encode(texts)
    vectors = onnx_embedder.encode(texts)
    assert vectors.shape == reference.shape and vectors.dtype == np.float32
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.9999, dict(zip(texts, cosines.round(6), strict=True))
    assert np.abs(vectors - reference).max() <= 1e-3


def test_int8_term_vectors_are_cached_apart_and_onnx_ones_with_torchs(
    torch_embedder, onnx_embedder
) -> None:
    int8 = get_embedder(encoder="onnx-int8")
    assert onnx_embedder.cache_name == torch_embedder.cache_name == torch_embedder.name
    assert int8.cache_name != torch_embedder.cache_name
    term = "a term only this test encodes"
    torch_embedder.encode_terms([term])
    before = cache_for(int8.cache_name).stats()
    vector = int8.encode_terms([term])  # not torch's vector, already cached under the model
    assert cache_for(int8.cache_name).stats().misses == before.misses + 1
    np.testing.assert_array_equal(vector, int8.encode([term]))


def test_the_graph_is_built_without_torch_and_gives_torchs_vectors(
    torch_embedder, tmp_path
) -> None:
    """A process that cannot import torch, transformers or sentence-transformers builds the
    bundled model's graph from its weights; its vectors are torch's to float precision."""
    script = (
        "import sys, json, numpy as np\n"
        "for name in ('torch', 'transformers', 'sentence_transformers'):\n"
        "    sys.modules[name] = None\n"
        "from itlr.embed import Embedder\n"
        "embedder = Embedder(encoder='onnx')\n"
        "np.save(sys.argv[1], embedder.encode(json.loads(sys.argv[2])))\n"
        "print(embedder._model.folder)\n"
    )
    texts = TERMS + PASSAGES
    out = tmp_path / "vectors.npy"
    env = {
        **os.environ,
        "ITLR_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    result = subprocess.run(
        [sys.executable, "-c", script, str(out), json.dumps(texts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(tmp_path / "home")  # built, not reused
    vectors = np.load(out)
    np.testing.assert_allclose(vectors, torch_embedder.encode(texts), rtol=0, atol=1e-5)


def test_a_second_load_reuses_the_export(onnx_embedder, monkeypatch) -> None:
    folder = onnx_embedder._model.folder
    before = (folder / "model.onnx").stat()

    def no_export(*_: object) -> None:
        raise AssertionError("exported again although a complete export was there")

    monkeypatch.setattr(onnx_encoder, "_export_fp32", no_export)
    again = Embedder(encoder="onnx")
    assert again._model.folder == folder
    assert (folder / "model.onnx").stat().st_mtime_ns == before.st_mtime_ns
    np.testing.assert_allclose(again.encode(TERMS), onnx_embedder.encode(TERMS), rtol=0, atol=1e-6)


def test_a_torn_export_is_rebuilt_once_by_concurrent_first_uses(
    onnx_embedder, tmp_path, monkeypatch
) -> None:
    complete = onnx_embedder._model.folder
    monkeypatch.setenv("ITLR_HOME", str(tmp_path / "home"))
    torn = onnx_encoder.export_folder(_bundled(), "all-MiniLM-L6-v2", "fp32")
    shutil.copytree(complete, torn)
    with open(torn / "model.onnx", "r+b") as model:  # a crash or a full disk mid-write
        model.truncate(1000)

    real_export = onnx_encoder._export_fp32
    exports: list[Path] = []

    def counted(folder: Path, staging: Path) -> None:
        exports.append(staging)
        real_export(folder, staging)

    monkeypatch.setattr(onnx_encoder, "_export_fp32", counted)
    built: list[Path] = []
    users = [
        threading.Thread(
            target=lambda: built.append(
                onnx_encoder.ensure_export(_bundled(), "all-MiniLM-L6-v2", "fp32")
            )
        )
        for _ in range(2)
    ]
    for user in users:
        user.start()
    for user in users:
        user.join()
    assert built == [torn, torn]
    assert len(exports) == 1
    assert (torn / "model.onnx").stat().st_size == (complete / "model.onnx").stat().st_size
    assert not [p for p in torn.parent.iterdir() if p.name.startswith(".")]  # no staging left
    rebuilt = onnx_encoder.OnnxEncoder("all-MiniLM-L6-v2", str(_bundled()))
    np.testing.assert_allclose(
        rebuilt.encode(TERMS), onnx_embedder.encode(TERMS), rtol=0, atol=1e-5
    )


def test_int8_is_a_separate_export_with_unit_vectors_near_torchs(torch_embedder) -> None:
    int8 = get_embedder(encoder="onnx-int8")
    assert int8._model.folder.name.endswith("-int8")
    vectors = int8.encode(TERMS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Quantised weights move the vectors (docs/benchmarks.md): close, not within 1e-3. Per-tensor
    # quantisation of every weight would fall below this (about 0.94).
    assert (vectors * torch_embedder.encode(TERMS)).sum(axis=1).min() >= 0.98


def test_search_takes_the_encoder_flag_on_the_embedded_engine(tmp_path, torch_embedder) -> None:
    corpus = tmp_path / "docs.jsonl"
    rows = [
        {"id": "imm", "text": "Vitamin D supports the immune system against infections."},
        {"id": "bone", "text": "Vitamin D helps calcium absorption for strong bones."},
        {"id": "rome", "text": "Roman aqueducts carried water into the city."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(corpus), "--index", "enc"]).exit_code == 0
    query = '"vitamin D benefits" AND NOT "bone health"'

    def hits(*extra: str) -> list[tuple[str, float]]:
        result = runner.invoke(app, ["search", query, "--index", "enc", "--json", *extra])
        assert result.exit_code == 0, result.output
        return [(hit["id"], hit["score"]) for hit in json.loads(result.stdout)["hits"]]

    def gap(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> float:
        assert [i for i, _ in a] == [i for i, _ in b]
        return max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True))

    by_torch = hits("--encoder", "torch")
    assert by_torch[0][0] == "imm"
    assert gap(hits("--encoder", "onnx"), by_torch) <= 1e-3
    int8_misses = cache_for(f"{torch_embedder.name} (onnx-int8)").stats().misses
    by_int8 = hits("--encoder", "onnx-int8")
    # int8's own vectors for the query's two terms: the flag chose the encoder.
    assert cache_for(f"{torch_embedder.name} (onnx-int8)").stats().misses == int8_misses + 2
    assert gap(by_int8, by_torch) > 1e-6


def test_an_unknown_encoder_is_one_line_and_exit_2(monkeypatch) -> None:
    result = CliRunner().invoke(app, ["search", "x", "--index", "enc", "--encoder", "tpu"])
    assert result.exit_code == 2 and "tpu" in result.output
    monkeypatch.setenv("ITLR_ENCODER", "tpu")
    with pytest.raises(ConfigurationError, match=r"ITLR_ENCODER.*torch, onnx, onnx-int8"):
        resolve_encoder(None)
    monkeypatch.setenv("ITLR_ENCODER", "TORCH")
    assert resolve_encoder(None) == "torch"
    monkeypatch.delenv("ITLR_ENCODER")
    assert resolve_encoder(None) == "onnx"  # the default: it kept torch's top 10 (benchmarks)


def test_without_onnxruntime_the_error_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now raises ImportError
    with pytest.raises(EmbeddingError, match=r"pip install 'onnxruntime") as raised:
        Embedder(encoder="onnx")
    assert isinstance(raised.value, ItlrError) and "\n" not in str(raised.value)


def test_a_model_the_onnx_encoder_cannot_run_is_refused_clearly(tmp_path) -> None:
    (tmp_path / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "x.Transformer"}])
    )
    with pytest.raises(EmbeddingError, match="--encoder torch"):
        onnx_encoder.OnnxEncoder("odd", str(tmp_path))


def test_the_default_rule_counts_reordered_top_10s_and_the_largest_score_gap() -> None:
    from itlr.benchmarks.encoders import Corpus, compare

    corpus = Corpus("c", ("a", "b", "c"), ("x", "y", "z"), ("q1", "q2"))
    reference = [[("a", 0.9), ("b", 0.5)], [("c", 0.7), ("a", 0.6)]]
    same = compare(
        corpus, "onnx", reference, [[("a", 0.9004), ("b", 0.5)], [("c", 0.7), ("a", 0.6)]]
    )
    assert (same.identical, same.holds) == (2, True) and abs(same.max_score_diff - 4e-4) < 1e-9
    swapped = compare(
        corpus, "onnx", reference, [[("a", 0.9), ("b", 0.5)], [("a", 0.7), ("c", 0.6)]]
    )
    assert (swapped.identical, swapped.holds) == (1, False)
    drifted = compare(
        corpus, "onnx", reference, [[("a", 0.902), ("b", 0.5)], [("c", 0.7), ("a", 0.6)]]
    )
    assert drifted.identical == 2 and not drifted.holds


def test_torch_threads_also_bound_the_onnx_sessions_loaded_after(monkeypatch) -> None:
    from itlr import embed

    monkeypatch.setattr(embed, "_threads", None)
    monkeypatch.setattr("torch.set_num_threads", lambda count: None)
    embed.set_torch_threads(1)
    single = Embedder(encoder="onnx")
    assert single._model.session.get_session_options().intra_op_num_threads == 1
