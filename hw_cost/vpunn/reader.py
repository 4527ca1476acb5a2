"""Reader of `.vpunn` model files (FlatBuffers, schema `VPUNN_SCHEMA`, identifier "VPUN") and their forward pass.

The schema is small enough to read by hand with `flatbuffers.table.Table`; every offset is bounds-checked first
so a truncated or foreign file gives a one-line `VpunnError` instead of a struct error or garbage.
See docs/vpunn.md §1.
"""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import flatbuffers.util
from flatbuffers.table import Table
from numba import njit

from .errors import VpunnError

__all__ = ["FCLayer", "VpunnNetwork", "read_vpunn", "parse_model_name", "FILE_IDENTIFIER", "ACTIVATIONS"]

FILE_IDENTIFIER = b"VPUN"
#: Layer.activation_function codes
ACTIVATIONS = {0: "NOOP", 1: "RELU", 2: "SIGMOID"}
_ACTIVATION_CODES = {name: code for code, name in ACTIVATIONS.items()}
_RELU, _SIGMOID = _ACTIVATION_CODES["RELU"], _ACTIVATION_CODES["SIGMOID"]
#: `VpunnNetwork.forward` runs up to this many rows in compiled code, more rows as BLAS GEMMs
SMALL_BATCH = 4
_UNION_TAGS = {0: "NONE", 1: "FullyConnectedLayer", 2: "L2NormalizationLayer", 3: "kNNLayer"}
_TENSOR_TYPES = {0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL",
                 7: "INT16", 8: "COMPLEX64", 9: "INT8", 10: "FLOAT64", 11: "COMPLEX128", 12: "UINT64", 15: "UINT32"}


@dataclass(frozen=True)
class FCLayer:
    """y = act(x @ weight.T + bias), float32; `weight` is (out, in)."""

    name: str
    weight: np.ndarray
    bias: np.ndarray | None
    activation: str

    @property
    def n_in(self) -> int:
        return self.weight.shape[1]

    @property
    def n_out(self) -> int:
        return self.weight.shape[0]


def parse_model_name(name: str) -> tuple[int, int]:
    """(input interface version, output interface version) from a model name such as "VPUNN-11-02 $nick$".

    A part is read like C `stoi` (leading digits); a missing part is 1; an empty name is version 0 ("latest").
    """
    if name == "":
        return 0, 0
    parts = name.split("-")

    def version(i: int) -> int:
        if i >= len(parts):
            return 1
        m = re.match(r"\s*([+-]?\d+)", parts[i])
        if m is None:
            raise VpunnError(f"model name {name!r}: version part {parts[i]!r} is not a number")
        return int(m.group(1))

    return version(1), version(2)


class _Reader:
    """Bounds-checked access to the FlatBuffers tables of one file."""

    def __init__(self, buf: bytes, source: str):
        self.buf, self.source = buf, source

    def fail(self, what: str):
        raise VpunnError(f"{self.source}: not a valid VPUNN model file ({what}; the file may be truncated "
                         f"or not a .vpunn file)")

    def _check(self, pos: int, size: int, what: str) -> None:
        if pos < 0 or size < 0 or pos + size > len(self.buf):
            self.fail(f"{what} lies outside the {len(self.buf)}-byte file")

    def u32(self, pos: int, what: str) -> int:
        self._check(pos, 4, what)
        return struct.unpack_from("<I", self.buf, pos)[0]

    def table(self, pos: int, what: str) -> Table:
        self._check(pos, 4, what)
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        self._check(vtable, 4, f"{what} vtable")
        vt_len = struct.unpack_from("<H", self.buf, vtable)[0]
        self._check(vtable, max(vt_len, 4), f"{what} vtable")
        return Table(self.buf, pos)

    def field_pos(self, t: Table, slot: int, what: str) -> int | None:
        off = t.Offset(4 + 2 * slot)
        if off == 0:
            return None
        return t.Pos + off

    def scalar(self, t: Table, slot: int, fmt: str, default, what: str):
        pos = self.field_pos(t, slot, what)
        if pos is None:
            return default
        self._check(pos, struct.calcsize(fmt), what)
        return struct.unpack_from("<" + fmt, self.buf, pos)[0]

    def vector_bounds(self, t: Table, slot: int, elem_size: int, what: str) -> tuple[int, int] | None:
        pos = self.field_pos(t, slot, what)
        if pos is None:
            return None
        start = pos + self.u32(pos, what)
        length = self.u32(start, f"{what} length")
        self._check(start + 4, length * elem_size, what)
        return start + 4, length

    def string(self, t: Table, slot: int, what: str) -> str:
        vec = self.vector_bounds(t, slot, 1, what)
        if vec is None:
            return ""
        start, length = vec
        try:
            return self.buf[start:start + length].decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not UTF-8 text")

    def numbers(self, t: Table, slot: int, dtype: str, what: str) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        vec = self.vector_bounds(t, slot, dt.itemsize, what)
        if vec is None:
            return np.zeros(0, dt)
        start, length = vec
        return np.frombuffer(self.buf, dtype=dt, count=length, offset=start).copy()

    def tables(self, t: Table, slot: int, what: str) -> list[Table]:
        vec = self.vector_bounds(t, slot, 4, what)
        if vec is None:
            return []
        start, length = vec
        return [self.table(start + 4 * i + self.u32(start + 4 * i, what), f"{what}[{i}]") for i in range(length)]


@dataclass(frozen=True)
class VpunnNetwork:
    """A parsed `.vpunn` file: its name, interface versions and fully connected layers, runnable in numpy.

    Args:
        name: `Model.name`, e.g. "VPUNN-11-02".
        input_version / output_version: interface versions parsed from the name.
        layers: the operators in stored order (a chain from the model input to the model output).
        source: the file it was read from (for messages).
    """

    name: str
    input_version: int
    output_version: int
    layers: tuple[FCLayer, ...]
    source: str = ""

    @property
    def input_size(self) -> int:
        return self.layers[0].n_in

    @property
    def n_params(self) -> int:
        return sum(lay.weight.size + (0 if lay.bias is None else lay.bias.size) for lay in self.layers)

    def __post_init__(self):
        # the transposed weights (in, out) of every layer, one after the other in one buffer: x @ W.T is one BLAS
        # call per layer on a view, and `_forward_rows` reads the buffer itself
        flat = np.concatenate([lay.weight.T.ravel() for lay in self.layers]).astype(np.float32)
        ends = np.cumsum([lay.weight.size for lay in self.layers])
        object.__setattr__(self, "_wt", tuple(flat[end - lay.weight.size:end].reshape(lay.n_in, lay.n_out)
                                              for lay, end in zip(self.layers, ends)))
        biases = np.concatenate([np.zeros(lay.n_out, np.float32) if lay.bias is None else lay.bias
                                 for lay in self.layers]).astype(np.float32)
        shapes = np.array([(lay.n_in, lay.n_out) for lay in self.layers], dtype=np.int64)
        activations = np.array([_ACTIVATION_CODES[lay.activation] for lay in self.layers], dtype=np.int64)
        object.__setattr__(self, "_packed", (flat, biases, shapes, activations))

    def forward(self, x: np.ndarray, chunk: int = 1024, threads: int | None = None) -> np.ndarray:
        """NN values (float32, shape (n,)) for descriptors `x` of shape (n, input_size).

        Up to `SMALL_BATCH` rows run in compiled code (`_forward_rows`), more as BLAS GEMMs in chunks of `chunk`
        (1024 kept the intermediates in cache and ran fastest here); `threads` limits the BLAS threads for the
        call (None leaves the library's setting). The two sum in different orders: their values can differ in
        the last float32 bits.
        """
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise VpunnError(f"{self.source}: descriptors of width {x.shape[-1]} given to a network that takes "
                             f"{self.input_size}")
        if len(x) <= SMALL_BATCH:
            return _forward_rows(np.ascontiguousarray(x), *self._packed)
        if threads is not None and len(x) >= 64:
            with _blas_threads(threads):
                return self._forward(x, chunk)
        return self._forward(x, chunk)

    def _forward(self, x: np.ndarray, chunk: int) -> np.ndarray:
        out = np.empty(len(x), dtype=np.float32)
        for start in range(0, len(x), chunk):
            h = x[start:start + chunk]
            for lay, wt in zip(self.layers, self._wt):
                h = h @ wt
                if lay.bias is not None:
                    h += lay.bias
                if lay.activation == "RELU":
                    np.maximum(h, 0, out=h)
                elif lay.activation == "SIGMOID":
                    h = (1.0 / (1.0 + np.exp(-h))).astype(np.float32)
            out[start:start + chunk] = h[:, 0]
        return out


@njit(cache=True)
def _forward_rows(x, weights, biases, shapes, activations):
    """`VpunnNetwork.forward` of a few rows (the arrays of `VpunnNetwork._packed`).

    Each layer adds the input-scaled rows of its transposed weights: the inner loop runs over the outputs, so it
    vectorises without reordering any float sum; a zero input (ReLU output, one-hot slot) adds nothing and is
    skipped.
    """
    width = shapes.max()
    h, acc = np.empty(width, np.float32), np.empty(width, np.float32)
    out = np.empty(len(x), np.float32)
    for r in range(len(x)):
        h[:shapes[0, 0]] = x[r]
        w_at = b_at = 0
        for layer in range(len(shapes)):
            n_in, n_out = shapes[layer, 0], shapes[layer, 1]
            acc[:n_out] = 0
            for k in range(n_in):
                h_k = h[k]
                if h_k != 0:
                    w = weights[w_at + k * n_out:w_at + (k + 1) * n_out]
                    for j in range(n_out):
                        acc[j] += h_k * w[j]
            for j in range(n_out):
                v = acc[j] + biases[b_at + j]
                if activations[layer] == _RELU and v < 0:
                    v = np.float32(0)
                elif activations[layer] == _SIGMOID:
                    v = np.float32(1) / (np.float32(1) + np.exp(-v))
                h[j] = v
            w_at += n_in * n_out
            b_at += n_out
        out[r] = h[0]
    return out


@functools.lru_cache(maxsize=1)
def _blas_controller():
    """threadpoolctl's controller of the loaded BLAS libraries (built once: inspecting them is slow)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_threads(n: int):
    """A context limiting numpy's BLAS to n threads."""
    return _blas_controller().limit(limits=n, user_api="blas")


def read_vpunn(path) -> VpunnNetwork:
    """Parse a `.vpunn` file. Raises VpunnError for a missing, truncated or foreign file or unsupported content."""
    path = Path(path)
    try:
        buf = path.read_bytes()
    except FileNotFoundError:
        raise VpunnError(f"VPUNN model file not found: {path}") from None
    except IsADirectoryError:
        raise VpunnError(f"VPUNN model file {path} is a directory") from None
    return parse_vpunn(buf, source=str(path))


def parse_vpunn(buf: bytes, source: str = "<bytes>") -> VpunnNetwork:
    r = _Reader(bytes(buf), source)
    if len(buf) < 8:
        r.fail(f"only {len(buf)} bytes")
    ident = bytes(flatbuffers.util.GetBufferIdentifier(buf, 0))
    if ident != FILE_IDENTIFIER:
        raise VpunnError(f"{source}: not a VPUNN model file (file identifier {ident!r}, expected "
                         f"{FILE_IDENTIFIER!r})")
    root = r.table(r.u32(0, "root offset"), "Model")
    name = r.string(root, 0, "Model.name")
    try:
        model_name = name.split(" $")[0]
        input_version, output_version = parse_model_name(model_name)
    except VpunnError as exc:
        raise VpunnError(f"{source}: {exc}") from None
    tensors = r.tables(root, 1, "Model.tensors")
    inputs = r.numbers(root, 2, "i4", "Model.inputs")
    outputs = r.numbers(root, 3, "i4", "Model.outputs")
    operators = r.tables(root, 4, "Model.operators")
    buffers = r.tables(root, 5, "Model.buffers")
    for i, b in enumerate(buffers):  # bounds of every buffer, the unused sentinel too: catches truncation
        r.vector_bounds(b, 0, 1, f"Buffer {i}")
    if len(inputs) != 1 or len(outputs) != 1:
        r.fail(f"the model has {len(inputs)} inputs and {len(outputs)} outputs, expected one of each")
    if not operators:
        r.fail("the model has no layers")

    def tensor(i: int, what: str) -> tuple[str, np.ndarray, int, int]:
        if not 0 <= i < len(tensors):
            r.fail(f"{what} refers to tensor {i} of {len(tensors)}")
        t = tensors[i]
        return (r.string(t, 0, "Tensor.name"), r.numbers(t, 1, "u4", "Tensor.shape"),
                r.scalar(t, 2, "b", 0, "Tensor.type"), r.scalar(t, 3, "I", 0, "Tensor.buffer"))

    def constant(i: int, what: str) -> np.ndarray:
        tname, shape, ttype, bidx = tensor(i, what)
        if ttype != 0:
            raise VpunnError(f"{source}: tensor {tname!r} has type {_TENSOR_TYPES.get(ttype, ttype)}; only FLOAT32 "
                             "weights are implemented")
        if bidx == 0 or bidx >= len(buffers):
            r.fail(f"tensor {tname!r} has no weight buffer (buffer index {bidx} of {len(buffers)})")
        raw = r.numbers(buffers[bidx], 0, "u1", f"Buffer {bidx}")  # [ubyte]: little-endian float32 data
        if raw.size % 4:
            r.fail(f"buffer {bidx} holds {raw.size} bytes, not whole float32 values")
        data = raw.view("<f4").astype(np.float32)
        if data.size != int(np.prod(shape, dtype=np.int64)):
            r.fail(f"tensor {tname!r} of shape {shape.tolist()} has {data.size} floats")
        return data.reshape(shape) if shape.size else data

    layers = []
    current = int(inputs[0])
    _, in_shape, _, in_buffer = tensor(current, "Model.inputs")
    if in_buffer != 0 or len(in_shape) != 2:
        r.fail(f"the model input has shape {in_shape.tolist()}, expected [1, D]")
    for j, op in enumerate(operators):
        lname = r.string(op, 0, "Layer.name") or f"layer {j}"
        tag = r.scalar(op, 3, "B", 0, "Layer.implementation_type")
        if tag != 1:
            raise VpunnError(f"{source}: layer {lname!r} is a {_UNION_TAGS.get(tag, f'type {tag}')}; only "
                             "FullyConnectedLayer is implemented")
        act_code = r.scalar(op, 5, "i", 0, "Layer.activation_function")
        if act_code not in ACTIVATIONS:
            r.fail(f"layer {lname!r} has unknown activation code {act_code}")
        op_in = r.numbers(op, 1, "i4", "Layer.inputs")
        op_out = r.numbers(op, 2, "i4", "Layer.outputs")
        if len(op_in) not in (2, 3) or len(op_out) != 1:
            r.fail(f"layer {lname!r} has {len(op_in)} inputs and {len(op_out)} outputs")
        if int(op_in[0]) != current:
            raise VpunnError(f"{source}: layer {lname!r} does not continue the chain of layers; only sequential "
                             "networks are implemented")
        weight_t = constant(int(op_in[1]), f"layer {lname!r} weight")
        if weight_t.ndim != 2:
            r.fail(f"layer {lname!r} weight has shape {list(weight_t.shape)}")
        n_in, n_out = weight_t.shape  # stored shape reads [in, out], the data is row-major [out][in]
        weight = weight_t.reshape(n_out, n_in)
        bias = constant(int(op_in[2]), f"layer {lname!r} bias").reshape(-1) if len(op_in) == 3 else None
        if bias is not None and bias.size != n_out:
            r.fail(f"layer {lname!r} bias has {bias.size} values for {n_out} outputs")
        if layers and layers[-1].n_out != n_in:
            r.fail(f"layer {lname!r} takes {n_in} values but the previous layer gives {layers[-1].n_out}")
        layers.append(FCLayer(lname, weight, bias, ACTIVATIONS[act_code]))
        current = int(op_out[0])
    if current != int(outputs[0]):
        r.fail("the last layer does not produce the model output")
    if layers[0].n_in != int(in_shape[-1]) or layers[-1].n_out != 1:
        r.fail(f"the network maps {layers[0].n_in} inputs to {layers[-1].n_out} outputs, expected "
               f"{int(in_shape[-1])} to 1")
    return VpunnNetwork(name=name, input_version=input_version, output_version=output_version,
                        layers=tuple(layers), source=source)

