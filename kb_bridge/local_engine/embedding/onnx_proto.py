"""An ONNX model as plain dataclasses, and its bytes: the protobuf wire format written directly.

The engine writes its graph at start (onnx_graph.py, onnx_int8.py) and hands onnxruntime the bytes
(onnx_embedder.py); nothing else reads a model. The `onnx` package (27 MB, and ml_dtypes) would be
installed for that alone, so the few messages the graph needs are spelled out here instead: a ModelProto
with one GraphProto of NodeProtos (string, int, float and list attributes), TensorProto initializers
(raw_data, little-endian), ValueInfoProto inputs and outputs of tensor type with named or fixed
dimensions, and OperatorSetIdProto imports. Nothing else of ONNX (functions, subgraphs, external data,
sparse tensors, doc strings) is written.

The field and enum numbers are onnx.proto's (checked against onnx 1.23.2's copy; ONNX keeps them stable so
that old models stay readable). Fields are written in field-number order, repeated scalars unpacked
(onnx.proto is proto2 and does not mark them packed), as protobuf's own serialiser writes them: the model's
bytes are the ones the `onnx` package wrote for it before, byte for byte, and onnx parses them and writes
back the same (tests/engine/test_engine_onnx_proto.py checks that, onnx's full check and every value).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# TensorProto.DataType
FLOAT = 1
UINT8 = 2
INT8 = 3
INT64 = 7
FLOAT16 = 10
_DATA_TYPES = {"float32": FLOAT, "uint8": UINT8, "int8": INT8, "int64": INT64, "float16": FLOAT16}

# AttributeProto.AttributeType
_ATTRIBUTE_FLOAT, _ATTRIBUTE_INT, _ATTRIBUTE_STRING, _ATTRIBUTE_FLOATS, _ATTRIBUTE_INTS = 1, 2, 3, 6, 7

# Wire types
_VARINT, _FIXED32, _LENGTH = 0, 5, 2

AttributeValue = int | float | str | Sequence[int] | Sequence[float]


@dataclasses.dataclass(frozen=True)
class Node:
    """A NodeProto: one operator call. `attributes` are written in name order, as onnx.helper does."""

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str
    domain: str = ""  # "" is the standard operators (ai.onnx)
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A TensorProto initializer: a name and its value (float32, float16, uint8, int8 or int64; 0-d for a scalar)."""

    name: str
    array: np.ndarray

    @property
    def data_type(self) -> int:
        try:
            return _DATA_TYPES[self.array.dtype.name]
        except KeyError:
            raise ValueError(f"initializer {self.name}: no ONNX data type written for {self.array.dtype}") from None


@dataclasses.dataclass(frozen=True)
class ValueInfo:
    """A graph input or output: a tensor of `elem_type` (FLOAT, INT64, ...), each dimension a fixed size or
    a symbolic name ("batch")."""

    name: str
    elem_type: int
    dims: tuple[int | str, ...]


@dataclasses.dataclass(frozen=True)
class Graph:
    name: str
    nodes: tuple[Node, ...]
    initializers: tuple[Tensor, ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]


@dataclasses.dataclass(frozen=True)
class Model:
    graph: Graph
    opset_imports: tuple[tuple[str, int], ...]  # (domain, version); "" is the standard operators
    ir_version: int
    producer: str

    def serialized(self) -> bytes:
        """The ModelProto's bytes, every initializer's value in them: onnxruntime refuses an initializer
        without its data even where the session is given the value (`add_initializer`, onnx_embedder.py)."""
        graph = _graph_parts(self.graph)
        parts = [_key(1, _VARINT), _varint(self.ir_version), _string(2, self.producer),
                 _key(7, _LENGTH), _varint(sum(len(part) for part in graph)), *graph]
        parts.extend(_message(8, _string(1, domain) + _int(2, version)) for domain, version in self.opset_imports)
        return b"".join(parts)


# --- the messages ---------------------------------------------------------------------------------------------

def _graph_parts(graph: Graph) -> list[bytes | memoryview]:
    """GraphProto as pieces: the weights' bytes are joined into the model's once, not copied per message."""
    parts: list[bytes | memoryview] = [_message(1, _node(node)) for node in graph.nodes]
    parts.append(_string(2, graph.name))
    for tensor in graph.initializers:
        header, data = _tensor(tensor)
        parts += [_key(5, _LENGTH), _varint(len(header) + len(data)), header, data]
    parts.extend(_message(11, _value_info(value)) for value in graph.inputs)
    parts.extend(_message(12, _value_info(value)) for value in graph.outputs)
    return parts


def _node(node: Node) -> bytes:
    parts = [_string(1, name) for name in node.inputs]
    parts += [_string(2, name) for name in node.outputs]
    parts += [_string(3, node.name), _string(4, node.op_type)]
    parts += [_message(5, _attribute(name, node.attributes[name])) for name in sorted(node.attributes)]
    if node.domain:
        parts.append(_string(7, node.domain))
    return b"".join(parts)


def _attribute(name: str, value: AttributeValue) -> bytes:
    head = _string(1, name)
    # bool is an int to Python and numpy's scalars are not ints: ONNX has neither, so both are refused
    # rather than written as something the caller may not have meant.
    if isinstance(value, str):
        return head + _string(4, value) + _int(20, _ATTRIBUTE_STRING)
    if isinstance(value, float):
        return head + _float(2, value) + _int(20, _ATTRIBUTE_FLOAT)
    if isinstance(value, int) and not isinstance(value, bool):
        return head + _int(3, value) + _int(20, _ATTRIBUTE_INT)
    items = list(value) if isinstance(value, (list, tuple)) else []
    if items and all(type(item) is int for item in items):
        return head + b"".join(_int(8, item) for item in items) + _int(20, _ATTRIBUTE_INTS)
    if items and all(isinstance(item, float) or type(item) is int for item in items):
        return head + b"".join(_float(7, float(item)) for item in items) + _int(20, _ATTRIBUTE_FLOATS)
    raise ValueError(f"attribute {name}: {value!r} is not an int, float, string or non-empty list of them")


def _tensor(tensor: Tensor) -> tuple[bytes, memoryview]:
    """(every field before raw_data, raw_data's key and length included; the raw bytes, little-endian)."""
    import numpy as np

    array = tensor.array
    header = b"".join([*(_int(1, size) for size in array.shape), _int(2, tensor.data_type), _string(8, tensor.name)])
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))  # a view where it already is
    data = little.reshape(-1).view(np.uint8).data
    return header + _key(9, _LENGTH) + _varint(len(data)), data


def _value_info(value: ValueInfo) -> bytes:
    dims = b"".join(_message(1, _string(2, size) if isinstance(size, str) else _int(1, size))
                    for size in value.dims)
    tensor_type = _int(1, value.elem_type) + _message(2, dims)
    return _string(1, value.name) + _message(2, _message(1, tensor_type))


# --- the wire format ------------------------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    """Base-128, low group first; a negative int64 as its 64-bit two's complement (ten bytes), as protobuf."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _int(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _float(field: int, value: float) -> bytes:
    return _key(field, _FIXED32) + struct.pack("<f", value)


def _string(field: int, value: str) -> bytes:
    return _message(field, value.encode("utf-8"))


def _message(field: int, body: bytes) -> bytes:
    return _key(field, _LENGTH) + _varint(len(body)) + body
