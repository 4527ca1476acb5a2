"""The workload sanitizer and validity rules (vpunn-reference.md §5, and the layer variants of §6; VPU 4.0 and
NPU 5.0: npu45-notes §5), vectorised.

Every function works on a workload matrix (see workload.py): one row per workload, all rows at once.
`check` has three contexts:

* "workload": `VPUCostModel::DPU` on one workload (after `sanitize`);
* "tile": the tile checks of the layer model (no execution-mode check, DW/MAXPOOL any multiple of 16);
* "layer": the whole-layer validation of the layer model (no CMX or execution-mode check, limits of the split
  dimensions scaled by the tile count, output height exact; npu45-notes §9 for the 4.0 / 5.0 strategies).
"""
from __future__ import annotations

import numpy as np

from .devices import DEVICES
from .enums import (DTYPE_BITS, DataType, ExecutionMode, ISIStrategy, Layout, Operation, VPUDevice, VPUTilingStrategy,
                    int_codes)
from .errors import (ERROR_INPUT_TOO_BIG, ERROR_INVALID_INPUT_CONFIGURATION, ERROR_INVALID_INPUT_DEVICE,
                     ERROR_INVALID_INPUT_OPERATION, ERROR_INVALID_LAYER_CONFIGURATION)
from .workload import F

__all__ = ["sanitize", "layer_fixups", "check", "cmx_required", "weights_bytes", "weight_channels",
           "weight_mask_bytes", "weight_dtype", "in_place_output", "weightless", "dtype_bytes", "PAGE"]

_DTYPE = int_codes(DataType)
_ISI = int_codes(ISIStrategy)
_LAYOUT = int_codes(Layout)
_OP = int_codes(Operation)
_DEV = int_codes(VPUDevice)
_TILING = int_codes(VPUTilingStrategy)
_MODE = int_codes(ExecutionMode)

PAGE = 16 * 1024  # CMX page rounding of each tensor
MAX_DIM = 8192
MAX_KERNEL = 15
MAX_STRIDE = 8

_CONV, _DW, _ELT, _MAXPOOL, _AVEPOOL, _CM = (_OP.CONVOLUTION, _OP.DW_CONVOLUTION, _OP.ELTWISE,
                                             _OP.MAXPOOL, _OP.AVEPOOL, _OP.CM_CONVOLUTION)
_LNORM, _ELT_MUL = _OP.LAYER_NORM, _OP.ELTWISE_MUL
_V20, _V27, _V40, _V50 = _DEV.VPU_2_0, _DEV.VPU_2_7, _DEV.VPU_4_0, _DEV.NPU_5_0
_BITS = np.array(DTYPE_BITS, dtype=np.int64)
# same-size datatype restriction of the sanitizer
_RESTRICT = np.arange(len(DataType))
for _src, _dst in ((_DTYPE.INT8, _DTYPE.UINT8), (_DTYPE.BFLOAT16, _DTYPE.FLOAT16), (_DTYPE.INT4, _DTYPE.UINT4),
                   (_DTYPE.BF8, _DTYPE.HF8), (_DTYPE.INT16, _DTYPE.UINT16), (_DTYPE.INT2, _DTYPE.UINT2),
                   (_DTYPE.INT1, _DTYPE.UINT1)):
    _RESTRICT[_src] = _dst
_VALID_DTYPES = (_DTYPE.UINT8, _DTYPE.INT8, _DTYPE.FLOAT16, _DTYPE.BFLOAT16)
_FP8 = (_DTYPE.HF8, _DTYPE.BF8)
_VALID_OUT_DTYPES_40 = _VALID_DTYPES + (_DTYPE.FLOAT32,)
_VALID_WT_DTYPES_40 = _VALID_DTYPES + (_DTYPE.INT4, _DTYPE.UINT4)
_PERMUTED_LAYOUTS = (_LAYOUT.XYZ, _LAYOUT.XZY, _LAYOUT.YXZ, _LAYOUT.YZX, _LAYOUT.ZXY, _LAYOUT.ZYX)
#: which of (W, H, C) is the innermost dimension of each layout (the first letter; ZMAJOR = ZXY, CMAJOR = XYZ)
_INNERMOST = np.full(len(Layout), 2, dtype=np.int64)
for _lay in (_LAYOUT.CMAJOR, _LAYOUT.XYZ, _LAYOUT.XZY):
    _INNERMOST[_lay] = 0
_INNERMOST[[_LAYOUT.YXZ, _LAYOUT.YZX]] = 1
_CMX_BY_DEVICE = np.array([DEVICES[d].cmx_bytes if d in DEVICES else 0 for d in VPUDevice], dtype=np.int64)


def _cols(m: np.ndarray) -> np.ndarray:
    """The matrix as int64 in column-major order: every column contiguous (column ops dominate)."""
    return np.asfortranarray(m, dtype=np.int64)


def _align(x, a):
    return -(-x // a) * a


def dtype_bytes(dtype_codes) -> np.ndarray:
    """Bytes per element (float, 0.5 for 4-bit types)."""
    return _bits(np.asarray(dtype_codes, dtype=np.int64)) / 8.0


def sanitize(m: np.ndarray) -> np.ndarray:
    """The changes `VPUCostModel::sanitize_workload` applies before validation (§5), on a copy: the layer model's
    fixups, then channel, data type and layout rules."""
    s = layer_fixups(m)
    a = _cols(m)
    dev, op = a[:, F.device], s[:, F.operation].astype(np.int64)
    same_c = _member(op, (_ELT, _DW, _MAXPOOL, _AVEPOOL)) & (a[:, F.out_c] >= 16) & (a[:, F.output_autopad] != 1) \
        & (a[:, F.in_c] != a[:, F.out_c])
    s[same_c, F.in_c] = s[same_c, F.out_c]
    for col in (F.in_dtype, F.out_dtype):
        codes = a[:, col]
        known = (codes >= 0) & (codes < len(_RESTRICT))
        s[known, col] = _RESTRICT[codes[known]]
    v20, newer = dev == _V20, dev >= _V27
    for col in (F.in_layout, F.out_layout):
        lay = a[:, col]
        s[v20 & (lay == _LAYOUT.ZXY), col] = _LAYOUT.ZMAJOR
        s[v20 & (lay == _LAYOUT.XYZ), col] = _LAYOUT.CMAJOR
        s[newer & (lay == _LAYOUT.ZMAJOR), col] = _LAYOUT.ZXY
        s[newer & (lay == _LAYOUT.CMAJOR), col] = _LAYOUT.XYZ
    return s


def layer_fixups(m: np.ndarray) -> np.ndarray:
    """The only sanitizer changes the layer model makes to a whole layer (§6 step 1), on a copy.

    NPU 5.0 forces every swizzling to KEY_0 (as 2.0 does) and keeps AVEPOOL as an operation of its own; a
    CONVOLUTION with an autopadded input stays a CONVOLUTION (npu45-notes §5.1).
    """
    s = np.array(m, dtype=np.float64, order="F")
    a = _cols(s)
    dev, op = a[:, F.device], a[:, F.operation]
    s[(op == _AVEPOOL) & (dev < _V50), F.operation] = _DW
    to_cm = (dev >= _V27) & (op == _CONV) & (a[:, F.in_c] >= 1) & (a[:, F.in_c] < 16) & (a[:, F.input_autopad] != 1)
    s[to_cm, F.operation] = _CM
    key0 = (dev == _V20) | (dev >= _V50)
    for col in (F.in_swizzling0, F.in_swizzling1, F.out_swizzling0):
        s[key0, col] = 0
    return s


def _bits(dtype_codes: np.ndarray) -> np.ndarray:
    return _BITS[np.clip(dtype_codes, 0, len(_BITS) - 1)]


def _nbytes(elements: np.ndarray, bits: np.ndarray) -> np.ndarray:
    return (elements * bits + 7) // 8


def weight_dtype(a: np.ndarray) -> np.ndarray:
    """Dtype code of the weights: the optional `weight_type` where set, else the input dtype."""
    wt = a[:, F.weight_type]
    return np.where(wt >= 0, wt, a[:, F.in_dtype])


def weight_channels(a: np.ndarray, rules=None) -> np.ndarray:
    """Channel count (samples per output channel) of the weights tensor [1, 1, Cw, C_out]; 0 for ELTWISE/MAXPOOL.

    VPU 2.7 aligns to 16 samples (§3.4, CM_CONV 8 for 16-bit weights). VPU 4.0 aligns CONV and DW to 32 samples
    for 8-bit weights (16 with weight sparsity or 16-bit weights, npu45-notes §4.1). VPU 2.0 and NPU 5.0 do not
    align (they align the bytes instead, `weight_mask_bytes`). `rules` is the device code whose rule applies,
    default each row's device (interface 11 always uses 2.7's, interface 4011 4.0's).
    """
    op, kk = a[:, F.operation], a[:, F.k_w] * a[:, F.k_h]
    c_kk = a[:, F.in_c] * kk
    rules = a[:, F.device] if rules is None else rules
    wide = _bits(weight_dtype(a)) >= 16
    narrow_40 = (rules == _V40) & ~wide
    conv_align = np.where(narrow_40 & (a[:, F.weight_sparsity_enabled] == 0), 32, 16)
    dw = (op == _DW) | ((op == _AVEPOOL) & (rules < _V50))
    conv = _member(op, (_CONV, _LNORM))
    aligned = np.select([conv, dw, op == _CM], [_align(c_kk, conv_align), _align(kk, np.where(narrow_40, 32, 16)),
                                                _align(c_kk, np.where(wide, 8, 16))], 0)
    unaligned = np.where(conv | (op == _CM), c_kk, np.where(dw, kk, 0))
    return np.where((rules == _V20) | (rules == _V50), unaligned, aligned)


def _has_weights(op: np.ndarray, dev: np.ndarray) -> np.ndarray:
    return _member(op, (_CONV, _DW, _CM, _LNORM)) | ((op == _AVEPOOL) & (dev < _V50))


def weight_mask_bytes(a: np.ndarray) -> np.ndarray:
    """Bytes of the weights of one output channel (CONV, DW, CM_CONV, LAYER_NORM; 0 otherwise), without the weight
    table.

    VPU 2.7 and 4.0 count the aligned sample count of `weight_channels` times the weights dtype size; VPU 2.0 and
    NPU 5.0 have no sample alignment and round the byte count up to 16 instead.
    """
    dev = a[:, F.device]
    nbytes = _nbytes(weight_channels(a), _bits(weight_dtype(a)))
    nbytes = np.where((dev == _V20) | (dev == _V50), _align(nbytes, 16), nbytes)
    return np.where(_has_weights(a[:, F.operation], dev), nbytes, 0)


def _elementwise(a: np.ndarray) -> np.ndarray:
    return (a[:, F.operation] == _ELT) | (a[:, F.operation] == _ELT_MUL)


def _same_footprint(a: np.ndarray) -> np.ndarray:
    """Input0 and output0 have the same layout and the same dtype size (the runtime's in-place precondition)."""
    return (a[:, F.in_layout] == a[:, F.out_layout]) & (_bits(a[:, F.in_dtype]) == _bits(a[:, F.out_dtype]))


def in_place_output(a: np.ndarray) -> np.ndarray:
    """ELTWISE / ELTWISE_MUL writing its output over input0: the optional flag, else `_same_footprint`."""
    flag = a[:, F.in_place_output]
    return _elementwise(a) & np.where(flag >= 0, flag == 1, _same_footprint(a))


def weightless(a: np.ndarray) -> np.ndarray:
    """ELTWISE / ELTWISE_MUL without a second operand in CMX: the optional flag, else not `_same_footprint`."""
    flag = a[:, F.weightless]
    return _elementwise(a) & np.where(flag >= 0, flag == 1, ~_same_footprint(a))


def _tensor_bytes(dims, layout: np.ndarray, bits: np.ndarray, align=1) -> np.ndarray:
    """Bytes of a [W, H, C, B] tensor: its innermost dimension (per layout) in bytes, aligned, times the rest."""
    w, h, c, b = dims
    inner = _INNERMOST[np.clip(layout, 0, len(_INNERMOST) - 1)]
    n_inner = np.choose(inner, (w, h, c))
    rest = np.choose(inner, (h * c, w * c, w * h)) * b
    return _align(_nbytes(n_inner, bits), align) * rest


def cmx_required(m: np.ndarray, a: np.ndarray | None = None) -> np.ndarray:
    """CMX bytes a workload needs: input0 + weights + output memory, each rounded up to the device's page.

    vpunn-reference.md §5 (2.x, 16 KB pages), npu45-notes §5.2 (4.0: 16 KB pages, 5.0: 32 B).
    `a` may pass `m` already converted to int64.
    """
    in0, in1, out0, page = _cmx_terms(m, a)
    return _align(in0, page) + _align(in1, page) + _align(out0, page)


def weights_bytes(m: np.ndarray) -> np.ndarray:
    """Bytes of each workload's weights tensor (input1) before page rounding: its CMX term, and what the layer
    model moves from DDR per tile when weights are not prefetched (the runtime's weight footprint)."""
    return _cmx_terms(m)[1]


def _cmx_terms(m: np.ndarray, a: np.ndarray | None = None) -> np.ndarray:
    """Rows input0, weights, output memory (bytes before page rounding) and page size; one column per workload."""
    a = _cols(m) if a is None else a
    npu = a[:, F.device] >= _V40
    if not npu.any():
        return _cmx_2x(m, a)
    if npu.all():
        return _cmx_npu(m, a)
    out = np.empty((4, len(a)), dtype=np.int64)
    out[:, ~npu] = _cmx_2x(m[~npu], a[~npu])
    out[:, npu] = _cmx_npu(m[npu], a[npu])
    return out


def _cmx_2x(m: np.ndarray, a: np.ndarray) -> np.ndarray:
    op = a[:, F.operation]
    n_in = a[:, F.in_w] * a[:, F.in_h] * a[:, F.in_c] * a[:, F.in_b]
    in0 = _nbytes(n_in, _bits(a[:, F.in_dtype]))
    sparse_in = a[:, F.in_sparsity_enabled] != 0
    if sparse_in.any():
        in0 = in0 + np.where(sparse_in, _align(-(-n_in // 8), 16), 0)
    out0 = _nbytes(a[:, F.mem_w] * a[:, F.mem_h] * a[:, F.mem_c] * a[:, F.out_b], _bits(a[:, F.out_dtype]))
    in_place = (op == _ELT) & (a[:, F.in_layout] == a[:, F.out_layout]) & (out0 == in0)
    out0 = np.where(in_place, 0, out0)
    c_out = a[:, F.out_c]
    wbytes = weight_mask_bytes(a) * c_out
    sparse = a[:, F.weight_sparsity_enabled] != 0
    if sparse.any():
        sparse_bytes = np.ceil(wbytes * (1.0 - m[:, F.weight_sparsity])).astype(np.int64) \
            + c_out * _align(-(-weight_channels(a) // 8), 16)
        wbytes = np.where(sparse, sparse_bytes, wbytes)
    in1 = np.where(_has_weights(op, a[:, F.device]), wbytes + 16 * c_out, np.where(op == _ELT, in0, 0))
    return np.stack([in0, in1, out0, np.full(len(a), PAGE)])


def _cmx_npu(m: np.ndarray, a: np.ndarray) -> np.ndarray:
    """npu45-notes §5.2."""
    op, v50 = a[:, F.operation], a[:, F.device] == _V50
    w, h, c, b = a[:, F.in_w], a[:, F.in_h], a[:, F.in_c], a[:, F.in_b]
    in0 = _tensor_bytes((w, h, c, b), a[:, F.in_layout], _bits(a[:, F.in_dtype]))
    sparse_in = a[:, F.in_sparsity_enabled] != 0
    if sparse_in.any():
        c_map = np.where(op == _CM, np.where(c < 5, 4, 16), c)
        in0 = in0 + np.where(sparse_in, _align(w * h * c_map * b // 8, 16), 0)
    c_out, w_bits = a[:, F.out_c], _bits(weight_dtype(a))
    # 4.0 sizes the weight masks in input0's layout: with W or H innermost, a mask is a single element
    z_inner = _INNERMOST[a[:, F.in_layout]] == 2
    wbytes = np.where(v50 | z_inner, weight_mask_bytes(a), _nbytes(1, w_bits)) * c_out
    sparse_w = a[:, F.weight_sparsity_enabled] != 0
    if sparse_w.any():
        skipped = np.floor(wbytes.astype(np.float32) * m[:, F.weight_sparsity].astype(np.float32))
        sparse_bytes = wbytes - skipped.astype(np.int64) + c_out * _align(weight_channels(a) // 8, 16)
        wbytes = np.where(sparse_w, sparse_bytes, wbytes)
    # the second ELTWISE operand: a [H, C, W, B] permutation of input0 on 4.0, in the weights dtype
    second = _tensor_bytes((np.where(v50, w, h), np.where(v50, h, c), np.where(v50, c, w), b), a[:, F.in_layout],
                           w_bits)
    in1 = np.select([_has_weights(op, a[:, F.device]), _elementwise(a) & ~weightless(a)],
                    [wbytes + 16 * c_out, second], 0)
    out_align = np.where(v50 & (a[:, F.superdense] != 1), 16, 1)
    out0 = _tensor_bytes((a[:, F.mem_w], a[:, F.mem_h], a[:, F.mem_c], a[:, F.out_b]), a[:, F.out_layout],
                         _bits(a[:, F.out_dtype]), out_align)
    out0 = np.where(in_place_output(a), 0, out0)
    page = np.where(v50, 32, PAGE)
    return np.stack([in0, in1, out0, page])


def _member(x: np.ndarray, values) -> np.ndarray:
    """x in values, for a handful of small integer codes (cheaper than np.isin on small batches)."""
    out = x == values[0]
    for v in values[1:]:
        out |= x == v
    return out


def _in_range(x, lo, hi):
    return (x >= lo) & (x <= hi)


def _out_size(size_in, pad_a, pad_b, k, s):
    """(in + pads - k) / s + 1 with C's truncating division."""
    num = size_in + pad_a + pad_b - k
    return np.sign(num) * (np.abs(num) // np.maximum(s, 1)) + 1


# layer strategies that split the output channels / rows / columns over the tiles (the runtime's SOHW and SOHK
# are validated like this but never split)
_SPLIT_C = (_TILING.SOK, _TILING.SOHK)
_SPLIT_H = (_TILING.SOH_Overlapped, _TILING.SOHO_K_SWITCH, _TILING.SOHW, _TILING.SOHK)
_SPLIT_W = (_TILING.SOW, _TILING.SOHW)


def check(m: np.ndarray, context: str = "workload", strategy=None, n_tiles=None) -> np.ndarray:
    """Error code per row (0 = valid) of already sanitized / fixed-up workloads.

    Args:
        m: workload matrix.
        context: "workload", "tile" or "layer" (see the module docstring).
        strategy: for "layer", the VPUTilingStrategy per row (scalar or array).
        n_tiles: for "layer", the tile count per row (scalar or array); the caller sets owt to it.
    """
    a = _cols(m)
    n = len(a)
    dev, op = a[:, F.device], a[:, F.operation]
    v20, v27, v40, v50 = dev == _V20, dev == _V27, dev == _V40, dev == _V50
    npu = v40 | v50
    layer = context == "layer"
    if layer:
        strategy = np.broadcast_to(np.asarray(strategy, dtype=np.int64), (n,))
        n_tiles = np.broadcast_to(np.asarray(n_tiles, dtype=np.int64), (n,))
        sok = strategy == _TILING.SOK
        split_c, split_h, split_w = (_member(strategy, group) for group in (_SPLIT_C, _SPLIT_H, _SPLIT_W))
    else:
        sok = split_c = split_h = split_w = np.zeros(n, bool)
    scale = (lambda split: np.where(split, n_tiles, 1)) if layer else (lambda split: 1)  # noqa: E731
    scale_c = scale(split_c)
    is_elt = op == _ELT
    ok = np.ones(n, bool)

    owt, isi = a[:, F.output_write_tiles], a[:, F.isi_strategy]
    ok &= np.where(v20, owt == 1, _in_range(owt, 1, np.where(npu, 8, 2)))
    if layer:
        ok &= np.where(v20, isi == _ISI.CLUSTERING, _in_range(isi, 0, 2) & ~(v50 & (isi == _ISI.SPLIT_OVER_H)))
    else:  # SPLIT_OVER_H is gone on 5.0
        ok &= np.where(v20, isi == _ISI.CLUSTERING,
                       (isi == _ISI.CLUSTERING) | ((isi == _ISI.SPLIT_OVER_H) & ~v50)
                       | ((isi == _ISI.SPLIT_OVER_K) & (owt > 1)))

    kw, kh, sw, sh = a[:, F.k_w], a[:, F.k_h], a[:, F.s_w], a[:, F.s_h]
    pt, pb, pl, pr = a[:, F.pad_top], a[:, F.pad_bottom], a[:, F.pad_left], a[:, F.pad_right]
    max_k = np.where(is_elt, 1, MAX_KERNEL)
    ok &= _in_range(kw, 1, max_k) & _in_range(kh, 1, max_k)
    ok &= _in_range(pt, 0, kh // 2) & _in_range(pb, 0, kh // 2) & _in_range(pl, 0, kw // 2) & _in_range(pr, 0, kw // 2)
    max_s = np.where(is_elt, 1, MAX_STRIDE)
    win, hin, wout, hout = a[:, F.in_w], a[:, F.in_h], a[:, F.out_w], a[:, F.out_h]
    if layer:
        ok &= _in_range(sw, 1, np.minimum(max_s, win + pl + pr)) & _in_range(sh, 1, np.minimum(max_s, hin + pt + pb))
    else:
        ok &= _in_range(sw, 1, max_s) & _in_range(sh, 1, max_s)

    # a layer split along W / H needs one more input column / row and may be nTiles times as large there
    ok &= _in_range(win, np.maximum(1, kw - (pl + pr) + split_w), MAX_DIM * scale(split_w))
    ok &= _in_range(hin, np.maximum(1, kh - (pt + pb) + split_h), MAX_DIM * scale(split_h))
    ok &= wout == _out_size(win, pl, pr, kw, sw)
    h_formula = _out_size(hin, pt, pb, kh, sh)
    if layer:
        ok &= (hout == h_formula) & (~split_h | (hout > 1)) & (~split_w | (wout > 1))
    else:
        h_ext = hin + kh * (pt == 0) + kh * (pb == 0)
        h_hi = np.where(isi == _ISI.SPLIT_OVER_H, _out_size(h_ext, pt, pb, kh, sh), h_formula)
        ok &= _in_range(hout, h_formula, h_hi)
    ok &= (a[:, F.out_b] == a[:, F.in_b]) & (a[:, F.in_b] >= 1) & (~v50 | (a[:, F.in_b] == 1))

    cin, cout = a[:, F.in_c], a[:, F.out_c]
    in_pad, out_pad = a[:, F.input_autopad] == 1, v50 & (a[:, F.output_autopad] == 1)
    mult16 = lambda c, hi: (c % 16 == 0) & _in_range(c, 16, hi)  # noqa: E731
    ok &= mult16(cout, MAX_DIM * scale_c) | (out_pad & _in_range(cout, 1, 15))
    if layer:
        ok &= ~sok | (cout >= 32)
    dw_like = _member(op, (_DW, _MAXPOOL, _AVEPOOL))
    if context == "workload":
        dw_ok = np.where(v20, mult16(cin, MAX_DIM), _member(cin, (16, 32, 64)))
        cm_hi = np.where(npu, 15, 16)
    else:
        dw_ok = mult16(cin, MAX_DIM * scale_c)
        cm_hi = np.where(v20, 16, 15)
    # 5.0 with input autopad: CONV / CM_CONV also take 1..15 channels of 8-bit input, 1..9 of 16-bit input
    in_bits = _bits(a[:, F.in_dtype])
    pad_hi = np.where(_member(a[:, F.in_dtype], _VALID_DTYPES + _FP8), np.where(in_bits == 16, 9, 15), 0)
    padded_cin = v50 & in_pad & ((op == _CONV) | (op == _CM)) & _in_range(cin, 1, pad_hi)
    cin_ok = np.select([_member(op, (_CONV, _ELT, _ELT_MUL, _LNORM)), dw_like, op == _CM],
                       [mult16(cin, MAX_DIM * scale_c), dw_ok, _in_range(cin, 1, cm_hi)], False) | padded_cin
    same_c = dw_like | is_elt | (op == _ELT_MUL)
    ok &= cin_ok & (~same_c | (cin == cout) | out_pad)

    in_dt, out_dt, wt_dt = a[:, F.in_dtype], a[:, F.out_dtype], weight_dtype(a)
    ok &= np.select([v40, v50], [_member(in_dt, _VALID_DTYPES), _member(in_dt, _VALID_DTYPES + _FP8)],
                    _member(in_dt, _VALID_DTYPES))
    ok &= np.select([v40, v50], [_member(out_dt, _VALID_OUT_DTYPES_40),
                                 _member(out_dt, _VALID_OUT_DTYPES_40 + _FP8 + (_DTYPE.INT32,))],
                    _member(out_dt, _VALID_DTYPES))
    ok &= np.select([v40, v50], [_member(wt_dt, _VALID_WT_DTYPES_40),
                                 _member(wt_dt, _VALID_WT_DTYPES_40 + _FP8 + (_DTYPE.INT2, _DTYPE.UINT2))], True)
    for col in (F.in_layout, F.out_layout):
        ok &= np.where(v20, _member(a[:, col], (_LAYOUT.ZMAJOR, _LAYOUT.CMAJOR)), _member(a[:, col], _PERMUTED_LAYOUTS))
    if context == "workload":
        mode = a[:, F.execution_mode]
        ok &= np.where(v20, _member(mode, DEVICES[_V20].execution_modes),
                       _member(mode, DEVICES[_V27].execution_modes))
        # 5.0 restricts the mode per operation
        ok &= ~v50 | np.select([dw_like, is_elt | (op == _ELT_MUL)],
                               [mode == _MODE.CUBOID_16x16, mode == _MODE.CUBOID_8x16], True)

    act_sp, w_sp = m[:, F.act_sparsity], m[:, F.weight_sparsity]
    in_en, w_en = a[:, F.in_sparsity_enabled] != 0, a[:, F.weight_sparsity_enabled] != 0
    ok &= _in_range(act_sp, 0.0, 1.0) & _in_range(w_sp, 0.0, 1.0)
    ok &= ~in_en | (act_sp >= 0.01)
    conv_elt = _member(op, (_CONV, _ELT, _ELT_MUL, _LNORM))
    ok &= np.where(conv_elt, (in_en | (act_sp == 0)) & (w_en | (w_sp == 0)),
                   ~in_en & ~w_en & (act_sp == 0) & (w_sp == 0))

    known_op = _member(op, (_CONV, _DW, _ELT, _MAXPOOL, _CM)) | (v50 & _member(op, (_ELT_MUL, _LNORM, _AVEPOOL)))
    code = np.where(ok, 0, ERROR_INVALID_LAYER_CONFIGURATION if layer else ERROR_INVALID_INPUT_CONFIGURATION)
    if not layer:
        cmx = _CMX_BY_DEVICE[np.clip(dev, 0, len(_CMX_BY_DEVICE) - 1)]
        code = np.where(cmx_required(m) > cmx, ERROR_INPUT_TOO_BIG, code)
    code = np.where(known_op, code, ERROR_INVALID_INPUT_OPERATION)
    return np.where(v20 | v27 | npu, code, ERROR_INVALID_INPUT_DEVICE).astype(np.int64)

