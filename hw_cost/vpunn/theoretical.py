"""Theoretical DPU cycles ("hw_theoretical_cycles", vpunn-reference.md §4.3, npu45-notes §7), vectorised.

The runtime falls back to these when the NN output is out of range, and uses them when no NN is loaded.
"""
from __future__ import annotations

import numpy as np

from .devices import DEVICES
from .enums import DataType, ExecutionMode, Operation, VPUDevice, int_codes
from .sanitizer import dtype_bytes
from .workload import F

__all__ = ["theoretical_cycles", "padding_taps"]

_DTYPE = int_codes(DataType)
_MODE = int_codes(ExecutionMode)
_OP = int_codes(Operation)

def _zeros(first, step, k):
    """Zero taps of one border: first + (first - step) + ... while positive (k: the step numbers 0, 1, ...)."""
    return np.clip(first[:, None] - k * step[:, None], 0, None).sum(axis=1)


def _corner(v_first, v_step, h_first, h_step, k):
    """Taps counted twice at one corner: sum of (v - k*v_step) * (h - k*h_step) while both stay positive."""
    v = v_first[:, None] - k * v_step[:, None]
    h = h_first[:, None] - k * h_step[:, None]
    return np.where((v > 0) & (h > 0), v * h, 0).sum(axis=1)


def padding_taps(a: np.ndarray) -> np.ndarray:
    """Kernel taps that read zero padding, summed over the output plane, as the runtime estimates them.

    Each border's zero count (the pad, minus one stride per output row/column, while positive) is multiplied by
    the kernel extent along the border and by ceil(in / stride) positions; a bottom/right pad first loses
    `in % stride`. The four corners, counted by both borders, are subtracted once.
    """
    kw, kh, sw, sh = a[:, F.k_w], a[:, F.k_h], a[:, F.s_w], a[:, F.s_h]
    pt, pl = a[:, F.pad_top], a[:, F.pad_left]
    pb, pr = a[:, F.pad_bottom] - a[:, F.in_h] % sh, a[:, F.pad_right] - a[:, F.in_w] % sw
    cols, rows = -(-a[:, F.in_w] // sw), -(-a[:, F.in_h] // sh)
    k = np.arange(max(1, int(a[:, [F.pad_top, F.pad_bottom, F.pad_left, F.pad_right]].max(initial=0)) + 1))[None, :]
    vertical = (_zeros(pt, sh, k) + _zeros(pb, sh, k)) * kw * cols
    horizontal = (_zeros(pl, sw, k) + _zeros(pr, sw, k)) * kh * rows
    corners = sum(_corner(v, sh, h, sw, k) for v in (pt, pb) for h in (pl, pr))
    return vertical + horizontal - corners


_CMX_GRID = {_MODE.CUBOID_4x16: (8, 8, 256), _MODE.CUBOID_8x16: (16, 8, 128),
             _MODE.CUBOID_16x16: (16, 16, 64)}


# device constants indexed by device code; a device without constants gets VPU 2.0's
_CONFIGS = [DEVICES.get(d, DEVICES[VPUDevice.VPU_2_0]) for d in VPUDevice]
_PPE, _MACS, _ICPM, _FP_RATIO, _PORT_BYTES = (
    np.array([getter(c) for c in _CONFIGS], dtype=np.int64)
    for getter in (lambda c: c.ppe_lanes, lambda c: c.macs_per_dpu, lambda c: c.input_channels_per_mac,
                   lambda c: c.fp16_ratio, lambda c: c.cmx_word_bytes * c.cmx_read_ports))
_CMX_RATIO = np.array([c.cmx_mhz / c.dpu_mhz for c in _CONFIGS])
#: devices whose theoretical cycles are bounded by the CMX reads
_CMX_BOUND = [d for d in DEVICES if d != VPUDevice.VPU_2_0]
_FLOAT_INPUTS = (_DTYPE.FLOAT16, _DTYPE.BFLOAT16, _DTYPE.FLOAT32)


def theoretical_cycles(m: np.ndarray, wrap: bool = True) -> np.ndarray:
    """Theoretical cycles of sanitized workloads, int64.

    The runtime computes in unsigned 64-bit: a padding-skip count larger than the MAC count wraps around before
    the ceil division (npu45-notes §7), which is reproduced here. `wrap=False` (the network cost model's rule)
    counts no skipped MACs there instead, so the estimate stays the size of the work.
    """
    a = np.asfortranarray(m, dtype=np.int64)
    dev, op = np.clip(a[:, F.device], 0, len(VPUDevice) - 1), a[:, F.operation]
    kk = a[:, F.k_w] * a[:, F.k_h]
    base = kk * a[:, F.out_w] * a[:, F.out_h] * a[:, F.out_c] * a[:, F.out_b]
    lanes = _PPE[dev] // np.where(a[:, F.output_write_tiles] > 1, 2, 1)
    in_elems = a[:, F.in_w] * a[:, F.in_h] * a[:, F.in_c] * a[:, F.in_b]
    base = np.where(op == _OP.ELTWISE, -(-in_elems // lanes), base)
    conv = (op == _OP.CONVOLUTION) | (op == _OP.CM_CONVOLUTION)
    skipped = padding_taps(a) * a[:, F.in_c] * a[:, F.out_c]
    if not wrap:
        skipped = np.where(skipped > base * a[:, F.in_c], 0, skipped)
    base = np.where(conv, base * a[:, F.in_c] - skipped, base)
    macs = np.where(conv, _MACS[dev], _MACS[dev] // _ICPM[dev]).astype(np.uint64)
    cycles = (base.astype(np.uint64) + (macs - np.uint64(1))) // macs  # C's unsigned (a + b - 1) / b
    fp = np.isin(a[:, F.in_dtype], _FLOAT_INPUTS)
    cycles = np.where(fp, cycles * _FP_RATIO[dev].astype(np.uint64), cycles).astype(np.int64)
    cmx_bound = np.isin(a[:, F.device], _CMX_BOUND)
    if cmx_bound.any():
        mode = a[:, F.execution_mode]
        gx, gy, gz = (np.select([mode == k for k in _CMX_GRID], [g[i] for g in _CMX_GRID.values()], 1)
                      for i in range(3))  # a non-cuboid mode reads with a 1x1x1 grid
        per = a[:, F.in_c] * kk * dtype_bytes(a[:, F.in_dtype])
        act = -(-a[:, F.out_c] // gz) * a[:, F.out_h] * a[:, F.out_w] * per
        wt = -(-a[:, F.out_h] // gy) * -(-a[:, F.out_w] // gx) * a[:, F.out_c] * per
        reads = np.ceil((act + wt) / _PORT_BYTES[dev] * _CMX_RATIO[dev]).astype(np.int64)
        cycles = np.where(cmx_bound, np.maximum(cycles, reads), cycles)
    return cycles
