"""The workload sanitizer and validity rules (docs/vpunn.md §4, and the layer variants of §8; VPU 4.0
and NPU 5.0 there too), compiled with numba.

Each rule is written once, for one workload row (the `_*_row` functions); the public functions run them over a
workload matrix (see workload.py, one row per workload) in compiled loops, so one workload and a batch take the same
code. `check` has three contexts:

* "workload": `VPUCostModel::DPU` on one workload (after `sanitize`);
* "tile": the tile checks of the layer model (no execution-mode check, DW/MAXPOOL any multiple of 16);
* "layer": the whole-layer validation of the layer model (no CMX or execution-mode check, limits of the split
  dimensions scaled by the tile count, output height exact; docs/vpunn.md §8 for the 4.0 / 5.0 strategies).

numba caches the compiled code on disk with the enum codes and device constants read here frozen into it; jit_cache.py
drops that cache whenever any source of the package changes.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .devices import DEVICES
from .enums import DEV, DTYPE, DTYPE_BITS, ISI, LAYOUT, MODE, OP, TILING, DataType, Layout, VPUDevice
from .errors import (ERROR_INPUT_TOO_BIG, ERROR_INVALID_INPUT_CONFIGURATION, ERROR_INVALID_INPUT_DEVICE,
                     ERROR_INVALID_INPUT_OPERATION, ERROR_INVALID_LAYER_CONFIGURATION, VpunnError)
from .workload import F

__all__ = ["sanitize", "layer_fixups", "check", "broken_rules", "RULES", "cmx_required", "weights_bytes", "dtype_bytes",
           "PAGE", "CONTEXTS"]


PAGE = 16 * 1024  # CMX page rounding of each tensor
MAX_DIM = 8192
MAX_KERNEL = 15
MAX_STRIDE = 8
#: `check` contexts -> the code the compiled rules take
CONTEXTS = {"workload": 0, "tile": 1, "layer": 2}
_WORKLOAD, _LAYER = CONTEXTS["workload"], CONTEXTS["layer"]

_CONV, _DW, _ELT, _MAXPOOL, _AVEPOOL, _CM = (OP.CONVOLUTION, OP.DW_CONVOLUTION, OP.ELTWISE,
                                             OP.MAXPOOL, OP.AVEPOOL, OP.CM_CONVOLUTION)
_LNORM, _ELT_MUL = OP.LAYER_NORM, OP.ELTWISE_MUL
_V20, _V27, _V40, _V50 = DEV.VPU_2_0, DEV.VPU_2_7, DEV.VPU_4_0, DEV.NPU_5_0
_BITS = np.array(DTYPE_BITS, dtype=np.int64)


def _codes(*codes) -> np.ndarray:
    return np.array([int(c) for c in codes], dtype=np.int64)


# same-size datatype restriction of the sanitizer
_RESTRICT = np.arange(len(DataType))
for _src, _dst in ((DTYPE.INT8, DTYPE.UINT8), (DTYPE.BFLOAT16, DTYPE.FLOAT16), (DTYPE.INT4, DTYPE.UINT4),
                   (DTYPE.BF8, DTYPE.HF8), (DTYPE.INT16, DTYPE.UINT16), (DTYPE.INT2, DTYPE.UINT2),
                   (DTYPE.INT1, DTYPE.UINT1)):
    _RESTRICT[_src] = _dst
# code sets as int64 arrays: numba cannot unify constant tuples of different lengths (`member(x, a if c else b)`)
_VALID_DTYPES = _codes(DTYPE.UINT8, DTYPE.INT8, DTYPE.FLOAT16, DTYPE.BFLOAT16)
_FP8 = _codes(DTYPE.HF8, DTYPE.BF8)
_VALID_DTYPES_50 = np.r_[_VALID_DTYPES, _FP8]
_VALID_OUT_DTYPES_40 = np.r_[_VALID_DTYPES, DTYPE.FLOAT32]
_VALID_OUT_DTYPES_50 = np.r_[_VALID_OUT_DTYPES_40, _FP8, DTYPE.INT32]
_VALID_WT_DTYPES_40 = np.r_[_VALID_DTYPES, DTYPE.INT4, DTYPE.UINT4]
_VALID_WT_DTYPES_50 = np.r_[_VALID_WT_DTYPES_40, _FP8, DTYPE.INT2, DTYPE.UINT2]
_LAYOUTS_20 = _codes(LAYOUT.ZMAJOR, LAYOUT.CMAJOR)
_PERMUTED_LAYOUTS = _codes(LAYOUT.XYZ, LAYOUT.XZY, LAYOUT.YXZ, LAYOUT.YZX, LAYOUT.ZXY, LAYOUT.ZYX)
_MODES_20 = _codes(*DEVICES[VPUDevice.VPU_2_0].execution_modes)
_MODES_27 = _codes(*DEVICES[VPUDevice.VPU_2_7].execution_modes)
#: which of (W, H, C) is the innermost dimension of each layout (the first letter; ZMAJOR = ZXY, CMAJOR = XYZ)
_INNERMOST = np.full(len(Layout), 2, dtype=np.int64)
for _lay in (LAYOUT.CMAJOR, LAYOUT.XYZ, LAYOUT.XZY):
    _INNERMOST[_lay] = 0
_INNERMOST[[LAYOUT.YXZ, LAYOUT.YZX]] = 1
_CMX_BY_DEVICE = np.array([DEVICES[d].cmx_bytes if d in DEVICES else 0 for d in VPUDevice], dtype=np.int64)
# layer strategies that split the output channels / rows / columns over the tiles (the runtime's SOHW and SOHK
# are validated like this but never split)
_SPLIT_C = _codes(TILING.SOK, TILING.SOHK)
_SPLIT_H = _codes(TILING.SOH_Overlapped, TILING.SOHO_K_SWITCH, TILING.SOHW, TILING.SOHK)
_SPLIT_W = _codes(TILING.SOW, TILING.SOHW)


def as_matrix(m) -> np.ndarray:
    """A workload matrix as the compiled code takes it: float64, row-major (one specialisation)."""
    return np.ascontiguousarray(m, dtype=np.float64)


def sanitize(m: np.ndarray) -> np.ndarray:
    """The changes `VPUCostModel::sanitize_workload` applies before validation (docs/vpunn.md §4.1), on a copy:
    the layer model's fixups, then channel, data type and layout rules."""
    m = as_matrix(m)
    return sanitize_rows(m, m.copy())


def layer_fixups(m: np.ndarray) -> np.ndarray:
    """The only sanitizer changes the layer model makes to a whole layer (docs/vpunn.md §8 step 1), on a copy.

    NPU 5.0 forces every swizzling to KEY_0 (as 2.0 does) and keeps AVEPOOL as an operation of its own; a
    CONVOLUTION with an autopadded input stays a CONVOLUTION (docs/vpunn.md §4.1).
    """
    return _fixup_rows(as_matrix(m).copy())


def check(m: np.ndarray, context: str = "workload", strategy=None, n_tiles=None) -> np.ndarray:
    """Error code per row (0 = valid) of already sanitized / fixed-up workloads.

    Args:
        m: workload matrix.
        context: "workload", "tile" or "layer" (see the module docstring).
        strategy: for "layer", the VPUTilingStrategy per row (scalar or array).
        n_tiles: for "layer", the tile count per row (scalar or array); the caller sets owt to it.
    """
    return _row_codes(*_per_row(m, context, strategy, n_tiles), True)


def broken_rules(m: np.ndarray, context: str = "workload", strategy=None, n_tiles=None) -> list[str]:
    """The first rule of `RULES` each row breaks ("" where it breaks none): why `check` calls a row invalid.
    Arguments as `check`."""
    return [RULES[c - 1] if c else "" for c in _row_codes(*_per_row(m, context, strategy, n_tiles), False)]


def _per_row(m, context: str, strategy, n_tiles) -> tuple:
    """The arguments of the compiled row loops: the matrix, the context's code, strategy and tiles per row."""
    if context not in CONTEXTS:
        raise VpunnError(f"unknown check context {context!r}; valid: {', '.join(CONTEXTS)}")
    m = as_matrix(m)
    per_row = lambda v: np.ascontiguousarray(np.broadcast_to(np.asarray(v, np.int64), (len(m),)))  # noqa: E731
    return (m, CONTEXTS[context], per_row(0 if strategy is None else strategy),
            per_row(1 if n_tiles is None else n_tiles))


def cmx_required(m: np.ndarray) -> np.ndarray:
    """CMX bytes a workload needs: input0 + weights + output memory, each rounded up to the device's page.

    docs/vpunn.md §4.2 (2.x and 4.0: 16 KB pages, 5.0: 32 B).
    """
    return _cmx_rows(as_matrix(m), False)


def weights_bytes(m: np.ndarray) -> np.ndarray:
    """Bytes of each workload's weights tensor (input1) before page rounding: its CMX term, and what the layer
    model moves from DDR per tile when weights are not prefetched (the runtime's weight footprint)."""
    return _cmx_rows(as_matrix(m), True)


@njit(cache=True)
def _align(x, a):
    return -(-x // a) * a


@njit(cache=True)
def member(x, values) -> bool:
    for v in values:
        if x == v:
            return True
    return False


@njit(cache=True)
def _in_range(x, lo, hi) -> bool:
    return lo <= x <= hi


@njit(cache=True)
def int_field(row, field) -> int:
    return np.int64(row[field])


@njit(cache=True)
def bits(dtype_code) -> int:
    """Bits per element of a DataType code (the last type's for a code out of range)."""
    return _BITS[min(max(dtype_code, 0), len(_BITS) - 1)]


@njit(cache=True)
def dtype_bytes(dtype_code) -> float:
    """Bytes per element (0.5 for 4-bit types)."""
    return bits(dtype_code) / 8.0


@njit(cache=True)
def _nbytes(elements, n_bits):
    return (elements * n_bits + 7) // 8


# -- sanitizer ------------------------------------------------------------------------------------------------

@njit(cache=True)
def fixup_row(s) -> None:
    """`layer_fixups` of one row, in place."""
    dev, op = int_field(s, F.device), int_field(s, F.operation)
    if op == _AVEPOOL and dev < _V50:
        s[F.operation] = _DW
    if dev >= _V27 and op == _CONV and 1 <= int_field(s, F.in_c) < 16 and int_field(s, F.input_autopad) != 1:
        s[F.operation] = _CM
    if dev == _V20 or dev >= _V50:
        s[F.in_swizzling0] = s[F.in_swizzling1] = s[F.out_swizzling0] = 0


@njit(cache=True)
def sanitize_row(row, s) -> None:
    """`sanitize` of one row: writes the sanitized `row` into `s` (a copy of it)."""
    fixup_row(s)
    dev, op = int_field(row, F.device), int_field(s, F.operation)
    if member(op, (_ELT, _DW, _MAXPOOL, _AVEPOOL)) and int_field(row, F.out_c) >= 16 \
            and int_field(row, F.output_autopad) != 1 and int_field(row, F.in_c) != int_field(row, F.out_c):
        s[F.in_c] = s[F.out_c]
    for col in (F.in_dtype, F.out_dtype):
        code = int_field(row, col)
        if 0 <= code < len(_RESTRICT):
            s[col] = _RESTRICT[code]
    for col in (F.in_layout, F.out_layout):
        lay = int_field(row, col)
        if dev == _V20 and lay == LAYOUT.ZXY:
            s[col] = LAYOUT.ZMAJOR
        elif dev == _V20 and lay == LAYOUT.XYZ:
            s[col] = LAYOUT.CMAJOR
        elif dev >= _V27 and lay == LAYOUT.ZMAJOR:
            s[col] = LAYOUT.ZXY
        elif dev >= _V27 and lay == LAYOUT.CMAJOR:
            s[col] = LAYOUT.XYZ


@njit(cache=True)
def sanitize_rows(m, s):
    """`sanitize` of every row of `m` into `s` (a copy of `m`); returns `s`."""
    for i in range(len(m)):
        sanitize_row(m[i], s[i])
    return s


@njit(cache=True)
def _fixup_rows(s):
    for i in range(len(s)):
        fixup_row(s[i])
    return s


# -- weights and CMX footprint --------------------------------------------------------------------------------

@njit(cache=True)
def weight_dtype(row) -> int:
    """Dtype code of the weights: the optional `weight_type` where set, else the input dtype."""
    wt = int_field(row, F.weight_type)
    return wt if wt >= 0 else int_field(row, F.in_dtype)


@njit(cache=True)
def weight_channels(row, rules) -> int:
    """Channel count (samples per output channel) of the weights tensor [1, 1, Cw, C_out]; 0 for ELTWISE/MAXPOOL.

    VPU 2.7 aligns to 16 samples (CM_CONV 8 for 16-bit weights). VPU 4.0 aligns CONV and DW to 32 samples for
    8-bit weights (16 with weight sparsity or 16-bit weights; docs/vpunn.md §3.3). VPU 2.0 and NPU 5.0 do not
    align (they align the bytes instead, `_weight_mask_bytes`). `rules` is the device code whose rule applies (the
    row's own device; interface 11 always uses 2.7's, interface 4011 4.0's).
    """
    op = int_field(row, F.operation)
    kk = int_field(row, F.k_w) * int_field(row, F.k_h)
    c_kk = int_field(row, F.in_c) * kk
    wide = bits(weight_dtype(row)) >= 16
    narrow_40 = rules == _V40 and not wide
    dw = op == _DW or (op == _AVEPOOL and rules < _V50)
    conv = op == _CONV or op == _LNORM
    if rules == _V20 or rules == _V50:
        return c_kk if conv or op == _CM else (kk if dw else 0)
    if conv:
        return _align(c_kk, 32 if narrow_40 and int_field(row, F.weight_sparsity_enabled) == 0 else 16)
    if dw:
        return _align(kk, 32 if narrow_40 else 16)
    if op == _CM:
        return _align(c_kk, 8 if wide else 16)
    return 0


@njit(cache=True)
def _has_weights(op, dev) -> bool:
    return member(op, (_CONV, _DW, _CM, _LNORM)) or (op == _AVEPOOL and dev < _V50)


@njit(cache=True)
def _weight_mask_bytes(row) -> int:
    """Bytes of the weights of one output channel (CONV, DW, CM_CONV, LAYER_NORM; 0 otherwise), without the weight
    table.

    VPU 2.7 and 4.0 count the aligned sample count of `weight_channels` times the weights dtype size; VPU 2.0 and
    NPU 5.0 have no sample alignment and round the byte count up to 16 instead.
    """
    dev = int_field(row, F.device)
    if not _has_weights(int_field(row, F.operation), dev):
        return 0
    nbytes = _nbytes(weight_channels(row, dev), bits(weight_dtype(row)))
    return _align(nbytes, 16) if dev == _V20 or dev == _V50 else nbytes


@njit(cache=True)
def _elementwise(row) -> bool:
    op = int_field(row, F.operation)
    return op == _ELT or op == _ELT_MUL


@njit(cache=True)
def _same_footprint(row) -> bool:
    """Input0 and output0 have the same layout and the same dtype size (the runtime's in-place precondition)."""
    return int_field(row, F.in_layout) == int_field(row, F.out_layout) \
        and bits(int_field(row, F.in_dtype)) == bits(int_field(row, F.out_dtype))


@njit(cache=True)
def in_place_output(row) -> bool:
    """ELTWISE / ELTWISE_MUL writing its output over input0: the optional flag, else `_same_footprint`."""
    flag = int_field(row, F.in_place_output)
    return _elementwise(row) and (flag == 1 if flag >= 0 else _same_footprint(row))


@njit(cache=True)
def weightless(row) -> bool:
    """ELTWISE / ELTWISE_MUL without a second operand in CMX: the optional flag, else not `_same_footprint`."""
    flag = int_field(row, F.weightless)
    return _elementwise(row) and (flag == 1 if flag >= 0 else not _same_footprint(row))


@njit(cache=True)
def _tensor_bytes(w, h, c, b, layout, n_bits, align) -> int:
    """Bytes of a [W, H, C, B] tensor: its innermost dimension (per layout) in bytes, aligned, times the rest."""
    inner = _INNERMOST[min(max(layout, 0), len(_INNERMOST) - 1)]
    if inner == 0:
        n_inner, rest = w, h * c
    elif inner == 1:
        n_inner, rest = h, w * c
    else:
        n_inner, rest = c, w * h
    return _align(_nbytes(n_inner, n_bits), align) * (rest * b)


@njit(cache=True)
def _cmx_terms(row):
    """Input0, weights, output memory (bytes before page rounding) and page size of one workload."""
    return _cmx_npu(row) if int_field(row, F.device) >= _V40 else _cmx_2x(row)


@njit(cache=True)
def _cmx_2x(row):
    op, dev = int_field(row, F.operation), int_field(row, F.device)
    n_in = int_field(row, F.in_w) * int_field(row, F.in_h) * int_field(row, F.in_c) * int_field(row, F.in_b)
    in0 = _nbytes(n_in, bits(int_field(row, F.in_dtype)))
    if int_field(row, F.in_sparsity_enabled) != 0:
        in0 += _align(-(-n_in // 8), 16)
    out0 = _nbytes(int_field(row, F.mem_w) * int_field(row, F.mem_h) * int_field(row, F.mem_c)
                   * int_field(row, F.out_b),
                   bits(int_field(row, F.out_dtype)))
    if op == _ELT and int_field(row, F.in_layout) == int_field(row, F.out_layout) and out0 == in0:
        out0 = 0
    c_out = int_field(row, F.out_c)
    wbytes = _weight_mask_bytes(row) * c_out
    if int_field(row, F.weight_sparsity_enabled) != 0:
        wbytes = np.int64(np.ceil(wbytes * (1.0 - row[F.weight_sparsity]))) \
            + c_out * _align(-(-weight_channels(row, dev) // 8), 16)
    if _has_weights(op, dev):
        in1 = wbytes + 16 * c_out
    else:
        in1 = in0 if op == _ELT else 0
    return in0, in1, out0, PAGE


@njit(cache=True)
def _cmx_npu(row):
    """docs/vpunn.md §4.2."""
    op, dev = int_field(row, F.operation), int_field(row, F.device)
    v50 = dev == _V50
    w, h, c, b = int_field(row, F.in_w), int_field(row, F.in_h), int_field(row, F.in_c), int_field(row, F.in_b)
    in_layout = int_field(row, F.in_layout)
    in0 = _tensor_bytes(w, h, c, b, in_layout, bits(int_field(row, F.in_dtype)), 1)
    if int_field(row, F.in_sparsity_enabled) != 0:
        c_map = (4 if c < 5 else 16) if op == _CM else c
        in0 += _align(w * h * c_map * b // 8, 16)
    c_out, w_bits = int_field(row, F.out_c), bits(weight_dtype(row))
    # 4.0 sizes the weight masks in input0's layout: with W or H innermost, a mask is a single element
    z_inner = _INNERMOST[min(max(in_layout, 0), len(_INNERMOST) - 1)] == 2
    wbytes = (_weight_mask_bytes(row) if v50 or z_inner else _nbytes(1, w_bits)) * c_out
    if int_field(row, F.weight_sparsity_enabled) != 0:
        skipped = np.floor(np.float32(wbytes) * np.float32(row[F.weight_sparsity]))
        wbytes = wbytes - np.int64(skipped) + c_out * _align(weight_channels(row, dev) // 8, 16)
    if _has_weights(op, dev):
        in1 = wbytes + 16 * c_out
    elif _elementwise(row) and not weightless(row):
        # the second ELTWISE operand: a [H, C, W, B] permutation of input0 on 4.0, in the weights dtype
        in1 = _tensor_bytes(w, h, c, b, in_layout, w_bits, 1) if v50 else \
            _tensor_bytes(h, c, w, b, in_layout, w_bits, 1)
    else:
        in1 = 0
    out0 = 0
    if not in_place_output(row):
        out0 = _tensor_bytes(int_field(row, F.mem_w), int_field(row, F.mem_h), int_field(row, F.mem_c),
                             int_field(row, F.out_b),
                             int_field(row, F.out_layout), bits(int_field(row, F.out_dtype)),
                             16 if v50 and int_field(row, F.superdense) != 1 else 1)
    return in0, in1, out0, (32 if v50 else PAGE)


@njit(cache=True)
def cmx_required_row(row) -> int:
    in0, in1, out0, page = _cmx_terms(row)
    return _align(in0, page) + _align(in1, page) + _align(out0, page)


@njit(cache=True)
def _cmx_rows(m, weights_only):
    out = np.empty(len(m), dtype=np.int64)
    for i in range(len(m)):
        out[i] = _cmx_terms(m[i])[1] if weights_only else cmx_required_row(m[i])
    return out


# -- validity -------------------------------------------------------------------------------------------------

@njit(cache=True)
def _out_size(size_in, pad_a, pad_b, k, s):
    """(in + pads - k) / s + 1 with C's truncating division."""
    num = size_in + pad_a + pad_b - k
    return np.sign(num) * (abs(num) // max(s, 1)) + 1


@njit(cache=True)
def _mult16(c, hi) -> bool:
    return c % 16 == 0 and 16 <= c <= hi


#: the rules `failed_rule` checks, in order; a rule's code is its index + 1 (0: every rule holds). The first three
#: have error codes of their own (`check_row`), the configuration rules share one.
RULES = ("device", "operation", "CMX size", "output write tiles", "ISI strategy", "kernel size", "padding", "stride",
         "input size", "output width", "output height", "batch", "output channels", "input channels", "data types",
         "layouts", "execution mode", "sparsity")
_RULE_DEVICE, _RULE_OPERATION, _RULE_CMX = 1, 2, 3


@njit(cache=True)
def check_row(row, context, strategy, n_tiles) -> int:
    """`check` of one row: error code, 0 if valid. `strategy` and `n_tiles` count in the "layer" context only."""
    return _error_code(failed_rule(row, context, strategy, n_tiles), context)


@njit(cache=True)
def _error_code(rule, context) -> int:
    """The runtime's error code of a broken rule (0: none broken)."""
    if rule == 0:
        return 0
    if rule == _RULE_DEVICE:
        return ERROR_INVALID_INPUT_DEVICE
    if rule == _RULE_OPERATION:
        return ERROR_INVALID_INPUT_OPERATION
    if rule == _RULE_CMX:
        return ERROR_INPUT_TOO_BIG
    return ERROR_INVALID_LAYER_CONFIGURATION if context == _LAYER else ERROR_INVALID_INPUT_CONFIGURATION


@njit(cache=True)
def failed_rule(row, context, strategy, n_tiles) -> int:
    """The code of the first rule of `RULES` that one row breaks, 0 if it breaks none."""
    dev, op = int_field(row, F.device), int_field(row, F.operation)
    if dev != _V20 and dev != _V27 and dev != _V40 and dev != _V50:
        return _RULE_DEVICE
    if not (member(op, (_CONV, _DW, _ELT, _MAXPOOL, _CM)) or (dev == _V50 and member(op, (_ELT_MUL, _LNORM,
                                                                                            _AVEPOOL)))):
        return _RULE_OPERATION
    if context != _LAYER and cmx_required_row(row) > _CMX_BY_DEVICE[dev]:
        return _RULE_CMX
    checks = (_write_tiles_ok(row), _isi_ok(row, context), _kernel_ok(row), _padding_ok(row), _stride_ok(row, context),
              _input_size_ok(row, context, strategy, n_tiles), _output_width_ok(row),
              _output_height_ok(row, context, strategy), _batch_ok(row),
              _output_channels_ok(row, context, strategy, n_tiles), _input_channels_ok(row, context, strategy, n_tiles),
              _dtypes_ok(row), _layouts_ok(row), _execution_mode_ok(row, context), _sparsity_ok(row))
    for i, ok in enumerate(checks):
        if not ok:
            return _RULE_CMX + 1 + i
    return 0


# -- the configuration rules of one row of a known device and operation ----------------------------------------

@njit(cache=True)
def _split_dims(context, strategy):
    """Whether a layer is split over channels, H or W (only in the "layer" context)."""
    layer = context == _LAYER
    return layer and member(strategy, _SPLIT_C), layer and member(strategy, _SPLIT_H), layer and member(strategy,
                                                                                                         _SPLIT_W)


@njit(cache=True)
def _write_tiles_ok(row) -> bool:
    dev, owt = int_field(row, F.device), int_field(row, F.output_write_tiles)
    return owt == 1 if dev == _V20 else _in_range(owt, 1, 8 if dev == _V40 or dev == _V50 else 2)


@njit(cache=True)
def _isi_ok(row, context) -> bool:
    dev, owt, isi = int_field(row, F.device), int_field(row, F.output_write_tiles), int_field(row, F.isi_strategy)
    v50 = dev == _V50
    if dev == _V20:
        return isi == ISI.CLUSTERING
    if context == _LAYER:
        return _in_range(isi, 0, 2) and not (v50 and isi == ISI.SPLIT_OVER_H)
    return (isi == ISI.CLUSTERING or (isi == ISI.SPLIT_OVER_H and not v50)
            or (isi == ISI.SPLIT_OVER_K and owt > 1))  # SPLIT_OVER_H is gone on 5.0


@njit(cache=True)
def _kernel_ok(row) -> bool:
    max_k = 1 if int_field(row, F.operation) == _ELT else MAX_KERNEL
    return _in_range(int_field(row, F.k_w), 1, max_k) and _in_range(int_field(row, F.k_h), 1, max_k)


@njit(cache=True)
def _padding_ok(row) -> bool:
    kw, kh = int_field(row, F.k_w), int_field(row, F.k_h)
    return (_in_range(int_field(row, F.pad_top), 0, kh // 2) and _in_range(int_field(row, F.pad_bottom), 0, kh // 2)
            and _in_range(int_field(row, F.pad_left), 0, kw // 2)
            and _in_range(int_field(row, F.pad_right), 0, kw // 2))


@njit(cache=True)
def _stride_ok(row, context) -> bool:
    sw, sh = int_field(row, F.s_w), int_field(row, F.s_h)
    max_s = 1 if int_field(row, F.operation) == _ELT else MAX_STRIDE
    if context == _LAYER:
        win = int_field(row, F.in_w) + int_field(row, F.pad_left) + int_field(row, F.pad_right)
        hin = int_field(row, F.in_h) + int_field(row, F.pad_top) + int_field(row, F.pad_bottom)
        return _in_range(sw, 1, min(max_s, win)) and _in_range(sh, 1, min(max_s, hin))
    return _in_range(sw, 1, max_s) and _in_range(sh, 1, max_s)


@njit(cache=True)
def _input_size_ok(row, context, strategy, n_tiles) -> bool:
    """A layer split along W / H needs one more input column / row and may be nTiles times as large there."""
    _, split_h, split_w = _split_dims(context, strategy)
    kw, kh = int_field(row, F.k_w), int_field(row, F.k_h)
    pads_w = int_field(row, F.pad_left) + int_field(row, F.pad_right)
    pads_h = int_field(row, F.pad_top) + int_field(row, F.pad_bottom)
    return (_in_range(int_field(row, F.in_w), max(1, kw - pads_w + split_w), MAX_DIM * (n_tiles if split_w else 1))
            and _in_range(int_field(row, F.in_h), max(1, kh - pads_h + split_h),
                          MAX_DIM * (n_tiles if split_h else 1)))


@njit(cache=True)
def _output_width_ok(row) -> bool:
    return int_field(row, F.out_w) == _out_size(int_field(row, F.in_w), int_field(row, F.pad_left),
                                                int_field(row, F.pad_right), int_field(row, F.k_w),
                                                int_field(row, F.s_w))


@njit(cache=True)
def _output_height_ok(row, context, strategy) -> bool:
    """Exact in a layer (and more than one row / column to split), up to the halo rows of SOH in a workload."""
    hin, kh, sh = int_field(row, F.in_h), int_field(row, F.k_h), int_field(row, F.s_h)
    pt, pb, hout = int_field(row, F.pad_top), int_field(row, F.pad_bottom), int_field(row, F.out_h)
    h_formula = _out_size(hin, pt, pb, kh, sh)
    if context == _LAYER:
        _, split_h, split_w = _split_dims(context, strategy)
        return hout == h_formula and not (split_h and hout <= 1) and not (split_w and int_field(row, F.out_w) <= 1)
    h_hi = h_formula
    if int_field(row, F.isi_strategy) == ISI.SPLIT_OVER_H:
        h_hi = _out_size(hin + kh * (pt == 0) + kh * (pb == 0), pt, pb, kh, sh)
    return _in_range(hout, h_formula, h_hi)


@njit(cache=True)
def _batch_ok(row) -> bool:
    in_b = int_field(row, F.in_b)
    return int_field(row, F.out_b) == in_b and in_b >= 1 and (int_field(row, F.device) != _V50 or in_b == 1)


@njit(cache=True)
def _output_channels_ok(row, context, strategy, n_tiles) -> bool:
    split_c, _, _ = _split_dims(context, strategy)
    cout = int_field(row, F.out_c)
    out_pad = int_field(row, F.device) == _V50 and int_field(row, F.output_autopad) == 1
    if not (_mult16(cout, MAX_DIM * (n_tiles if split_c else 1)) or (out_pad and _in_range(cout, 1, 15))):
        return False
    return not (context == _LAYER and strategy == TILING.SOK and cout < 32)


@njit(cache=True)
def _input_channels_ok(row, context, strategy, n_tiles) -> bool:
    split_c, _, _ = _split_dims(context, strategy)
    scale_c = n_tiles if split_c else 1
    dev, op = int_field(row, F.device), int_field(row, F.operation)
    v20, v50, npu = dev == _V20, dev == _V50, dev == _V40 or dev == _V50
    cin, cout = int_field(row, F.in_c), int_field(row, F.out_c)
    in_pad, out_pad = int_field(row, F.input_autopad) == 1, v50 and int_field(row, F.output_autopad) == 1
    dw_like = member(op, (_DW, _MAXPOOL, _AVEPOOL))
    if context == _WORKLOAD:
        dw_ok = _mult16(cin, MAX_DIM) if v20 else member(cin, (16, 32, 64))
        cm_hi = 15 if npu else 16
    else:
        dw_ok = _mult16(cin, MAX_DIM * scale_c)
        cm_hi = 16 if v20 else 15
    # 5.0 with input autopad: CONV / CM_CONV also take 1..15 channels of 8-bit input, 1..9 of 16-bit input
    in_dt = int_field(row, F.in_dtype)
    pad_hi = (9 if bits(in_dt) == 16 else 15) if member(in_dt, _VALID_DTYPES_50) else 0
    if member(op, (_CONV, _ELT, _ELT_MUL, _LNORM)):
        cin_ok = _mult16(cin, MAX_DIM * scale_c)
    elif dw_like:
        cin_ok = dw_ok
    else:
        cin_ok = op == _CM and _in_range(cin, 1, cm_hi)
    cin_ok = cin_ok or (v50 and in_pad and (op == _CONV or op == _CM) and _in_range(cin, 1, pad_hi))
    same_c = dw_like or op == _ELT or op == _ELT_MUL
    return cin_ok and (not same_c or cin == cout or out_pad)


@njit(cache=True)
def _dtypes_ok(row) -> bool:
    dev = int_field(row, F.device)
    in_dt, out_dt, wt_dt = int_field(row, F.in_dtype), int_field(row, F.out_dtype), weight_dtype(row)
    if dev == _V40:
        return (member(in_dt, _VALID_DTYPES) and member(out_dt, _VALID_OUT_DTYPES_40)
                and member(wt_dt, _VALID_WT_DTYPES_40))
    if dev == _V50:
        return (member(in_dt, _VALID_DTYPES_50) and member(out_dt, _VALID_OUT_DTYPES_50)
                and member(wt_dt, _VALID_WT_DTYPES_50))
    return member(in_dt, _VALID_DTYPES) and member(out_dt, _VALID_DTYPES)


@njit(cache=True)
def _layouts_ok(row) -> bool:
    layouts = _LAYOUTS_20 if int_field(row, F.device) == _V20 else _PERMUTED_LAYOUTS
    return member(int_field(row, F.in_layout), layouts) and member(int_field(row, F.out_layout), layouts)


@njit(cache=True)
def _execution_mode_ok(row, context) -> bool:
    """Checked on a workload only; 5.0 restricts the mode per operation."""
    if context != _WORKLOAD:
        return True
    dev, op, mode = int_field(row, F.device), int_field(row, F.operation), int_field(row, F.execution_mode)
    if not member(mode, _MODES_20 if dev == _V20 else _MODES_27):
        return False
    if dev != _V50:
        return True
    if member(op, (_DW, _MAXPOOL, _AVEPOOL)):
        return mode == MODE.CUBOID_16x16
    return mode == MODE.CUBOID_8x16 if op == _ELT or op == _ELT_MUL else True


@njit(cache=True)
def _sparsity_ok(row) -> bool:
    act_sp, w_sp = row[F.act_sparsity], row[F.weight_sparsity]
    in_en, w_en = int_field(row, F.in_sparsity_enabled) != 0, int_field(row, F.weight_sparsity_enabled) != 0
    if not (_in_range(act_sp, 0.0, 1.0) and _in_range(w_sp, 0.0, 1.0)) or (in_en and act_sp < 0.01):
        return False
    if member(int_field(row, F.operation), (_CONV, _ELT, _ELT_MUL, _LNORM)):
        return (in_en or act_sp == 0) and (w_en or w_sp == 0)
    return not in_en and not w_en and act_sp == 0 and w_sp == 0


@njit(cache=True)
def _row_codes(m, context, strategy, n_tiles, error_codes):
    """Per row (`strategy` and `n_tiles`: one per row): the runtime's error code (`error_codes`), else the code of
    the first broken rule."""
    out = np.empty(len(m), dtype=np.int64)
    for i in range(len(m)):
        rule = failed_rule(m[i], context, strategy[i], n_tiles[i])
        out[i] = _error_code(rule, context) if error_codes else rule
    return out
