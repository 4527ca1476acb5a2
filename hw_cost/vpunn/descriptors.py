"""Workload -> NN input vector for DPU interfaces 10 (VPU 2.0 models) and 11 (VPU 2.7 models), vectorised.

vpunn-reference.md §3.1-3.4. Values are raw numbers and one-hot blocks; enums are mapped by *name* into each
interface's own enum order, and a value the interface cannot name raises VpunnError (as the runtime throws).
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from .enums import (ActivationFunction, DataType, ExecutionMode, ISIStrategy, Layout, Operation, Swizzling,
                    VPUDevice, int_codes)
from .errors import VpunnError
from .sanitizer import weight_channels
from .workload import F

__all__ = ["encode", "first_unencodable", "DESCRIPTOR_SIZES", "IMPLEMENTED_INTERFACES"]

_DTYPE = int_codes(DataType)
_ISI_CODE = int_codes(ISIStrategy)
_LAYOUT = int_codes(Layout)
_OP = int_codes(Operation)
_SWZ = int_codes(Swizzling)

DESCRIPTOR_SIZES = {10: 67, 11: 93}
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
    "operation10": _name_map(Operation, _OPERATIONS),
    "operation11": _name_map(Operation, _OPERATIONS, {Operation.AVEPOOL: Operation.DW_CONVOLUTION}),
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


def _one_hot(out: np.ndarray, start: int, values: np.ndarray, key: str, version: int) -> None:
    enum_cls, names, table = _MAP[key]
    codes = np.asarray(values).astype(np.int64)
    inside = (codes >= 0) & (codes < len(table))
    idx = np.where(inside, table[np.where(inside, codes, 0)], -1)
    if (idx < 0).any():
        bad = int(codes[np.argmax(idx < 0)])
        name = enum_cls(bad).name if 0 <= bad < len(enum_cls) else str(bad)
        raise VpunnError(f"{enum_cls.__name__} {name} cannot be encoded by descriptor interface {version} "
                         f"(it knows {', '.join(names)})")
    for k in range(len(names)):  # column by column: `out` is column-major
        out[:, start + k] = idx == k


_FIELDS_BY_VERSION = {
    10: ((F.device, "device10"), (F.operation, "operation10"), (F.in_dtype, "dtype10"), (F.out_dtype, "dtype10"),
         (F.execution_mode, "mode10"), (F.activation, "activation10"), (F.in_swizzling0, "swizzling"),
         (F.in_swizzling1, "swizzling"), (F.out_swizzling0, "swizzling")),
    11: ((F.device, "device11"), (F.operation, "operation11"), (F.in_dtype, "dtype11"), (F.out_dtype, "dtype11"),
         (F.in_layout, "layout11"), (F.out_layout, "layout11"), (F.execution_mode, "mode11"),
         (F.isi_strategy, "isi11")),
}


def first_unencodable(m: np.ndarray, version: int) -> tuple[int, str] | None:
    """(row, reason) of the first workload interface `version` cannot encode, or None."""
    for col, key in _FIELDS_BY_VERSION.get(version, ()):
        enum_cls, names, table = _MAP[key]
        codes = m[:, col].astype(np.int64)
        inside = (codes >= 0) & (codes < len(table))
        bad = ~inside | (table[np.where(inside, codes, 0)] < 0)
        if bad.any():
            row = int(np.argmax(bad))
            code = int(codes[row])
            name = enum_cls(code).name if 0 <= code < len(enum_cls) else str(code)
            return row, (f"{enum_cls.__name__} {name} cannot be encoded by descriptor interface {version} "
                         f"(it knows {', '.join(names)})")
    return None


def _sparsity_6dp(values: np.ndarray) -> np.ndarray:
    """The v11 adapter prints sparsities with %f and parses them back: round to 6 decimals, correctly."""
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([float(f"{v:f}") for v in uniq], dtype=np.float64)[inverse]


def encode(m: np.ndarray, version: int) -> np.ndarray:
    """Descriptors (float32, one row per workload, column-major) of *sanitized* workloads for `version`."""
    if version == 10:
        return _encode_10(m)
    if version == 11:
        return _encode_11(m)
    raise VpunnError(f"descriptor interface {version} is not implemented; implemented: "
                     + ", ".join(map(str, IMPLEMENTED_INTERFACES)))


def _encode_10(m: np.ndarray) -> np.ndarray:
    m = np.asfortranarray(m)
    d = np.zeros((len(m), 67), dtype=np.float32, order="F")
    _one_hot(d, 0, m[:, F.device], "device10", 10)
    _one_hot(d, 4, m[:, F.operation], "operation10", 10)
    d[:, 10:14] = m[:, [F.in_w, F.in_h, F.in_c, F.in_b]]
    _one_hot(d, 14, m[:, F.in_dtype], "dtype10", 10)
    d[:, 18:22] = m[:, [F.out_w, F.out_h, F.out_c, F.out_b]]
    _one_hot(d, 22, m[:, F.out_dtype], "dtype10", 10)
    d[:, 26:34] = m[:, [F.k_w, F.k_h, F.s_w, F.s_h, F.pad_top, F.pad_bottom, F.pad_left, F.pad_right]]
    _one_hot(d, 34, m[:, F.execution_mode], "mode10", 10)
    _one_hot(d, 40, m[:, F.activation], "activation10", 10)
    d[:, 46] = m[:, F.act_sparsity]
    d[:, 47] = m[:, F.weight_sparsity]
    _one_hot(d, 48, m[:, F.in_swizzling0], "swizzling", 10)
    _one_hot(d, 54, m[:, F.in_swizzling1], "swizzling", 10)
    _one_hot(d, 60, m[:, F.out_swizzling0], "swizzling", 10)
    d[:, 66] = m[:, F.output_write_tiles]
    return d


def _tensor_block(d, start, dims, dtype, layout, sparsity) -> None:
    for k, column in enumerate(dims):
        d[:, start + k] = column
    _one_hot(d, start + 4, dtype, "dtype11", 11)
    _one_hot(d, start + 8, layout, "layout11", 11)
    d[:, start + 15] = sparsity


def _encode_11(m: np.ndarray) -> np.ndarray:
    n = len(m)
    a = np.asfortranarray(m, dtype=np.int64)
    col = lambda f: a[:, f]  # noqa: E731
    d = np.zeros((n, 93), dtype=np.float32, order="F")
    op = np.where(col(F.operation) == _OP.AVEPOOL, _OP.DW_CONVOLUTION, col(F.operation))
    _one_hot(d, 0, col(F.device), "device11", 11)
    _one_hot(d, 4, op, "operation11", 11)
    # input0: the memory tensor; with zero halo (all this runtime supports) it is the compute tensor
    _tensor_block(d, 10, [col(F.in_w), col(F.in_h), col(F.in_c), col(F.in_b)], col(F.in_dtype), col(F.in_layout),
                  col(F.in_sparsity_enabled))
    is_elt, is_maxpool = op == _OP.ELTWISE, op == _OP.MAXPOOL
    a_op = a
    if (col(F.operation) == _OP.AVEPOOL).any():  # not after the sanitizer
        a_op = a.copy(order="F")
        a_op[:, F.operation] = op
    plain = ~is_elt & ~is_maxpool  # weights [1, 1, aligned samples, C_out]; ELTWISE a permuted input copy
    wdims = [np.where(is_elt, col(F.in_h), plain), np.where(is_elt, col(F.in_c), plain),
             np.where(is_elt, col(F.in_w), np.where(plain, weight_channels(a_op), 0)),
             np.where(is_elt, col(F.in_b), np.where(plain, col(F.out_c), 0))]
    wlayout = np.where(is_maxpool, _LAYOUT.INVALID, col(F.in_layout))
    _tensor_block(d, 26, wdims, col(F.in_dtype), wlayout, col(F.weight_sparsity_enabled))
    _tensor_block(d, 42, [col(F.out_w), col(F.out_h), col(F.out_c), col(F.out_b)], col(F.out_dtype),
                  col(F.out_layout), 0)
    for k, f in enumerate((F.k_w, F.k_h, F.s_w, F.s_h, F.pad_top, F.pad_bottom, F.pad_left, F.pad_right)):
        d[:, 58 + k] = col(f)
    _one_hot(d, 66, col(F.execution_mode), "mode11", 11)
    d[:, 69] = _sparsity_6dp(m[:, F.act_sparsity])
    d[:, 70] = _sparsity_6dp(m[:, F.weight_sparsity])
    all_key0 = (col(F.in_swizzling0) == 0) & (col(F.in_swizzling1) == 0) & (col(F.out_swizzling0) == 0)
    key = np.where(is_elt & all_key0, _SWZ.KEY_0, _SWZ.KEY_5)
    swz_w = np.where(is_maxpool, _SWZ.KEY_0, key)
    _one_hot(d, 71, key, "swizzling", 11)
    _one_hot(d, 77, swz_w, "swizzling", 11)
    _one_hot(d, 83, key, "swizzling", 11)
    isi, owt = col(F.isi_strategy).copy(), col(F.output_write_tiles).copy()
    isi[(isi == _ISI_CODE.SPLIT_OVER_H) & (col(F.k_h) == 1)] = _ISI_CODE.CLUSTERING
    isi[(isi == _ISI_CODE.CLUSTERING) & (owt > 1)] = _ISI_CODE.SPLIT_OVER_K
    sok_elt = (isi == _ISI_CODE.SPLIT_OVER_K) & is_elt
    isi[sok_elt] = _ISI_CODE.CLUSTERING
    owt[sok_elt] = 1
    d[:, 89] = np.minimum(owt, 2)
    _one_hot(d, 90, isi, "isi11", 11)
    return d
