"""Workload -> NN input vector for DPU interfaces 10 (VPU 2.0 models), 11 (VPU 2.7 models), 4011 (VPU 4.0) and
5114 (NPU 5.x), vectorised.

vpunn-reference.md §3.1-3.4, npu45-notes §4.1-4.2. Values are raw numbers and one-hot blocks; enums are mapped by
*name* into each interface's own enum order, and a value the interface cannot name raises VpunnError (as the runtime
throws).
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from .enums import (ActivationFunction, DataType, ExecutionMode, ISIStrategy, Layout, Operation, Swizzling,
                    VPUDevice, int_codes)
from .errors import VpunnError
from .sanitizer import in_place_output, weight_channels, weight_dtype, weightless
from .workload import F

__all__ = ["encode", "first_unencodable", "DESCRIPTOR_SIZES", "IMPLEMENTED_INTERFACES"]

_DTYPE = int_codes(DataType)
_ISI_CODE = int_codes(ISIStrategy)
_LAYOUT = int_codes(Layout)
_OP = int_codes(Operation)
_SWZ = int_codes(Swizzling)
_DEV = int_codes(VPUDevice)

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
    4011: ((F.device, "device4011"), (F.operation, "operation4011"), (F.in_dtype, "dtype11"),
           (F.out_dtype, "dtype11"), (F.in_layout, "layout11"), (F.out_layout, "layout11"),
           (F.execution_mode, "mode11"), (F.isi_strategy, "isi11")),
    5114: ((F.operation, "operation5114"), (F.in_dtype, "dtype5114"), (weight_dtype, "dtype5114"),
           (F.out_dtype, "dtype5114"), (F.execution_mode, "mode11"), (F.out_layout, "layout5114")),
}


def first_unencodable(m: np.ndarray, version: int) -> tuple[int, str] | None:
    """(row, reason) of the first workload interface `version` cannot encode, or None."""
    for col, key in _FIELDS_BY_VERSION.get(version, ()):
        enum_cls, names, table = _MAP[key]
        codes = col(np.asarray(m, dtype=np.int64)) if callable(col) else m[:, col].astype(np.int64)
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
    if version in (11, 4011):
        return _encode_93(m, version)
    if version == 5114:
        return _encode_5114(m)
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


def _mock(codes: np.ndarray, aliases: dict) -> np.ndarray:
    out = codes.copy()
    for src, dst in aliases.items():
        out[codes == src] = dst
    return out


def _encode_93(m: np.ndarray, version: int) -> np.ndarray:
    """Interfaces 11 and 4011: the same 93 slots; 4011 differs in the device and operation mocks, the weight
    alignment, the swizzling normalisation and the ISI/owt filter (npu45-notes §4.1)."""
    n = len(m)
    a = np.asfortranarray(m, dtype=np.int64)
    col = lambda f: a[:, f]  # noqa: E731
    v4011 = version == 4011
    d = np.zeros((n, 93), dtype=np.float32, order="F")
    san_op = col(F.operation)
    op = _mock(san_op, _OP_ALIASES_4011 if v4011 else _OP_ALIASES_11)
    _one_hot(d, 0, col(F.device), f"device{version}", version)
    _one_hot(d, 4, op, f"operation{version}", version)
    # input0: the memory tensor; with zero halo (all this runtime supports) it is the compute tensor
    _tensor_block(d, 10, [col(F.in_w), col(F.in_h), col(F.in_c), col(F.in_b)], col(F.in_dtype), col(F.in_layout),
                  col(F.in_sparsity_enabled))
    is_elt, is_maxpool = op == _OP.ELTWISE, op == _OP.MAXPOOL
    plain = ~is_elt & ~is_maxpool  # weights [1, 1, aligned samples, C_out]; ELTWISE a permuted input copy
    wchan = weight_channels(a, _DEV.VPU_4_0 if v4011 else _DEV.VPU_2_7)
    wdims = [np.where(is_elt, col(F.in_h), plain), np.where(is_elt, col(F.in_c), plain),
             np.where(is_elt, col(F.in_w), np.where(plain, wchan, 0)),
             np.where(is_elt, col(F.in_b), np.where(plain, col(F.out_c), 0))]
    wlayout = np.where(is_maxpool, _LAYOUT.INVALID, col(F.in_layout))
    _tensor_block(d, 26, wdims, col(F.in_dtype), wlayout, col(F.weight_sparsity_enabled))
    _tensor_block(d, 42, [col(F.out_w), col(F.out_h), col(F.out_c), col(F.out_b)], col(F.out_dtype),
                  col(F.out_layout), 0)
    for k, f in enumerate((F.k_w, F.k_h, F.s_w, F.s_h, F.pad_top, F.pad_bottom, F.pad_left, F.pad_right)):
        d[:, 58 + k] = col(f)
    _one_hot(d, 66, col(F.execution_mode), "mode11", version)
    d[:, 69] = _sparsity_6dp(m[:, F.act_sparsity])
    d[:, 70] = _sparsity_6dp(m[:, F.weight_sparsity])
    swz_in0, swz_in1, swz_out = col(F.in_swizzling0), col(F.in_swizzling1), col(F.out_swizzling0)
    key = lambda is_key0: np.where(is_key0, _SWZ.KEY_0, _SWZ.KEY_5)  # noqa: E731
    if v4011:  # decided on the sanitized operation
        elt = san_op == _OP.ELTWISE
        key_in = key(elt & (swz_in0 == 0) & (swz_in1 == 0))
        key_out = key(elt & (swz_out == 0))
    else:
        key_in = key_out = key(is_elt & (swz_in0 == 0) & (swz_in1 == 0) & (swz_out == 0))
    _one_hot(d, 71, key_in, "swizzling", version)
    _one_hot(d, 77, np.where(is_maxpool, _SWZ.KEY_0, key_in), "swizzling", version)
    _one_hot(d, 83, key_out, "swizzling", version)
    isi, owt = col(F.isi_strategy).copy(), col(F.output_write_tiles).copy()
    soh = isi == _ISI_CODE.SPLIT_OVER_H
    isi[soh if v4011 else soh & (col(F.k_h) == 1)] = _ISI_CODE.CLUSTERING
    isi[(isi == _ISI_CODE.CLUSTERING) & (owt > 1)] = _ISI_CODE.SPLIT_OVER_K
    if not v4011:
        sok_elt = (isi == _ISI_CODE.SPLIT_OVER_K) & is_elt
        isi[sok_elt] = _ISI_CODE.CLUSTERING
        owt[sok_elt] = 1
    d[:, 89] = np.minimum(owt, 6 if v4011 else 2)
    _one_hot(d, 90, isi, "isi11", version)
    return d


def _encode_5114(m: np.ndarray) -> np.ndarray:
    """Interface 5114 (npu45-notes §4.2): no device, swizzling, ISI, sparsity flags or weight shape."""
    a = np.asfortranarray(m, dtype=np.int64)
    col = lambda f: a[:, f]  # noqa: E731
    d = np.zeros((len(a), 53), dtype=np.float32, order="F")
    _one_hot(d, 0, col(F.operation), "operation5114", 5114)
    for start, dims, pad in ((7, (F.in_w, F.in_h, F.in_c, F.in_b), F.input_autopad),
                             (21, (F.out_w, F.out_h, F.out_c, F.out_b), F.output_autopad)):
        for k, f in enumerate(dims):
            d[:, start + k] = col(f)
        d[:, start + 2] = np.where((col(pad) == 1) & (col(dims[2]) < 16), 16, col(dims[2]))  # autopadded channels
    _one_hot(d, 11, col(F.in_dtype), "dtype5114", 5114)
    _one_hot(d, 16, weight_dtype(a), "dtype5114", 5114)
    _one_hot(d, 25, col(F.out_dtype), "dtype5114", 5114)
    for k, f in enumerate((F.k_w, F.k_h, F.s_w, F.s_h, F.pad_top, F.pad_bottom, F.pad_left, F.pad_right)):
        d[:, 30 + k] = col(f)
    _one_hot(d, 38, col(F.execution_mode), "mode11", 5114)
    d[:, 41] = _sparsity_6dp(m[:, F.act_sparsity])
    d[:, 42] = _sparsity_6dp(m[:, F.weight_sparsity])
    d[:, 43] = np.minimum(col(F.output_write_tiles), 2)
    _one_hot(d, 44, col(F.out_layout), "layout5114", 5114)
    d[:, 50] = in_place_output(a)
    d[:, 51] = weightless(a)
    d[:, 52] = col(F.superdense)
    return d
