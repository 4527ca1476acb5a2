"""The workload sanitizer and validity rules (vpunn-reference.md §5, and the layer variants of §6), vectorised.

Every function works on a workload matrix (see workload.py): one row per workload, all rows at once.
`check` has three contexts:

* "workload": `VPUCostModel::DPU` on one workload (after `sanitize`);
* "tile": the tile checks of the layer model (no execution-mode check, DW/MAXPOOL any multiple of 16);
* "layer": the whole-layer validation of the layer model (no CMX or execution-mode check, limits scaled by
  the tile count for SOK / SOHO, output height exact).
"""
from __future__ import annotations

import numpy as np

from .devices import DEVICES
from .enums import DTYPE_BITS, DataType, ISIStrategy, Layout, Operation, VPUDevice, VPUTilingStrategy, int_codes
from .errors import (ERROR_INPUT_TOO_BIG, ERROR_INVALID_INPUT_CONFIGURATION, ERROR_INVALID_INPUT_DEVICE,
                     ERROR_INVALID_INPUT_OPERATION, ERROR_INVALID_LAYER_CONFIGURATION)
from .workload import F

__all__ = ["sanitize", "layer_fixups", "check", "cmx_required", "weight_channels", "weight_mask_bytes",
           "dtype_bytes", "PAGE"]

_DTYPE = int_codes(DataType)
_ISI = int_codes(ISIStrategy)
_LAYOUT = int_codes(Layout)
_OP = int_codes(Operation)
_DEV = int_codes(VPUDevice)
_TILING = int_codes(VPUTilingStrategy)

PAGE = 16 * 1024  # CMX page rounding of each tensor
MAX_DIM = 8192
MAX_KERNEL = 15
MAX_STRIDE = 8

_CONV, _DW, _ELT, _MAXPOOL, _AVEPOOL, _CM = (_OP.CONVOLUTION, _OP.DW_CONVOLUTION, _OP.ELTWISE,
                                             _OP.MAXPOOL, _OP.AVEPOOL, _OP.CM_CONVOLUTION)
_V20, _V27 = _DEV.VPU_2_0, _DEV.VPU_2_7
_BITS = np.array(DTYPE_BITS, dtype=np.int64)
# same-size datatype restriction of the sanitizer
_RESTRICT = np.arange(len(DataType))
for _src, _dst in ((_DTYPE.INT8, _DTYPE.UINT8), (_DTYPE.BFLOAT16, _DTYPE.FLOAT16),
                   (_DTYPE.INT4, _DTYPE.UINT4), (_DTYPE.BF8, _DTYPE.HF8), (_DTYPE.INT16, _DTYPE.UINT16)):
    _RESTRICT[_src] = _dst
_VALID_DTYPES = (_DTYPE.UINT8, _DTYPE.INT8, _DTYPE.FLOAT16, _DTYPE.BFLOAT16)
_PERMUTED_LAYOUTS = (_LAYOUT.XYZ, _LAYOUT.XZY, _LAYOUT.YXZ, _LAYOUT.YZX, _LAYOUT.ZXY, _LAYOUT.ZYX)


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
    same_c = ((op == _ELT) | (op == _DW) | (op == _MAXPOOL)) & (a[:, F.out_c] >= 16) & (a[:, F.in_c] != a[:, F.out_c])
    s[same_c, F.in_c] = s[same_c, F.out_c]
    for col in (F.in_dtype, F.out_dtype):
        codes = a[:, col]
        known = (codes >= 0) & (codes < len(_RESTRICT))
        s[known, col] = _RESTRICT[codes[known]]
    v20, v27 = dev == _V20, dev == _V27
    for col in (F.in_layout, F.out_layout):
        lay = a[:, col]
        s[v20 & (lay == _LAYOUT.ZXY), col] = _LAYOUT.ZMAJOR
        s[v20 & (lay == _LAYOUT.XYZ), col] = _LAYOUT.CMAJOR
        s[v27 & (lay == _LAYOUT.ZMAJOR), col] = _LAYOUT.ZXY
        s[v27 & (lay == _LAYOUT.CMAJOR), col] = _LAYOUT.XYZ
    return s


def layer_fixups(m: np.ndarray) -> np.ndarray:
    """The only sanitizer changes the layer model makes to a whole layer (§6 step 1), on a copy."""
    s = np.array(m, dtype=np.float64, order="F")
    a = _cols(s)
    dev, op = a[:, F.device], a[:, F.operation]
    s[op == _AVEPOOL, F.operation] = _DW
    to_cm = (dev >= _V27) & (op == _CONV) & (a[:, F.in_c] >= 1) & (a[:, F.in_c] < 16)
    s[to_cm, F.operation] = _CM
    for col in (F.in_swizzling0, F.in_swizzling1, F.out_swizzling0):
        s[dev == _V20, col] = 0
    return s


def _bits(dtype_codes: np.ndarray) -> np.ndarray:
    return _BITS[np.clip(dtype_codes, 0, len(_BITS) - 1)]


def _nbytes(elements: np.ndarray, bits: np.ndarray) -> np.ndarray:
    return (elements * bits + 7) // 8


def weight_channels(a: np.ndarray) -> np.ndarray:
    """Channel count of the weights tensor with VPU 2.7's 16-sample alignment (§3.4); 0 for ELTWISE/MAXPOOL."""
    op, kk = a[:, F.operation], a[:, F.k_w] * a[:, F.k_h]
    c_kk = a[:, F.in_c] * kk
    cm_align = np.where(_bits(a[:, F.in_dtype]) >= 16, 8, 16)
    return np.where(op == _CONV, _align(c_kk, 16),
                    np.where((op == _DW) | (op == _AVEPOOL), _align(kk, 16),
                             np.where(op == _CM, _align(c_kk, cm_align), 0)))


def _has_weights(op: np.ndarray) -> np.ndarray:
    return (op == _CONV) | (op == _DW) | (op == _AVEPOOL) | (op == _CM)


def weight_mask_bytes(a: np.ndarray) -> np.ndarray:
    """Bytes of the weights of one output channel (CONV, DW, CM_CONV; 0 otherwise), without the weight table.

    VPU 2.7 counts the aligned sample count of §3.4 times the dtype size; VPU 2.0 has no sample alignment and
    rounds the byte count up to 16 instead.
    """
    op, kk = a[:, F.operation], a[:, F.k_w] * a[:, F.k_h]
    bits = _bits(a[:, F.in_dtype])
    samples_20 = np.where(op == _DW, kk, a[:, F.in_c] * kk)
    bytes_20 = _align(_nbytes(samples_20, bits), 16)
    bytes_27 = _nbytes(weight_channels(a), bits)
    return np.where(_has_weights(op), np.where(a[:, F.device] == _V20, bytes_20, bytes_27), 0)


def cmx_required(m: np.ndarray, a: np.ndarray | None = None) -> np.ndarray:
    """CMX bytes a workload needs: input0 + weights + output memory, each rounded up to 16 KB pages (§5).

    `a` may pass `m` already converted to int64.
    """
    a = _cols(m) if a is None else a
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
        kk = a[:, F.k_w] * a[:, F.k_h]
        wchan = np.where(a[:, F.device] == _V20, np.where(op == _DW, kk, a[:, F.in_c] * kk), weight_channels(a))
        sparse_bytes = np.ceil(wbytes * (1.0 - m[:, F.weight_sparsity])).astype(np.int64) \
            + c_out * _align(-(-wchan // 8), 16)
        wbytes = np.where(sparse, sparse_bytes, wbytes)
    in1 = np.where(_has_weights(op), wbytes + 16 * c_out, np.where(op == _ELT, in0, 0))
    return _align(in0, PAGE) + _align(in1, PAGE) + _align(out0, PAGE)


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
    v20, v27 = dev == _V20, dev == _V27
    layer = context == "layer"
    if layer:
        strategy = np.broadcast_to(np.asarray(strategy, dtype=np.int64), (n,))
        n_tiles = np.broadcast_to(np.asarray(n_tiles, dtype=np.int64), (n,))
        sok, soho = strategy == _TILING.SOK, strategy == _TILING.SOH_Overlapped
    else:
        sok = soho = np.zeros(n, bool)
    scale_c = np.where(sok, n_tiles, 1) if layer else 1
    is_elt = op == _ELT
    ok = np.ones(n, bool)

    owt, isi = a[:, F.output_write_tiles], a[:, F.isi_strategy]
    ok &= np.where(v20, owt == 1, (owt == 1) | (owt == 2))
    if layer:
        ok &= np.where(v20, isi == _ISI.CLUSTERING, _in_range(isi, 0, 2))
    else:
        ok &= np.where(v20, isi == _ISI.CLUSTERING,
                       (isi == _ISI.CLUSTERING) | (isi == _ISI.SPLIT_OVER_H)
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

    h_lo = np.maximum(1, kh - (pt + pb)) + (soho if layer else 0)
    ok &= _in_range(win, np.maximum(1, kw - (pl + pr)), MAX_DIM)
    ok &= _in_range(hin, h_lo, MAX_DIM * (np.where(soho, n_tiles, 1) if layer else 1))
    ok &= wout == _out_size(win, pl, pr, kw, sw)
    h_formula = _out_size(hin, pt, pb, kh, sh)
    if layer:
        ok &= (hout == h_formula) & (~soho | (hout > 1))
    else:
        h_ext = hin + kh * (pt == 0) + kh * (pb == 0)
        h_hi = np.where(isi == _ISI.SPLIT_OVER_H, _out_size(h_ext, pt, pb, kh, sh), h_formula)
        ok &= _in_range(hout, h_formula, h_hi)
    ok &= (a[:, F.out_b] == a[:, F.in_b]) & (a[:, F.in_b] >= 1)

    cin, cout = a[:, F.in_c], a[:, F.out_c]
    mult16 = lambda c, hi: (c % 16 == 0) & _in_range(c, 16, hi)  # noqa: E731
    ok &= mult16(cout, MAX_DIM * scale_c)
    if layer:
        ok &= ~sok | (cout >= 32)
    dw_like = (op == _DW) | (op == _MAXPOOL)
    if context == "workload":
        dw_ok = np.where(v27, _member(cin, (16, 32, 64)), mult16(cin, MAX_DIM))
        cm_hi = 16
    else:
        dw_ok = mult16(cin, MAX_DIM * scale_c)
        cm_hi = np.where(v27, 15, 16)
    cin_ok = np.select([(op == _CONV) | is_elt, dw_like, op == _CM],
                       [mult16(cin, MAX_DIM * scale_c), dw_ok, _in_range(cin, 1, cm_hi)], False)
    ok &= cin_ok & (~(dw_like | is_elt) | (cin == cout))

    ok &= _member(a[:, F.in_dtype], _VALID_DTYPES) & _member(a[:, F.out_dtype], _VALID_DTYPES)
    for col in (F.in_layout, F.out_layout):
        ok &= np.where(v20, _member(a[:, col], (_LAYOUT.ZMAJOR, _LAYOUT.CMAJOR)), _member(a[:, col], _PERMUTED_LAYOUTS))
    if context == "workload":
        ok &= np.where(v20, _member(a[:, F.execution_mode], DEVICES[_V20].execution_modes),
                       _member(a[:, F.execution_mode], DEVICES[_V27].execution_modes))

    act_sp, w_sp = m[:, F.act_sparsity], m[:, F.weight_sparsity]
    in_en, w_en = a[:, F.in_sparsity_enabled] != 0, a[:, F.weight_sparsity_enabled] != 0
    ok &= _in_range(act_sp, 0.0, 1.0) & _in_range(w_sp, 0.0, 1.0)
    ok &= ~in_en | (act_sp >= 0.01)
    conv_elt = (op == _CONV) | is_elt
    ok &= np.where(conv_elt, (in_en | (act_sp == 0)) & (w_en | (w_sp == 0)),
                   ~in_en & ~w_en & (act_sp == 0) & (w_sp == 0))

    known_op = _member(op, (_CONV, _DW, _ELT, _MAXPOOL, _CM))
    code = np.where(ok, 0, ERROR_INVALID_LAYER_CONFIGURATION if layer else ERROR_INVALID_INPUT_CONFIGURATION)
    if not layer:
        cmx = np.where(v20, DEVICES[_V20].cmx_bytes, DEVICES[_V27].cmx_bytes)
        code = np.where(cmx_required(m) > cmx, ERROR_INPUT_TOO_BIG, code)
    code = np.where(known_op, code, ERROR_INVALID_INPUT_OPERATION)
    return np.where(v20 | v27, code, ERROR_INVALID_INPUT_DEVICE).astype(np.int64)

