"""The ONNX graph of the bundled BERT sentence encoder, written from its safetensors (onnx_proto.py's dataclasses).

No torch and no export step: the graph is the model's forward pass spelled out in standard ONNX operators,
every dimension read from the model's config.json, every weight taken from model.safetensors (widened to
float32):

    embeddings   word[input_ids] + position[0..S) + token_type[0], LayerNormalization
    each layer   Q, K, V projections; per-head softmax(Q·Kᵀ/√d + mask bias)·V; output projection,
                 residual, LayerNormalization; Linear, exact GELU (Erf), Linear, residual, LayerNormalization
    sentence     mean over the tokens the attention mask keeps, then L2 normalisation

It is built in memory when the engine starts: about 0.3 s for the weights (90 MB in float32) on an idle
core, so there is no cache to go stale, to key by digest, or to write anywhere (site-packages may be
read-only). The operators are the plain ones on purpose. onnxruntime's optimiser (ORT_ENABLE_ALL) fuses what pays here (the bias into
GELU, the 1/√d scale into the score MatMul); writing its com.microsoft operators by hand (Attention,
SkipLayerNormalization, BiasGelu) or running its transformers optimiser measured no faster on this
repository's 2-core EPYC (15.0 and 14.4 chunks per CPU-second against 15.1, one thread, 200 SciFact chunks,
batch 16): the dense MatMuls are 82 % of the time and the fused kernels use the same GEMM. A plain graph
also stays runnable and checkable by any ONNX tool. Token type ids are always 0 for one sentence, so
token_type[0] is folded into the position table instead of being an input.

`build_model` returns the float32 model (an `onnx_proto.Model`; its `serialized()` bytes are an ONNX
ModelProto, so no `onnx` package is needed); a lower precision (int8, float16) is a transformation of it,
made before onnx_embedder.py opens sessions on it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .onnx_proto import FLOAT, INT64, Graph, Model, Node, Tensor, ValueInfo

if TYPE_CHECKING:
    import numpy as np

# LayerNormalization is a standard operator from opset 17 on; onnxruntime fuses around it.
OPSET = 17
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
OUTPUT = "sentence_embedding"
WORD_SOURCE = "embeddings.word_embeddings.weight"
POSITION_TABLE = "embeddings.position_and_token_type"
# Added to the attention score of a padding token: exp() of it is exactly 0 in float32 (as HF BERT does).
_MASKED = -10000.0


@dataclasses.dataclass(frozen=True)
class BertShape:
    """The dimensions of a BERT encoder, as its config.json gives them."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int
    vocab: int

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BertShape:
        if config.get("model_type", "bert") != "bert" or config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"not a BERT model with exact GELU: model_type={config.get('model_type')!r}, "
                             f"hidden_act={config.get('hidden_act')!r}")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {config['position_embedding_type']!r} is not supported")
        shape = cls(hidden=int(config["hidden_size"]), heads=int(config["num_attention_heads"]),
                    layers=int(config["num_hidden_layers"]), intermediate=int(config["intermediate_size"]),
                    eps=float(config["layer_norm_eps"]), max_positions=int(config["max_position_embeddings"]),
                    vocab=int(config["vocab_size"]))
        if shape.hidden % shape.heads:
            raise ValueError(f"hidden_size {shape.hidden} is not a multiple of num_attention_heads {shape.heads}")
        return shape


def read_shape(model_dir: Path) -> BertShape:
    return BertShape.from_config(json.loads((model_dir / "config.json").read_text(encoding="utf-8")))


def build_model(model_dir: Path) -> Model:
    """The float32 sentence encoder of `model_dir` (config.json + model.safetensors) as an ONNX model."""
    from safetensors.numpy import load_file

    shape = read_shape(model_dir)
    # Widened to float32 as they are read: the bundled weights are stored in float16 (model/README.md), and
    # the graph computes in float32 throughout (a lower precision is a transformation of this graph).
    weights = {name.removeprefix("bert."): _widened(tensor)
               for name, tensor in load_file(str(model_dir / "model.safetensors")).items()}
    _check_weights(shape, weights)
    return _GraphBuilder(shape, weights).model()


def _widened(tensor: np.ndarray) -> np.ndarray:
    import numpy as np

    return tensor.astype(np.float32) if np.issubdtype(tensor.dtype, np.floating) else tensor


def _check_weights(shape: BertShape, weights: Mapping[str, np.ndarray]) -> None:
    """The weights have the config's dimensions: a mismatch is an error here, not a wrong vector later."""
    last = f"encoder.layer.{shape.layers - 1}"
    expected = {
        WORD_SOURCE: (shape.vocab, shape.hidden),
        "embeddings.position_embeddings.weight": (shape.max_positions, shape.hidden),
        f"{last}.attention.self.query.weight": (shape.hidden, shape.hidden),
        f"{last}.intermediate.dense.weight": (shape.intermediate, shape.hidden),
    }
    for name, dimensions in expected.items():
        found = weights[name].shape if name in weights else None
        if found != dimensions:
            raise ValueError(f"model.safetensors: {name} is {found}, config.json says {dimensions}")
    if any(name.startswith(f"encoder.layer.{shape.layers}.") for name in weights):
        raise ValueError(f"model.safetensors has more layers than num_hidden_layers ({shape.layers})")


class _GraphBuilder:
    """Appends nodes and initializers; every method returns the name of the value it produced."""

    def __init__(self, shape: BertShape, weights: dict[str, np.ndarray]) -> None:
        self.shape = shape
        self.weights = weights
        self.nodes: list[Node] = []
        self.initializers: list[Tensor] = []
        self._count = 0

    def model(self) -> Model:
        mask_bias = self._mask_bias()
        hidden = self._embeddings()
        for layer in range(self.shape.layers):
            hidden = self._layer(hidden, mask_bias, f"encoder.layer.{layer}")
        pooled = self._l2_normalised(self._mean_pooled(hidden))
        self._op("Identity", [pooled], output=OUTPUT)
        graph = Graph(
            "sentence_encoder", tuple(self.nodes), tuple(self.initializers),
            inputs=tuple(ValueInfo(name, INT64, ("batch", "sequence")) for name in (INPUT_IDS, ATTENTION_MASK)),
            outputs=(ValueInfo(OUTPUT, FLOAT, ("batch", self.shape.hidden)),),
        )
        # IR version 8 is what opset 17 needs; onnxruntime reads any version up to its own.
        return Model(graph, opset_imports=(("", OPSET),), ir_version=8, producer="kb-bridge")

    # --- the parts of the network ---------------------------------------------------------------------------

    def _embeddings(self) -> str:
        import numpy as np

        words = self._op("Gather", [self._weight(WORD_SOURCE), INPUT_IDS])
        positions = self.weights["embeddings.position_embeddings.weight"] + \
            self.weights["embeddings.token_type_embeddings.weight"][0]
        table = self._constant(positions.astype(np.float32), POSITION_TABLE)
        length = self._op("Slice", [self._op("Shape", [INPUT_IDS]), self._ints([1]), self._ints([2])])
        summed = self._op("Add", [words, self._op("Slice", [table, self._ints([0]), length, self._ints([0])])])
        return self._layer_norm(summed, "embeddings.LayerNorm")

    def _mask_bias(self) -> str:
        """(1 - mask) * -10000 as [batch, 1, 1, sequence]: added to every head's scores."""
        mask = self._op("Cast", [self._op("Unsqueeze", [ATTENTION_MASK, self._ints([1, 2])])], to=1)
        return self._op("Mul", [self._op("Sub", [self._float(1.0), mask]), self._float(_MASKED)])

    def _layer(self, hidden: str, mask_bias: str, prefix: str) -> str:
        attended = self._attention(hidden, mask_bias, f"{prefix}.attention")
        hidden = self._layer_norm(self._op("Add", [attended, hidden]), f"{prefix}.attention.output.LayerNorm")
        expanded = self._gelu(self._linear(hidden, f"{prefix}.intermediate.dense"))
        output = self._linear(expanded, f"{prefix}.output.dense")
        return self._layer_norm(self._op("Add", [output, hidden]), f"{prefix}.output.LayerNorm")

    def _attention(self, hidden: str, mask_bias: str, prefix: str) -> str:
        heads = self._ints([0, 0, self.shape.heads, self.shape.head_size])
        query, key, value = (self._op("Reshape", [self._linear(hidden, f"{prefix}.self.{part}"), heads])
                             for part in ("query", "key", "value"))
        query = self._op("Transpose", [query], perm=[0, 2, 1, 3])
        key = self._op("Transpose", [key], perm=[0, 2, 3, 1])
        value = self._op("Transpose", [value], perm=[0, 2, 1, 3])
        scores = self._op("Div", [self._op("MatMul", [query, key]), self._float(math.sqrt(self.shape.head_size))])
        probabilities = self._op("Softmax", [self._op("Add", [scores, mask_bias])], axis=-1)
        context = self._op("Transpose", [self._op("MatMul", [probabilities, value])], perm=[0, 2, 1, 3])
        context = self._op("Reshape", [context, self._ints([0, 0, self.shape.hidden])])
        return self._linear(context, f"{prefix}.output.dense")

    def _gelu(self, value: str) -> str:
        """Exact GELU, x·½(1 + erf(x/√2)), as BERT's hidden_act "gelu" computes it."""
        erf = self._op("Erf", [self._op("Div", [value, self._float(math.sqrt(2.0))])])
        return self._op("Mul", [self._op("Mul", [value, self._op("Add", [erf, self._float(1.0)])]),
                                self._float(0.5)])

    def _mean_pooled(self, hidden: str) -> str:
        mask = self._op("Cast", [self._op("Unsqueeze", [ATTENTION_MASK, self._ints([2])])], to=1)
        summed = self._op("ReduceSum", [self._op("Mul", [hidden, mask]), self._ints([1])], keepdims=0)
        counts = self._op("Clip", [self._op("ReduceSum", [mask, self._ints([1])], keepdims=0), self._float(1e-9)])
        return self._op("Div", [summed, counts])

    def _l2_normalised(self, value: str) -> str:
        norm = self._op("ReduceL2", [value], axes=[1], keepdims=1)  # axes an attribute until opset 18
        return self._op("Div", [value, self._op("Clip", [norm, self._float(1e-12)])])

    # --- building blocks ------------------------------------------------------------------------------------

    def _linear(self, value: str, prefix: str) -> str:
        """x·Wᵀ + b: a safetensors Linear weight is [out, in], MatMul wants [in, out]."""
        import numpy as np

        weight = self._constant(np.ascontiguousarray(self.weights[f"{prefix}.weight"].T), f"{prefix}.weight")
        return self._op("Add", [self._op("MatMul", [value, weight]), self._weight(f"{prefix}.bias")])

    def _layer_norm(self, value: str, prefix: str) -> str:
        return self._op("LayerNormalization", [value, self._weight(f"{prefix}.weight"), self._weight(f"{prefix}.bias")],
                        axis=-1, epsilon=self.shape.eps)

    def _op(self, op_type: str, inputs: list[str], output: str | None = None, **attributes: Any) -> str:
        self._count += 1
        output = output or f"{op_type.lower()}_{self._count}"
        self.nodes.append(Node(op_type, tuple(inputs), (output,), name=f"{op_type}_{self._count}",
                               attributes=attributes))
        return output

    def _weight(self, name: str) -> str:
        import numpy as np

        return self._constant(np.asarray(self.weights[name], dtype=np.float32), name)

    def _constant(self, array: np.ndarray, name: str) -> str:
        self.initializers.append(Tensor(name, array))
        return name

    def _float(self, value: float) -> str:
        import numpy as np

        return self._constant(np.array(value, dtype=np.float32), f"const_{self._count}_{len(self.initializers)}")

    def _ints(self, values: list[int]) -> str:
        import numpy as np

        return self._constant(np.array(values, dtype=np.int64), f"const_{self._count}_{len(self.initializers)}")
