"""The ONNX encoder: the same sentence-transformers model, run by onnxruntime instead of torch.

The bundled model ships only safetensors. On first use its transformer is written once as an
ONNX graph into $ITLR_HOME/cache/onnx/<model>-<key>-<variant>/ (built in a temporary folder and
renamed into place under a file lock, so concurrent first uses and a crash mid-build leave no
half-written model behind). A BERT model (the bundled one) is built straight from its safetensors
weights by itlr.bert_graph, without torch; any other architecture is exported by torch.onnx,
which needs the `torch` extra once. Tokenisation (the model's own tokenizer.json), mean pooling
and normalisation follow the model's modules.json the way sentence-transformers does, so the
vectors match torch's to about 1e-7 (fp32).

The int8 variant is onnxruntime's dynamic quantisation of that graph: smaller and faster,
and further from torch's vectors (docs/benchmarks.md, "Encoder backends").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from itlr import bert_graph
from itlr.errors import EmbeddingError, ItlrError
from itlr.extras import require
from itlr.paths import itlr_home

if TYPE_CHECKING:
    from torch import Tensor

# Bumped when what an export folder holds changes: older folders are then rebuilt, not misread.
# 3: BERT models are built from their weights (itlr.bert_graph), not exported by torch.
_FORMAT = 3
_MODEL_FILE = "model.onnx"
_META_FILE = "itlr-export.json"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
VARIANTS = ("fp32", "int8")
_INSTALL_HINT = "pip install 'onnx>=1.17,<2' (an itlr dependency), or use --encoder onnx"
_RUNTIME_HINT = "pip install 'onnxruntime>=1.20,<2' (an itlr dependency), or use --encoder torch"


def _require_onnxruntime() -> Any:
    try:
        import onnxruntime  # type: ignore[import-untyped]  # no stubs nor py.typed
    except ImportError as missing:
        raise EmbeddingError(f"the onnx encoder needs onnxruntime: {_RUNTIME_HINT}") from missing
    return onnxruntime


def _model_folder(location: str) -> Path:
    """The local folder of a model given as a path or as a name already in the hub cache."""
    path = Path(location)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(location, local_files_only=True))
    except Exception as failure:  # huggingface_hub raises several kinds for "not cached"
        raise EmbeddingError(
            f"the onnx encoder needs the model {location!r} on disk (a folder, or a name already "
            f"downloaded): {failure}"
        ) from failure


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class _Pipeline:
    """What sentence-transformers does around the transformer, read from the model's files."""

    def __init__(self, folder: Path) -> None:
        modules = _read_json(folder / "modules.json") or []
        kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
        pooling = next((m for m in modules if m.get("type", "").endswith(".Pooling")), None)
        pooling_config = _read_json(folder / pooling["path"] / "config.json") if pooling else None
        supported = (
            kinds[:2] == ["Transformer", "Pooling"]
            and set(kinds[2:]) <= {"Normalize"}
            and pooling_config is not None
            and pooling_config.get("pooling_mode_mean_tokens")
            and not any(
                pooling_config.get(mode)
                for mode in (
                    "pooling_mode_cls_token",
                    "pooling_mode_max_tokens",
                    "pooling_mode_mean_sqrt_len_tokens",
                    "pooling_mode_weightedmean_tokens",
                    "pooling_mode_lasttoken",
                )
            )
            and modules[0].get("path", "") == ""
            and (folder / "tokenizer.json").is_file()
        )
        if not supported:
            raise EmbeddingError(
                f"the onnx encoder runs mean-pooled sentence-transformers models with a "
                f"tokenizer.json; {folder} is not one: use --encoder torch"
            )
        settings = _read_json(folder / "sentence_bert_config.json") or {}
        self.max_length = int(settings.get("max_seq_length") or 512)
        self.lower_case = bool(settings.get("do_lower_case"))

        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_length)
        pad = _read_json(folder / "tokenizer_config.json") or {}
        pad_token = str(pad.get("pad_token") or "[PAD]")
        pad_id = self.tokenizer.token_to_id(pad_token)
        self.tokenizer.enable_padding(pad_id=pad_id or 0, pad_token=pad_token)

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        # sentence-transformers strips each text (and lowercases when configured) before its
        # tokenizer sees it; the ids must be the same for the vectors to be.
        prepared = [str(text).strip() for text in texts]
        if self.lower_case:
            prepared = [text.lower() for text in prepared]
        encodings = self.tokenizer.encode_batch(prepared)
        ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        return ids, mask


def _export_key(folder: Path) -> str:
    """Names one export of one model's weights: a changed weight file or config is a new key."""
    digest = hashlib.sha256(f"format {_FORMAT}".encode())
    for path in sorted(folder.iterdir()):
        if path.is_file() and (
            path.suffix in {".safetensors", ".bin"} or path.name == "config.json"
        ):
            stat = path.stat()
            digest.update(f"{path.name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def export_folder(folder: Path, name: str, variant: str) -> Path:
    """Where the export of `variant` for the model in `folder` lives (built or not)."""
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80]
    return itlr_home() / "cache" / "onnx" / f"{slug}-{_export_key(folder)}-{variant}"


def _is_complete(target: Path) -> bool:
    """An export folder is used only when its record says what it holds and every file is there
    at the recorded size: a folder torn by a crash or a full disk fails this and is rebuilt."""
    meta = _read_json(target / _META_FILE)
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        return False
    files = meta.get("files")
    if not isinstance(files, dict) or _MODEL_FILE not in files:
        return False
    return all(
        (target / file).is_file() and (target / file).stat().st_size == size
        for file, size in files.items()
    )


def _seal(staging: Path) -> None:
    files = {path.name: path.stat().st_size for path in staging.iterdir() if path.is_file()}
    (staging / _META_FILE).write_text(json.dumps({"format": _FORMAT, "files": files}))


def _export_fp32(folder: Path, staging: Path) -> None:
    """The transformer's last hidden state with dynamic batch and sequence axes: built from the
    weights for a BERT model, else exported by torch."""
    config = _read_json(folder / "config.json") or {}
    if bert_graph.supports(config):
        bert_graph.build(folder, config, staging / _MODEL_FILE)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch, transformers = require("torch", "torch", "transformers")
    model = transformers.AutoModel.from_pretrained(str(folder), local_files_only=True)
    model.eval()
    accepts_types = "token_type_ids" in model.forward.__code__.co_varnames

    # torch is a module object from `require` (an optional extra): mypy cannot resolve the base.
    class LastHiddenState(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Tensor) -> Tensor:
            hidden: Tensor = self.model(**dict(zip(names, inputs, strict=True)))[0]
            return hidden

    names = list(_INPUTS if accepts_types else _INPUTS[:2])
    sample = torch.ones((2, 8), dtype=torch.long)
    axes = {input_name: {0: "batch", 1: "sequence"} for input_name in names}
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter needs no onnxscript; its deprecation notice is not the user's.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(),
            tuple(sample if n != "token_type_ids" else torch.zeros_like(sample) for n in names),
            str(staging / _MODEL_FILE),
            dynamo=False,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**axes, "last_hidden_state": {0: "batch", 1: "sequence"}},
            opset_version=17,
        )


def _export_int8(fp32: Path, staging: Path) -> None:
    try:
        from onnxruntime.quantization import (  # type: ignore[import-untyped]  # no stubs
            QuantType,
            quantize_dynamic,
        )
    except ImportError as missing:
        raise EmbeddingError(f"the int8 encoder needs onnx: {_INSTALL_HINT}") from missing
    import logging

    # quantize_dynamic advises a pre-processing pass on the root logger; not the user's concern.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        # Per-channel weights of the MatMuls only: per-tensor scales, or quantised embedding
        # tables, cost the vectors 0.03-0.06 of cosine against torch's; this costs 0.006-0.008.
        quantize_dynamic(
            str(fp32 / _MODEL_FILE),
            str(staging / _MODEL_FILE),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
        )
    finally:
        root.setLevel(level)


def ensure_export(folder: Path, name: str, variant: str) -> Path:
    """The export folder of `variant`, built first when missing or torn. A file lock makes
    concurrent first uses build it once; the build happens in a temporary sibling folder that is
    renamed into place only when sealed, so a reader never sees a half-written model."""
    if variant not in VARIANTS:
        raise EmbeddingError(f"unknown onnx variant {variant!r}: choose one of {VARIANTS}")
    target = export_folder(folder, name, variant)
    if _is_complete(target):
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if _is_complete(target):  # another process built it while this one waited
            return target
        source = ensure_export(folder, name, "fp32") if variant == "int8" else None
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            if source is None:
                _export_fp32(folder, staging)
            else:
                _export_int8(source, staging)
            _seal(staging)
            staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
            if target.exists():  # torn: its record or a file is missing
                shutil.rmtree(target)
            staging.rename(target)
        except ItlrError:  # already one line: a bad model, a missing extra
            raise
        except Exception as failure:  # onnx, torch.onnx and quantisation raise many kinds
            raise EmbeddingError(
                f"cannot export {name!r} to ONNX ({variant}) in {target.parent}: {failure}"
            ) from failure
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


class OnnxEncoder:
    """Unit vectors from the exported transformer: tokenizer, onnxruntime, mean pooling."""

    def __init__(
        self, name: str, location: str, variant: str = "fp32", threads: int | None = None
    ) -> None:
        ort = _require_onnxruntime()
        folder = _model_folder(location)
        self.pipeline = _Pipeline(folder)
        self.folder = ensure_export(folder, name, variant)
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initialisers are not the user's
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(
                str(self.folder / _MODEL_FILE), options, providers=["CPUExecutionProvider"]
            )
        except Exception as failure:  # onnxruntime raises its own kinds for a bad file
            raise EmbeddingError(
                f"cannot load the ONNX export of {name!r} from {self.folder}: {failure} "
                "(delete that folder to export it again)"
            ) from failure
        self.input_names = [node.name for node in self.session.get_inputs()]
        width = self.session.get_outputs()[0].shape[-1]
        self.dims = width if isinstance(width, int) else int(self.encode(["probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        ids, mask = self.pipeline.tokenize(texts)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        run = self.session.run(None, {name: feeds[name] for name in self.input_names})
        hidden = np.asarray(run[0], dtype=np.float32)
        # Mean over real tokens, then unit length: sentence-transformers' Pooling and Normalize.
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return unit
