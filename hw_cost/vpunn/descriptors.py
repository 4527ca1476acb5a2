"""Workload -> NN input vector for DPU interfaces 10 (VPU 2.0 models), 11 (VPU 2.7 models), 4011 (VPU 4.0) and
5114 (NPU 5.x), compiled with numba (one row at a time, as sanitizer.py).

docs/vpunn.md §3. Values are raw numbers and one-hot blocks; enums are mapped by
*name* into each interface's own enum order, and a value the interface cannot name raises VpunnError (as the runtime
throws).
"""
from __future__ import annotations

from collections import namedtuple
from enum import IntEnum

import numpy as np
from numba import njit

from .enums import (DEV, ISI, LAYOUT, OP, SWZ, ActivationFunction, DataType, ExecutionMode, ISIStrategy, Layout,
                    Operation, Swizzling, VPUDevice)
from .errors import VpunnError
from .sanitizer import as_matrix, in_place_output, int_field, weight_channels, weight_dtype, weightless
from .workload import F

__all__ = ["encode", "first_unencodable", "UnencodableWorkload", "DESCRIPTOR_SIZES", "IMPLEMENTED_INTERFACES"]


DESCRIPTOR_SIZES = {10: 67, 11: 93, 4011: 93, 5114: 53}
IMPLEMENTED_INTERFACES = tuple(DESCRIPTOR_SIZES)

_DEVICES = ("VPU_2_0", "VPU_2_1", "VPU_2_7", "VPU_4_0")
_OPERATIONS = ("CONVOLUTION", "DW_CONVOLUTION", "ELTWISE", "MAXPOOL", "AVEPOOL", "CM_CONVOLUTION")
_DTYPES = ("UINT8", "INT8", "FLOAT16", "BFLOAT16")
_MODES_10 = ("VECTOR", "MATRIX", "VECTOR_FP16", "CUBOID_16x16", "CUBOID_8x16", "CUBOID_4x16")
_MODES_11 = ("CUBOID_16x16", "CUBOID_8x16", "CUBOID_4x16")
_ACTIVATIONS = ("NONE", "RELU", "LRELU", "ADD", "SUB", "MULT")
_SWIZZLINGS = ("KEY_0", "KEY_1", "KEY_2", "KEY_3", "KEY_4", "KEY_5")
_LAYOUTS_11 = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX", "INVALID")
_ISI = ("CLUSTERING", "SPLIT_OVER_H", "SPLIT_OVER_K")
_OPERATIONS_5114 = ("CONVOLUTION", "DW_CONVOLUTION", "ELTWISE", "ELTWISE_MUL", "MAXPOOL", "CM_CONVOLUTION",
                    "LAYER_NORM")
_DTYPES_5114 = ("UINT8", "FLOAT16", "HF8", "FLOAT32", "UINT4")
_D = DataType
# 5114's "logical" dtype map: every type becomes the trained type of its size and kind
_DTYPE_ALIASES_5114 = {_D.INT8: _D.UINT8, _D.UINT1: _D.UINT8, _D.INT1: _D.UINT8, _D.BFLOAT16: _D.FLOAT16,
                       _D.INT32: _D.FLOAT16, _D.BF8: _D.HF8, _D.INT4: _D.UINT4, _D.UINT2: _D.UINT4,
                       _D.INT2: _D.UINT4}
# operation mocks of the adapters (interface 4011 only knows the 2.7 operations)
_OP_ALIASES_11 = {Operation.AVEPOOL: Operation.DW_CONVOLUTION}
_OP_ALIASES_4011 = {**_OP_ALIASES_11, Operation.LAYER_NORM: Operation.ELTWISE, Operation.ELTWISE_MUL: Operation.ELTWISE}


def _name_map(enum_cls: type[IntEnum], names: tuple[str, ...], aliases: dict | None = None):
    """(enum, interface names, table): library enum value -> interface index, -1 where the name is missing."""
    table = np.full(len(enum_cls), -1, dtype=np.int64)
    for member in enum_cls:
        name = (aliases or {}).get(member, member).name
        if name in names:
            table[member] = names.index(name)
    return enum_cls, names, table


_MAP = {
    "device10": _name_map(VPUDevice, _DEVICES),
    # the 2.7 adapter mocks newer devices as VPU_2_7
    "device11": _name_map(VPUDevice, _DEVICES, {VPUDevice.VPU_4_0: VPUDevice.VPU_2_7,
                                                VPUDevice.NPU_5_0: VPUDevice.VPU_2_7,
                                                VPUDevice.NPU_RESERVED: VPUDevice.VPU_2_7}),
    # the 4.0 adapter keeps VPU_4_0 and mocks newer devices as VPU_4_0
    "device4011": _name_map(VPUDevice, _DEVICES, {VPUDevice.NPU_5_0: VPUDevice.VPU_4_0,
                                                  VPUDevice.NPU_RESERVED: VPUDevice.VPU_4_0,
                                                  VPUDevice.NPU_RESERVED_1: VPUDevice.VPU_4_0}),
    "operation10": _name_map(Operation, _OPERATIONS),
    "operation11": _name_map(Operation, _OPERATIONS, _OP_ALIASES_11),
    "operation4011": _name_map(Operation, _OPERATIONS, _OP_ALIASES_4011),
    "operation5114": _name_map(Operation, _OPERATIONS_5114, _OP_ALIASES_11),
    "dtype5114": _name_map(DataType, _DTYPES_5114, _DTYPE_ALIASES_5114),
    "layout5114": _name_map(Layout, _LAYOUTS_11[:6], {Layout.INVALID: Layout.ZXY}),
    "dtype10": _name_map(DataType, _DTYPES),
    "dtype11": _name_map(DataType, _DTYPES, {DataType.BF8: DataType.UINT8, DataType.HF8: DataType.UINT8,
                                             DataType.FLOAT32: DataType.FLOAT16, DataType.INT32: DataType.FLOAT16}),
    "mode10": _name_map(ExecutionMode, _MODES_10),
    "mode11": _name_map(ExecutionMode, _MODES_11),
    "activation10": _name_map(ActivationFunction, _ACTIVATIONS),
    "swizzling": _name_map(Swizzling, _SWIZZLINGS),
    "layout11": _name_map(Layout, _LAYOUTS_11),
    "isi11": _name_map(ISIStrategy, _ISI),
}
#: the tables of `_MAP` as rows of one array (padded with -1), and each key's row: `_CODES[_T.dtype11, code]`
_T = namedtuple("Tables", _MAP)(*range(len(_MAP)))
_CODES = np.full((len(_MAP), max(len(table) for _, _, table in _MAP.values())), -1, dtype=np.int64)
for _row, (_, _, _table) in enumerate(_MAP.values()):
    _CODES[_row, :len(_table)] = _table


def _op_mock(aliases: dict) -> np.ndarray:
    """Operation code -> the operation the adapter encodes instead (the code itself where not mocked)."""
    table = np.arange(len(Operation))
    for src, dst in aliases.items():
        table[src] = dst
    return table


_OP_MOCK_11, _OP_MOCK_4011 = _op_mock(_OP_ALIASES_11), _op_mock(_OP_ALIASES_4011)
_IN_SHAPE, _OUT_SHAPE = (F.in_w, F.in_h, F.in_c, F.in_b), (F.out_w, F.out_h, F.out_c, F.out_b)
_WINDOW = (F.k_w, F.k_h, F.s_w, F.s_h, F.pad_top, F.pad_bottom, F.pad_left, F.pad_right)


class UnencodableWorkload(VpunnError):
    """A valid workload that the model's descriptor interface cannot express (the runtime throws too)."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"workload {index}: {reason}")
        self.index, self.reason = index, reason


def encode(m: np.ndarray, version: int) -> np.ndarray:
    """Descriptors (float32, one row per workload) of *sanitized* workloads for `version`.

    Raises UnencodableWorkload for the first row holding a value the interface cannot name.
    """
    if version not in DESCRIPTOR_SIZES:
        raise VpunnError(f"descriptor interface {version} is not implemented; implemented: "
                         + ", ".join(map(str, IMPLEMENTED_INTERFACES)))
    d = np.zeros((len(m), DESCRIPTOR_SIZES[version]), dtype=np.float32)
    failed = np.full(3, -1, dtype=np.int64)
    encode_rows(as_matrix(m), version, d, failed)
    if failed[0] >= 0:
        raise unencodable(failed, version)
    return d


def unencodable(failed: np.ndarray, version: int) -> UnencodableWorkload:
    """The error for `encode_rows`'s `failed` (row, table, code)."""
    row, table, code = map(int, failed)
    enum_cls, names, _ = list(_MAP.values())[table]
    name = enum_cls(code).name if 0 <= code < len(enum_cls) else str(code)
    return UnencodableWorkload(row, f"{enum_cls.__name__} {name} cannot be encoded by descriptor interface {version} "
                                    f"(it knows {', '.join(names)})")


def first_unencodable(m: np.ndarray, version: int) -> tuple[int, str] | None:
    """(row, reason) of the first workload interface `version` cannot encode, or None."""
    if version not in DESCRIPTOR_SIZES:
        return None
    try:
        encode(m, version)
    except UnencodableWorkload as exc:
        return exc.index, exc.reason
    return None


@njit(cache=True)
def encode_rows(m, version, d, failed) -> None:
    """Encode each row of `m` into the zeroed row of `d`; at the first value the interface cannot name, stop and
    set `failed` to (row, table, code)."""
    for i in range(len(m)):
        if version == 10:
            ok = _encode_10(m[i], d[i], failed)
        elif version == 5114:
            ok = _encode_5114(m[i], d[i], failed)
        else:
            ok = _encode_93(m[i], version == 4011, d[i], failed)
        if not ok:
            failed[0] = i
            return


@njit(cache=True)
def _one_hot(d, start, code, table, failed) -> bool:
    """Set slot `start` + the interface index of `code`; False (and `failed` = table, code) where it has none."""
    index = _CODES[table, code] if 0 <= code < _CODES.shape[1] else -1
    if index < 0:
        failed[1], failed[2] = table, code
        return False
    d[start + index] = 1
    return True


@njit(cache=True)
def _copy_fields(row, fields, d, start) -> None:
    """Slots `start`, `start` + 1, ... of `d` get the row's values of `fields` (shapes, kernel window)."""
    for k in range(len(fields)):
        d[start + k] = row[fields[k]]


@njit(cache=True)
def _round_6dp(x) -> float:
    """x printed with %f and parsed back (the v11 adapter does that to sparsities): rounded to 6 decimals, correctly.

    x * 1e6 = p + e exactly (Dekker's product); only a p that lies on a half needs e to break the tie.
    """
    p = x * 1e6
    split = 134217729.0 * x  # 2^27 + 1: x = hi + lo with 26-bit halves (1e6 needs no split)
    hi = split - (split - x)
    e = (hi * 1e6 - p) + (x - hi) * 1e6
    n = np.rint(p)  # ties to even, as printf
    if p - n == 0.5 and e > 0:
        n += 1
    elif p - n == -0.5 and e < 0:
        n -= 1
    return n / 1e6


@njit(cache=True)
def _encode_10(row, d, failed) -> bool:
    i = lambda field: int_field(row, field)  # noqa: E731
    if not (_one_hot(d, 0, i(F.device), _T.device10, failed)
            and _one_hot(d, 4, i(F.operation), _T.operation10, failed)):
        return False
    _copy_fields(row, _IN_SHAPE, d, 10)
    if not _one_hot(d, 14, i(F.in_dtype), _T.dtype10, failed):
        return False
    _copy_fields(row, _OUT_SHAPE, d, 18)
    if not _one_hot(d, 22, i(F.out_dtype), _T.dtype10, failed):
        return False
    _copy_fields(row, _WINDOW, d, 26)
    if not (_one_hot(d, 34, i(F.execution_mode), _T.mode10, failed)
            and _one_hot(d, 40, i(F.activation), _T.activation10, failed)):
        return False
    d[46], d[47] = row[F.act_sparsity], row[F.weight_sparsity]
    d[66] = row[F.output_write_tiles]
    return (_one_hot(d, 48, i(F.in_swizzling0), _T.swizzling, failed)
            and _one_hot(d, 54, i(F.in_swizzling1), _T.swizzling, failed)
            and _one_hot(d, 60, i(F.out_swizzling0), _T.swizzling, failed))


@njit(cache=True)
def _tensor_block(d, start, w, h, c, b, dtype, dtype_table, layout, sparsity, failed) -> bool:
    d[start], d[start + 1], d[start + 2], d[start + 3] = w, h, c, b
    d[start + 15] = sparsity
    return (_one_hot(d, start + 4, dtype, dtype_table, failed)
            and _one_hot(d, start + 8, layout, _T.layout11, failed))


@njit(cache=True)
def _encode_93(row, v4011, d, failed) -> bool:
    """Interfaces 11 and 4011: the same 93 slots; 4011 differs in the device and operation mocks, the weight
    alignment, the swizzling normalisation and the ISI/owt filter (docs/vpunn.md §3.3-3.4)."""
    i = lambda field: int_field(row, field)  # noqa: E731
    san_op = i(F.operation)
    op = san_op
    if 0 <= op < len(_OP_MOCK_11):
        op = _OP_MOCK_4011[op] if v4011 else _OP_MOCK_11[op]
    if not (_one_hot(d, 0, i(F.device), _T.device4011 if v4011 else _T.device11, failed)
            and _one_hot(d, 4, op, _T.operation4011 if v4011 else _T.operation11, failed)):
        return False
    # input0: the memory tensor; with zero halo (all this runtime supports) it is the compute tensor
    in_w, in_h, in_c, in_b, in_dtype = i(F.in_w), i(F.in_h), i(F.in_c), i(F.in_b), i(F.in_dtype)
    if not _tensor_block(d, 10, in_w, in_h, in_c, in_b, in_dtype, _T.dtype11, i(F.in_layout),
                         i(F.in_sparsity_enabled), failed):
        return False
    is_elt, is_maxpool = op == OP.ELTWISE, op == OP.MAXPOOL
    # weights [1, 1, aligned samples, C_out]; ELTWISE a permuted input copy; MAXPOOL none
    if is_elt:
        wdims = (in_h, in_c, in_w, in_b)
    elif is_maxpool:
        wdims = (0, 0, 0, 0)
    else:
        wdims = (1, 1, weight_channels(row, DEV.VPU_4_0 if v4011 else DEV.VPU_2_7), i(F.out_c))
    if not (_tensor_block(d, 26, wdims[0], wdims[1], wdims[2], wdims[3], in_dtype, _T.dtype11,
                          LAYOUT.INVALID if is_maxpool else i(F.in_layout), i(F.weight_sparsity_enabled), failed)
            and _tensor_block(d, 42, i(F.out_w), i(F.out_h), i(F.out_c), i(F.out_b), i(F.out_dtype), _T.dtype11,
                              i(F.out_layout), 0, failed)):
        return False
    _copy_fields(row, _WINDOW, d, 58)
    if not _one_hot(d, 66, i(F.execution_mode), _T.mode11, failed):
        return False
    d[69], d[70] = _round_6dp(row[F.act_sparsity]), _round_6dp(row[F.weight_sparsity])
    swz_in0, swz_in1, swz_out = i(F.in_swizzling0), i(F.in_swizzling1), i(F.out_swizzling0)
    if v4011:  # decided on the sanitized operation
        elt = san_op == OP.ELTWISE
        key0_in, key0_out = elt and swz_in0 == 0 and swz_in1 == 0, elt and swz_out == 0
    else:
        key0_in = key0_out = is_elt and swz_in0 == 0 and swz_in1 == 0 and swz_out == 0
    key_in = SWZ.KEY_0 if key0_in else SWZ.KEY_5
    if not (_one_hot(d, 71, key_in, _T.swizzling, failed)
            and _one_hot(d, 77, SWZ.KEY_0 if is_maxpool else key_in, _T.swizzling, failed)
            and _one_hot(d, 83, SWZ.KEY_0 if key0_out else SWZ.KEY_5, _T.swizzling, failed)):
        return False
    isi, owt = i(F.isi_strategy), i(F.output_write_tiles)
    if isi == ISI.SPLIT_OVER_H and (v4011 or i(F.k_h) == 1):
        isi = ISI.CLUSTERING
    if isi == ISI.CLUSTERING and owt > 1:
        isi = ISI.SPLIT_OVER_K
    if not v4011 and isi == ISI.SPLIT_OVER_K and is_elt:
        isi, owt = ISI.CLUSTERING, 1
    d[89] = min(owt, 6 if v4011 else 2)
    return _one_hot(d, 90, isi, _T.isi11, failed)


@njit(cache=True)
def _encode_5114(row, d, failed) -> bool:
    """Interface 5114 (docs/vpunn.md §3.5): no device, swizzling, ISI, sparsity flags or weight shape."""
    i = lambda field: int_field(row, field)  # noqa: E731
    if not _one_hot(d, 0, i(F.operation), _T.operation5114, failed):
        return False
    _copy_fields(row, _IN_SHAPE, d, 7)
    _copy_fields(row, _OUT_SHAPE, d, 21)
    if i(F.input_autopad) == 1 and i(F.in_c) < 16:  # autopadded channels
        d[9] = 16
    if i(F.output_autopad) == 1 and i(F.out_c) < 16:
        d[23] = 16
    if not (_one_hot(d, 11, i(F.in_dtype), _T.dtype5114, failed)
            and _one_hot(d, 16, weight_dtype(row), _T.dtype5114, failed)
            and _one_hot(d, 25, i(F.out_dtype), _T.dtype5114, failed)):
        return False
    _copy_fields(row, _WINDOW, d, 30)
    if not _one_hot(d, 38, i(F.execution_mode), _T.mode11, failed):
        return False
    d[41], d[42] = _round_6dp(row[F.act_sparsity]), _round_6dp(row[F.weight_sparsity])
    d[43] = min(i(F.output_write_tiles), 2)
    d[50], d[51], d[52] = in_place_output(row), weightless(row), i(F.superdense)
    return _one_hot(d, 44, i(F.out_layout), _T.layout5114, failed)
