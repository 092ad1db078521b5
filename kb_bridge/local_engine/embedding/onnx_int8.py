"""The float32 graph with 8-bit weights: each dense layer's MatMul becomes onnxruntime's MatMulNBits.

Weights are quantised in blocks of `BLOCK` values along the input dimension, each block with its own scale
(symmetric: scale = max |w| / 127, stored as w / scale + 128 in a uint8, MatMulNBits' default zero point),
once, here, with numpy (about 0.1 s; onnxruntime.quantization's own quantisers take 0.5 to 3 s and need
more packages). `accuracy_level=4` makes onnxruntime quantise each call's input to int8 in blocks too and
multiply in integers, which VNNI instructions (AVX512-VNNI, AVX-VNNI) do four multiply-adds at a time.

Why this form (measured on this repository's 2-core EPYC, 600 SciFact chunks and claims against float32,
docs/benchmarks.md "Runtimes and number formats"):
- onnxruntime's classic dynamic quantisation (MatMulInteger/DynamicQuantizeMatMul: one uint8 scale per
  call's input) moved vectors to a cosine of 0.899 per tensor and 0.989 per column; it reached 0.994 only
  with every feed-forward output layer (whose input is GELU's output, with a few large values) left in
  float32, and ran no faster than this;
- 8-bit blocks of 128 keep every dense layer in 8 bits at a lowest cosine of 0.998; blocks of 32 reach
  0.9995 but run 10 % slower.

Left in float32: the attention's own products (Q·Kᵀ, softmax·V, activations on both sides), the embedding
tables (a Gather), layer norms and pooling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx

BLOCK = 128
MICROSOFT = "com.microsoft"
_ZERO_POINT = 128  # MatMulNBits' zero point for 8 bits when none is given


def quantised(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose MatMuls by a 2-D weight (every dense layer) run with 8-bit weights."""
    from onnx import helper, numpy_helper

    result = type(model)()
    result.CopyFrom(model)
    graph = result.graph
    weights = {initializer.name: initializer for initializer in graph.initializer}
    replaced: set[str] = set()
    nodes = []
    for node in graph.node:
        name = node.input[1] if node.op_type == "MatMul" and len(node.input) == 2 else ""
        if name not in weights or len(weights[name].dims) != 2 or weights[name].dims[0] % BLOCK:
            nodes.append(node)
            continue
        k, n = weights[name].dims
        blocks, scales = blockwise_8bit(numpy_helper.to_array(weights[name]))
        graph.initializer.extend([numpy_helper.from_array(blocks, f"{name}.q8"),
                                  numpy_helper.from_array(scales, f"{name}.scales")])
        nodes.append(helper.make_node("MatMulNBits", [node.input[0], f"{name}.q8", f"{name}.scales"],
                                      list(node.output), name=f"{node.name}_q8", domain=MICROSOFT,
                                      K=k, N=n, bits=8, block_size=BLOCK, accuracy_level=4))
        replaced.add(name)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [initializer for initializer in graph.initializer if initializer.name not in replaced]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(opset.domain == MICROSOFT for opset in result.opset_import):
        result.opset_import.append(helper.make_opsetid(MICROSOFT, 1))
    return result


def blockwise_8bit(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits' layout for a [K, N] weight: (uint8 [N, K / BLOCK, BLOCK], float32 scales [N * K / BLOCK]),
    with weight[k, n] ≈ (blocks[n, k // BLOCK, k % BLOCK] - 128) * scale of that block."""
    import numpy as np

    k, n = weight.shape
    columns = np.ascontiguousarray(weight.T, dtype=np.float32).reshape(n, k // BLOCK, BLOCK)
    scales = np.abs(columns).max(axis=2, keepdims=True) / 127.0
    scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
    values = np.clip(np.rint(columns / scales), -127, 127) + _ZERO_POINT
    return values.astype(np.uint8), scales.reshape(-1)
