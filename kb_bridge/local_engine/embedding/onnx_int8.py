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

import dataclasses
from typing import TYPE_CHECKING

from .onnx_proto import Model, Node, Tensor

if TYPE_CHECKING:
    import numpy as np

BLOCK = 128
MICROSOFT = "com.microsoft"
_ZERO_POINT = 128  # MatMulNBits' zero point for 8 bits when none is given


def quantised(model: Model) -> Model:
    """A copy of `model` whose MatMuls by a 2-D weight (every dense layer) run with 8-bit weights. The
    arrays it keeps are shared with `model`, not copied (neither is ever written to)."""
    graph = model.graph
    weights = {initializer.name: initializer.array for initializer in graph.initializers}
    replaced: set[str] = set()
    added: list[Tensor] = []
    nodes: list[Node] = []
    for node in graph.nodes:
        name = node.inputs[1] if node.op_type == "MatMul" and len(node.inputs) == 2 else ""
        weight = weights.get(name)
        if weight is None or weight.ndim != 2 or weight.shape[0] % BLOCK:
            nodes.append(node)
            continue
        k, n = (int(size) for size in weight.shape)
        blocks, scales = blockwise_8bit(weight)
        added += [Tensor(f"{name}.q8", blocks), Tensor(f"{name}.scales", scales)]
        nodes.append(Node("MatMulNBits", (node.inputs[0], f"{name}.q8", f"{name}.scales"), node.outputs,
                          name=f"{node.name}_q8", domain=MICROSOFT,
                          attributes=dict(K=k, N=n, bits=8, block_size=BLOCK, accuracy_level=4)))
        replaced.add(name)
    kept = tuple(initializer for initializer in graph.initializers if initializer.name not in replaced)
    opsets = model.opset_imports
    if not any(domain == MICROSOFT for domain, _ in opsets):
        opsets += ((MICROSOFT, 1),)
    return dataclasses.replace(model, opset_imports=opsets,
                               graph=dataclasses.replace(graph, nodes=tuple(nodes), initializers=kept + tuple(added)))


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
