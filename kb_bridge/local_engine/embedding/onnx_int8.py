"""The float32 graph with 8-bit weights, in one of two forms, chosen by what the CPU multiplies natively.

**smoothed** (where the CPU has 8-bit dot-product instructions: VNNI on x86, any 64-bit ARM): the dense
layers but the feed-forward output ones become onnxruntime's DynamicQuantizeMatMul: int8 weights with one
scale per output column, the input quantised to uint8 at each call with one scale for the whole call
(which is why the engine runs one text per call: onnx_embedder.py), multiplied by MLAS's integer GEMM
(VNNI does four multiply-adds per instruction). One scale per call loses vectors to the few input channels
with large values (a cosine of 0.986 to float32 over 600 SciFact texts), so those inputs are first smoothed
as SmoothQuant does (Xiao et al., 2023): input channel j is divided by s_j and weight row j multiplied by
it, which leaves the product unchanged and moves the channel's range into the weights:

    s_j = a_j ** 0.5 / w_j ** 0.5

a_j is the channel's largest absolute value over a fixed set of texts (model/activation_ranges.safetensors,
written by bench/activation_ranges.py from this repository's own documentation, not from any benchmark's
texts), w_j the largest absolute weight in row j of the dense layers reading that input (Q, K and V share
one s). The division is one elementwise Mul per input. The feed-forward output layers read GELU's output,
whose outliers no smoothing tamed (alpha 0.3 to 0.9 tried; 0.7 held SciFact at 0.995 but left a text such as
"?!" at 0.986), so they stay blockwise (below), whose per-block input scales follow each token. Lowest cosine
to float32: 0.9985 over 600 SciFact texts, 0.994 over the test suite's 20 odd ones; about 2 times float32's
speed where all blockwise gives 1.4 (docs/benchmarks.md "Runtimes and number formats").

**blockwise** (elsewhere, and where the ranges file is missing): MatMulNBits, weights in blocks of `BLOCK`
values along the input dimension, each block with its own scale (symmetric: scale = max |w| / 127, stored
as w / scale + 128 in a uint8, MatMulNBits' default zero point); `accuracy_level=4` quantises each call's
input in blocks too. Lowest cosine 0.998, but MLAS's 8-bit block kernels do not reach its integer GEMM's
speed. It stays for CPUs without 8-bit dot products, where the integer GEMM's 16-bit intermediate sums can
saturate on outliers (onnxruntime's quantisation guide); the calibration at start (onnx_precision.py)
still checks whichever form is built.

Both are made here with numpy in about 0.1 s. Left in float32: the attention's own products (Q·Kᵀ,
softmax·V), the embedding tables (a Gather), layer norms and pooling.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .onnx_proto import Model, Node, Tensor

if TYPE_CHECKING:
    import numpy as np

FORMS = ("smoothed", "blockwise")
BLOCK = 128
MICROSOFT = "com.microsoft"
RANGES_FILE = "activation_ranges.safetensors"
ALPHA = 0.5  # SmoothQuant's migration strength (the module's docstring)
_ZERO_POINT = 128  # MatMulNBits' zero point for 8 bits when none is given
# s is kept within these bounds so that a channel that is (nearly) always 0 cannot blow a weight row up.
_SMOOTHING_BOUNDS = (1e-3, 1e3)
# /proc/cpuinfo flags of x86's 8-bit dot products (AVX512-VNNI, and AVX-VNNI on CPUs without AVX-512).
_X86_DOT_PRODUCT = frozenset({"avx512_vnni", "avx_vnni"})


def form_for_cpu(machine: str, flags: frozenset[str]) -> str:
    """"smoothed" where the CPU has 8-bit dot products, else "blockwise" (see the module's docstring)."""
    machine = machine.lower()
    if machine in ("arm64", "aarch64"):
        return "smoothed"  # ARMv8.2's SDOT/UDOT, which onnxruntime's integer GEMM uses where present
    if machine in ("x86_64", "amd64") and flags & _X86_DOT_PRODUCT:
        return "smoothed"
    return "blockwise"


def cpu_form() -> str:
    """form_for_cpu for this machine (no /proc/cpuinfo, as on macOS or Windows: no x86 flags known)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return form_for_cpu(platform.machine(), frozenset(flags))


def load_ranges(model_dir: Path) -> dict[str, np.ndarray] | None:
    """The input ranges the smoothed form needs, by dense weight name; None when the model has none."""
    path = model_dir / RANGES_FILE
    if not path.is_file():
        return None
    from safetensors.numpy import load_file

    return dict(load_file(str(path)))


def int8_model(float32: Model, model_dir: Path, form: str | None = None) -> tuple[Model, str]:
    """`float32` with 8-bit weights, and the form they are in: `form`, or this CPU's (`cpu_form`); the smoothed
    form needs the model folder's ranges file, and a folder without one gets the blockwise form."""
    ranges = load_ranges(model_dir)
    chosen = form or cpu_form()
    if chosen == "smoothed" and ranges is None:
        chosen = "blockwise"
    return quantised(float32, chosen, ranges), chosen


def quantised(model: Model, form: str = "blockwise", ranges: Mapping[str, np.ndarray] | None = None) -> Model:
    """A copy of `model` whose MatMuls by a 2-D weight (every dense layer) run with 8-bit weights in `form`.
    The arrays it keeps are shared with `model`, not copied (neither is ever written to)."""
    if form not in FORMS:
        raise ValueError(f"int8 form {form!r} is not one of {', '.join(FORMS)}")
    graph = model.graph
    weights = {initializer.name: initializer.array for initializer in graph.initializers}
    dense = [node for node in graph.nodes if dense_weight(node, weights) is not None]
    if form == "smoothed":
        dense = [node for node in dense if not is_feed_forward_output(node.inputs[1])]
        missing = sorted({node.inputs[1] for node in dense} - set(ranges or {}))
        if missing:
            raise ValueError(f"{RANGES_FILE} has no range for {missing[0]} (and {len(missing) - 1} more)")
        assert ranges is not None
        smoothing = _smoothing(dense, weights, ranges)
    replaced: set[str] = set()
    added: list[Tensor] = []
    nodes: list[Node] = []
    divided: dict[str, str] = {}  # an input's name -> its smoothed copy's (one Mul per input)
    for node in graph.nodes:
        weight = dense_weight(node, weights)
        if weight is None:
            nodes.append(node)
            continue
        name, source = node.inputs[1], node.inputs[0]
        replaced.add(name)
        if form == "blockwise" or is_feed_forward_output(name):
            k, n = (int(size) for size in weight.shape)
            blocks, scales = blockwise_8bit(weight)
            added += [Tensor(f"{name}.q8", blocks), Tensor(f"{name}.scales", scales)]
            nodes.append(Node("MatMulNBits", (source, f"{name}.q8", f"{name}.scales"), node.outputs,
                              name=f"{node.name}_q8", domain=MICROSOFT,
                              attributes=dict(K=k, N=n, bits=8, block_size=BLOCK, accuracy_level=4)))
            continue
        factors = smoothing[source]
        if source not in divided:
            divided[source] = f"{source}.smoothed"
            added.append(Tensor(f"{source}.inverse_smoothing", (1.0 / factors).astype(factors.dtype)))
            nodes.append(Node("Mul", (source, f"{source}.inverse_smoothing"), (divided[source],),
                              name=f"{node.name}_smoothing"))
        values, scales = columnwise_8bit(weight * factors[:, None])
        added += [Tensor(f"{name}.i8", values), Tensor(f"{name}.scales", scales)]
        nodes.append(Node("DynamicQuantizeMatMul", (divided[source], f"{name}.i8", f"{name}.scales"), node.outputs,
                          name=f"{node.name}_i8", domain=MICROSOFT))
    kept = tuple(initializer for initializer in graph.initializers if initializer.name not in replaced)
    opsets = model.opset_imports
    if not any(domain == MICROSOFT for domain, _ in opsets):
        opsets += ((MICROSOFT, 1),)
    return dataclasses.replace(model, opset_imports=opsets,
                               graph=dataclasses.replace(graph, nodes=tuple(nodes), initializers=kept + tuple(added)))


def is_feed_forward_output(weight_name: str) -> bool:
    """A BERT layer's second feed-forward layer (onnx_graph.py's names), whose input is GELU's output."""
    return weight_name.endswith(".output.dense.weight") and ".attention." not in weight_name


def dense_weight(node: Node, weights: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The [K, N] weight `node` multiplies by when it is a dense layer 8 bits can take (a MatMul by a 2-D
    initializer whose K is a whole number of blocks); None for any other node."""
    name = node.inputs[1] if node.op_type == "MatMul" and len(node.inputs) == 2 else ""
    weight = weights.get(name)
    if weight is None or weight.ndim != 2 or weight.shape[0] % BLOCK:
        return None
    return weight


def _smoothing(dense: list[Node], weights: Mapping[str, np.ndarray],
               ranges: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each smoothed input's s (see the module's docstring), shared by every layer that reads the input."""
    import numpy as np

    readers: dict[str, list[str]] = {}
    for node in dense:
        readers.setdefault(node.inputs[0], []).append(node.inputs[1])
    smoothing = {}
    for source, names in readers.items():
        activation = np.max([np.asarray(ranges[name], dtype=np.float32) for name in names], axis=0)
        weight = np.max([np.abs(weights[name]).max(axis=1) for name in names], axis=0)
        factors = np.power(np.maximum(activation, 1e-12), ALPHA) / np.power(np.maximum(weight, 1e-12), 1 - ALPHA)
        smoothing[source] = np.clip(factors, *_SMOOTHING_BOUNDS).astype(np.float32)
    return smoothing


def columnwise_8bit(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DynamicQuantizeMatMul's layout for a [K, N] weight: (int8 [K, N], float32 scales [N]), with
    weight[k, n] ≈ values[k, n] * scales[n] (symmetric, so no zero point)."""
    import numpy as np

    scales = np.abs(weight).max(axis=0) / 127.0
    scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
    values = np.clip(np.rint(weight / scales), -127, 127)
    return values.astype(np.int8), scales


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
