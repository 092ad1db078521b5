"""The model's bytes are written without the `onnx` package (embedding/onnx_proto.py): onnx's own parser and
checker accept them for the float32 and the int8 graph and read back every node, attribute, initializer
and type the model holds; and the engine builds and runs its model where `onnx` cannot be imported.

onnx is in the `test` extra for these checks only; without it the parser's tests skip, unless
KB_TEST_REQUIRE_ALL=1 (CI), which makes them fail.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb_bridge.local_engine.embedding import onnx_int8, onnx_proto
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, make_embedder
from kb_bridge.local_engine.embedding.onnx_graph import build_model
from kb_bridge.local_engine.embedding.onnx_proto import FLOAT16, INT64, Graph, Model, Node, Tensor, ValueInfo
from kb_bridge.local_engine.embedding.runtime import installed_runtimes

from .test_engine_onnx import TEXTS

REPO = Path(__file__).resolve().parents[2]
needs_model = pytest.mark.skipif(bundled_model_dir() is None or not installed_runtimes().onnx,
                                 reason="needs the model and the ONNX runtime (kb-bridge[engine])")


def require_onnx() -> Any:
    if importlib.util.find_spec("onnx") is None:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("onnx is required to check the written model (pip install -e '.[engine,test]')")
        pytest.skip("needs the onnx package (the `test` extra) to parse the written model")
    import onnx

    return onnx


@pytest.fixture(scope="module")
def float32_model() -> Model:
    model_dir = bundled_model_dir()
    assert model_dir is not None
    return build_model(model_dir)


def parsed(model: Model) -> Any:
    """`model`'s bytes as onnx reads them; onnx writes them back byte for byte (nothing it did not
    understand, no field out of protobuf's order)."""
    onnx = require_onnx()
    data = model.serialized()
    proto = onnx.load_from_string(data)
    assert proto.SerializeToString() == data
    return proto


def attribute_values(node: Node) -> dict[str, Any]:
    """The attributes as onnx reads them back: a float attribute is a float32."""
    def read(value: Any) -> Any:
        if isinstance(value, float):
            return float(np.float32(value))
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, (list, tuple)):
            return [read(item) for item in value]
        return value

    return {name: read(value) for name, value in node.attributes.items()}


def assert_holds(proto: Any, model: Model) -> None:
    """Every part of `model` is in `proto`, and nothing else."""
    from onnx import helper, numpy_helper

    assert (proto.ir_version, proto.producer_name) == (model.ir_version, model.producer)
    assert [(opset.domain, opset.version) for opset in proto.opset_import] == list(model.opset_imports)
    graph = proto.graph
    assert graph.name == model.graph.name
    assert len(graph.node) == len(model.graph.nodes)
    for written, node in zip(graph.node, model.graph.nodes, strict=True):
        assert (written.op_type, written.name, written.domain) == (node.op_type, node.name, node.domain)
        assert (tuple(written.input), tuple(written.output)) == (node.inputs, node.outputs)
        assert {attribute.name: helper.get_attribute_value(attribute) for attribute in written.attribute} == \
            attribute_values(node)
    assert [tensor.name for tensor in graph.initializer] == [tensor.name for tensor in model.graph.initializers]
    for written_tensor, tensor in zip(graph.initializer, model.graph.initializers, strict=True):
        value = numpy_helper.to_array(written_tensor)
        assert list(written_tensor.dims) == list(tensor.array.shape) and written_tensor.data_type == tensor.data_type
        assert value.dtype == np.dtype(tensor.array.dtype.name), tensor.name  # onnx reads native byte order
        assert np.array_equal(value, tensor.array), tensor.name
    for written_values, values in ((graph.input, model.graph.inputs), (graph.output, model.graph.outputs)):
        assert [(value.name, value.type.tensor_type.elem_type,
                 tuple(dim.dim_param or dim.dim_value for dim in value.type.tensor_type.shape.dim))
                for value in written_values] == [(value.name, value.elem_type, value.dims) for value in values]


@needs_model
def test_the_float32_model_passes_onnxs_full_check_and_holds_every_value(float32_model: Model) -> None:
    onnx = require_onnx()
    proto = parsed(float32_model)
    onnx.checker.check_model(proto, full_check=True)  # every node against its schema, types and shapes inferred
    assert_holds(proto, float32_model)
    operators = collections.Counter(node.op_type for node in proto.graph.node)
    assert operators["LayerNormalization"] == 1 + 2 * 6 and operators["Erf"] == 6 and operators["Softmax"] == 6
    assert operators["MatMul"] == 6 * 6 + 2 * 6  # six dense layers and two attention products per layer


@needs_model
def test_the_int8_model_parses_checks_and_holds_every_value(float32_model: Model) -> None:
    onnx = require_onnx()
    model = onnx_int8.quantised(float32_model)
    proto = parsed(model)
    # MatMulNBits is onnxruntime's (com.microsoft): onnx's checker has no schema for it and passes it over,
    # so its structure is checked here; that onnxruntime runs it is test_engine_onnx_int8.py's.
    onnx.checker.check_model(proto, full_check=True)
    assert_holds(proto, model)
    weights = {tensor.name: tensor.array for tensor in float32_model.graph.initializers}
    initializers = {tensor.name: tensor for tensor in proto.graph.initializer}
    quantised = [node for node in proto.graph.node if node.op_type == "MatMulNBits"]
    assert len(quantised) == 6 * 6 and all(node.domain == onnx_int8.MICROSOFT for node in quantised)
    assert ("com.microsoft", 1) in [(opset.domain, opset.version) for opset in proto.opset_import]
    for node in quantised:
        source = node.input[1].removesuffix(".q8")
        k, n = weights[source].shape
        attributes = {attribute.name: attribute.i for attribute in node.attribute}
        assert attributes == {"K": k, "N": n, "bits": 8, "block_size": onnx_int8.BLOCK, "accuracy_level": 4}
        assert node.input[2] == f"{source}.scales" and source not in initializers  # the float32 weight is gone
        blocks, scales = initializers[node.input[1]], initializers[node.input[2]]
        assert (list(blocks.dims), blocks.data_type) == ([n, k // onnx_int8.BLOCK, onnx_int8.BLOCK],
                                                         onnx.TensorProto.UINT8)
        assert (list(scales.dims), scales.data_type) == ([n * k // onnx_int8.BLOCK], onnx.TensorProto.FLOAT)
    assert len(proto.graph.node) == len(float32_model.graph.nodes)


def written_by_onnx(model: Model) -> bytes:
    """`model` made with onnx.helper as onnx_graph.py and onnx_int8.py made it before onnx_proto.py, and
    serialised by protobuf."""
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node(node.op_type, list(node.inputs), list(node.outputs), name=node.name,
                          domain=node.domain or None, **node.attributes) for node in model.graph.nodes],
        model.graph.name,
        inputs=[helper.make_tensor_value_info(value.name, value.elem_type, list(value.dims))
                for value in model.graph.inputs],
        outputs=[helper.make_tensor_value_info(value.name, value.elem_type, list(value.dims))
                 for value in model.graph.outputs],
        initializer=[numpy_helper.from_array(tensor.array, tensor.name) for tensor in model.graph.initializers],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)
                                                    for domain, version in model.opset_imports],
                              producer_name=model.producer)
    proto.ir_version = model.ir_version
    return bytes(proto.SerializeToString())


@needs_model
def test_the_bytes_are_the_ones_onnx_writes_for_the_same_model(float32_model: Model) -> None:
    require_onnx()
    model_dir = bundled_model_dir()
    assert model_dir is not None
    ranges = onnx_int8.load_ranges(model_dir)
    for model in (float32_model, onnx_int8.quantised(float32_model),
                  onnx_int8.quantised(float32_model, "smoothed", ranges)):  # int8 tensors, DynamicQuantizeMatMul
        assert model.serialized() == written_by_onnx(model)


def test_every_kind_of_value_is_written_as_onnx_reads_it() -> None:
    """The cases the model itself does not have: string and float-list attributes, a float16 and a 0-d
    tensor, a big-endian and a non-contiguous array, large and negative ints, names beyond ASCII."""
    onnx = require_onnx()
    from onnx import numpy_helper

    weight = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not C-contiguous
    node = Node("Custom", ("x", "wé"), ("y",), name="n", domain="example.domain",
                attributes={"s": "sé", "f": 0.1, "fs": [1.5, -2.0, 3], "i": -(2 ** 63), "is": (2 ** 40, -1, 0)})
    model = Model(
        Graph("g", (node,), (Tensor("wé", weight), Tensor("h", np.array([1.5, -0.25], dtype=np.float16)),
                             Tensor("big", np.array([1, -2, 2 ** 62], dtype=">i8")),
                             Tensor("scalar", np.array(7, dtype=np.int64)),
                             Tensor("bytes", np.array([0, 255], dtype=np.uint8))),
              inputs=(ValueInfo("x", FLOAT16, ("batch", 4)),), outputs=(ValueInfo("y", INT64, (0,)),)),
        opset_imports=(("", 17), ("example.domain", 3)), ir_version=8, producer="test")
    proto = parsed(model)
    assert_holds(proto, model)
    assert np.array_equal(numpy_helper.to_array(proto.graph.initializer[2]), [1, -2, 2 ** 62])
    assert proto.graph.node[0].attribute[0].name == "f"  # in name order, as onnx.helper writes them
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_the_data_type_numbers_are_onnxs() -> None:
    onnx = require_onnx()
    assert (onnx_proto.FLOAT, onnx_proto.UINT8, onnx_proto.INT8, onnx_proto.INT64, onnx_proto.FLOAT16) == (
        onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.INT64,
        onnx.TensorProto.FLOAT16)


@pytest.mark.parametrize("value", [True, [], [np.int64(3)], np.int64(3), [1, "a"], None])
def test_an_attribute_onnx_has_no_type_for_is_refused(value: Any) -> None:
    model = Model(Graph("g", (Node("Op", (), (), name="n", attributes={"a": value}),), (), (), ()), (), 8, "")
    with pytest.raises(ValueError, match="attribute a"):
        model.serialized()


def test_a_tensor_type_it_does_not_write_is_refused() -> None:
    model = Model(Graph("g", (), (Tensor("w", np.zeros(2, dtype=np.float64)),), (), ()), (), 8, "")
    with pytest.raises(ValueError, match="initializer w: no ONNX data type written for float64"):
        model.serialized()


_WITHOUT_ONNX = """
import importlib.util, json, sys
sys.modules["onnx"] = None  # as if not installed: `import onnx` fails and find_spec finds nothing
from kb_bridge.local_engine.embedding.embedder import MODEL_NAME, bundled_model_dir, make_embedder
from kb_bridge.local_engine.embedding.runtime import installed_runtimes, select_runtime
assert importlib.util.find_spec("onnx") is None
assert installed_runtimes().onnx, "the ONNX runtime is reported missing without the onnx package"
assert select_runtime("auto", "cpu", installed_runtimes()) == ("onnx", "cpu")
embedder = make_embedder("onnx", bundled_model_dir(), batch_size=16, query_precision="float32", query_threads=1,
                         device="cpu", document_precision="int8", document_workers=1)
documents = embedder.embed_documents(json.loads(sys.argv[1]))
assert sys.modules["onnx"] is None and not [name for name in sys.modules if name.startswith("onnx.")]
print(json.dumps({"runtime": embedder.runtime, "documents": embedder.document_precision,
                  "query": embedder.embed_query(sys.argv[2]).tolist(), "document": documents.tolist()}))
"""


@needs_model
def test_the_engine_builds_and_runs_its_model_without_the_onnx_package() -> None:
    """In a process where onnx cannot be imported: the runtime is there, the float32 and the int8 graph are
    written and run, and the vectors are this process's."""
    texts = TEXTS[:6]
    query = "how do I rotate the API keys of the staging cluster?"
    result = subprocess.run([sys.executable, "-c", _WITHOUT_ONNX, json.dumps(texts), query],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert (found["runtime"], found["documents"]) == ("onnx", "int8")
    model_dir = bundled_model_dir()
    assert model_dir is not None
    here = make_embedder("onnx", model_dir, batch_size=16, query_precision="float32", query_threads=1,
                         device="cpu", document_precision="int8", document_workers=1)
    for theirs, ours in ((np.array([found["query"]]), here.embed_query(query)[None]),
                         (np.array(found["document"]), here.embed_documents(texts))):
        assert theirs.shape == ours.shape and theirs.shape[1] == 384
        assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)
        assert np.sum(theirs * ours, axis=1).min() >= 0.99999
