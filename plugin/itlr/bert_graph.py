"""A BERT encoder as an ONNX graph, built from the model's safetensors weights without torch.

The graph is what transformers' BertModel computes in eval mode, written out with onnx.helper:
embeddings (word + absolute position + token type, LayerNorm), then per layer self-attention
with the padding mask, a residual LayerNorm, the feed-forward block with the exact (erf) GELU
and another residual LayerNorm. Its output is the last hidden state, as torch's export was, so
pooling and normalisation stay where they were (itlr.onnx_encoder). onnxruntime fuses the
LayerNorm, GELU and bias patterns itself when it loads the graph.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from itlr.errors import EmbeddingError

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"
# LayerNormalization is a standard operator from opset 17; IR 8 is what that opset needs, and
# every onnxruntime since 1.13 reads it.
_OPSET = 17
_IR_VERSION = 8


def supports(config: dict[str, Any]) -> bool:
    """Whether `config` (a model's config.json) describes a model this builder writes exactly."""
    return (
        config.get("model_type") == "bert"
        and config.get("hidden_act") == "gelu"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and not config.get("is_decoder")
        and not config.get("add_cross_attention")
        and int(config.get("hidden_size", 0)) % max(int(config.get("num_attention_heads", 1)), 1)
        == 0
    )


def _weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise EmbeddingError(f"no safetensors weights in {folder}: use --encoder torch")
    weights: dict[str, np.ndarray] = {}
    for file in files:
        weights.update(load_file(str(file)))
    # Checkpoints saved from BertForX carry a `bert.` prefix; BertModel's own do not.
    return {name.removeprefix("bert."): value for name, value in weights.items()}


class _Graph:
    """Nodes and initialisers under unique names."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        from onnx import helper, numpy_helper

        self.helper = helper
        self.numpy_helper = numpy_helper
        self.source = weights
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0

    def weight(self, name: str, transpose: bool = False) -> str:
        try:
            value = self.source[name]
        except KeyError:
            raise EmbeddingError(
                f"the model's weights lack {name!r}: use --encoder torch"
            ) from None
        value = np.ascontiguousarray(value.T if transpose else value, dtype=np.float32)
        return self.constant(value, name + (".T" if transpose else ""))

    def constant(self, value: np.ndarray, name: str | None = None) -> str:
        name = name or self.fresh("const")
        self.initializers.append(self.numpy_helper.from_array(value, name))
        return name

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op(self, kind: str, inputs: list[str], **attributes: Any) -> str:
        output = self.fresh(kind.lower())
        self.nodes.append(self.helper.make_node(kind, inputs, [output], **attributes))
        return output

    def linear(self, x: str, prefix: str) -> str:
        product = self.op("MatMul", [x, self.weight(f"{prefix}.weight", transpose=True)])
        return self.op("Add", [product, self.weight(f"{prefix}.bias")])

    def layer_norm(self, x: str, prefix: str, epsilon: float) -> str:
        return self.op(
            "LayerNormalization",
            [x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")],
            axis=-1,
            epsilon=epsilon,
        )

    def gelu(self, x: str) -> str:
        """0.5 x (1 + erf(x / sqrt 2)): transformers' "gelu"."""
        scaled = self.op("Div", [x, self.constant(np.array(math.sqrt(2.0), np.float32))])
        shifted = self.op("Add", [self.op("Erf", [scaled]), self.constant(np.array(1, np.float32))])
        half = self.op("Mul", [x, self.constant(np.array(0.5, np.float32))])
        return self.op("Mul", [half, shifted])


def build(folder: Path, config: dict[str, Any], target: Path) -> None:
    """Write the model in `folder` (config.json's `config`) as an ONNX graph to `target`."""
    import onnx
    from onnx import TensorProto, helper

    if not supports(config):
        raise EmbeddingError(f"the model in {folder} is not a BERT encoder: use --encoder torch")
    g = _Graph(_weights(folder))
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head = hidden // heads
    epsilon = float(config.get("layer_norm_eps", 1e-12))

    ids, mask, types = INPUTS
    length = g.op(
        "Gather",
        [g.op("Shape", [ids]), g.constant(np.array(1, np.int64))],
        axis=0,
    )
    positions = g.op(
        "Range", [g.constant(np.array(0, np.int64)), length, g.constant(np.array(1, np.int64))]
    )
    x = g.op(
        "Add",
        [
            g.op(
                "Add",
                [
                    g.op("Gather", [g.weight("embeddings.word_embeddings.weight"), ids]),
                    g.op("Gather", [g.weight("embeddings.token_type_embeddings.weight"), types]),
                ],
            ),
            g.op("Gather", [g.weight("embeddings.position_embeddings.weight"), positions]),
        ],
    )
    x = g.layer_norm(x, "embeddings.LayerNorm", epsilon)

    # (batch, 1, 1, sequence): 0 where a token is real, the float minimum where it is padding,
    # added to every head's scores before the softmax (transformers' extended attention mask).
    keep = g.op("Cast", [mask], to=TensorProto.FLOAT)
    blocked = g.op("Sub", [g.constant(np.array(1, np.float32)), keep])
    bias = g.op("Mul", [blocked, g.constant(np.array(np.finfo(np.float32).min, np.float32))])
    bias = g.op("Unsqueeze", [bias, g.constant(np.array([1, 2], np.int64))])

    split = g.constant(np.array([0, 0, heads, head], np.int64))
    merge = g.constant(np.array([0, 0, hidden], np.int64))
    scale = g.constant(np.array(1.0 / math.sqrt(head), np.float32))
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"encoder.layer.{layer}"

        def heads_of(projection: str, perm: list[int], x: str = x, prefix: str = prefix) -> str:
            projected = g.linear(x, f"{prefix}.attention.self.{projection}")
            return g.op("Transpose", [g.op("Reshape", [projected, split])], perm=perm)

        query = heads_of("query", [0, 2, 1, 3])
        key = heads_of("key", [0, 2, 3, 1])
        value = heads_of("value", [0, 2, 1, 3])
        scores = g.op("Mul", [g.op("MatMul", [query, key]), scale])
        probabilities = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        context = g.op("MatMul", [probabilities, value])
        context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        attended = g.linear(context, f"{prefix}.attention.output.dense")
        x = g.layer_norm(
            g.op("Add", [attended, x]), f"{prefix}.attention.output.LayerNorm", epsilon
        )
        inner = g.gelu(g.linear(x, f"{prefix}.intermediate.dense"))
        out = g.linear(inner, f"{prefix}.output.dense")
        x = g.layer_norm(g.op("Add", [out, x]), f"{prefix}.output.LayerNorm", epsilon)
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT]))

    dynamic = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes,
        "bert",
        [helper.make_tensor_value_info(name, TensorProto.INT64, dynamic) for name in INPUTS],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [*dynamic, hidden])],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", _OPSET)],
        ir_version=_IR_VERSION,
        producer_name="itlr",
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, str(target))
