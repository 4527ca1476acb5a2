"""Theoretical DPU cycles ("hw_theoretical_cycles", docs/vpunn.md §5), compiled with numba
(one row at a time, as sanitizer.py).

The runtime falls back to these when the NN output is out of range, and uses them when no NN is loaded.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .devices import DEVICES
from .enums import DTYPE, MODE, OP, ExecutionMode, VPUDevice
from .sanitizer import as_matrix, dtype_bytes, int_field, member
from .workload import F

__all__ = ["theoretical_cycles"]


# CMX read grid (x, y, z) per execution mode; a non-cuboid mode reads with a 1x1x1 grid
_CMX_GRID = np.ones((len(ExecutionMode), 3), dtype=np.int64)
_CMX_GRID[[MODE.CUBOID_4x16, MODE.CUBOID_8x16, MODE.CUBOID_16x16]] = [(8, 8, 256), (16, 8, 128), (16, 16, 64)]
# device constants indexed by device code; a device without constants gets VPU 2.0's
_CONFIGS = [DEVICES.get(d, DEVICES[VPUDevice.VPU_2_0]) for d in VPUDevice]
_PPE, _MACS, _ICPM, _FP_RATIO, _PORT_BYTES = (
    np.array([getter(c) for c in _CONFIGS], dtype=np.int64)
    for getter in (lambda c: c.ppe_lanes, lambda c: c.macs_per_dpu, lambda c: c.input_channels_per_mac,
                   lambda c: c.fp16_ratio, lambda c: c.cmx_word_bytes * c.cmx_read_ports))
_CMX_RATIO = np.array([c.cmx_mhz / c.dpu_mhz for c in _CONFIGS])
#: devices whose theoretical cycles are bounded by the CMX reads
_CMX_BOUND = tuple(int(d) for d in DEVICES if d != VPUDevice.VPU_2_0)
_FLOAT_INPUTS = (DTYPE.FLOAT16, DTYPE.BFLOAT16, DTYPE.FLOAT32)


def theoretical_cycles(m: np.ndarray, wrap: bool = True) -> np.ndarray:
    """Theoretical cycles of sanitized workloads, int64.

    The runtime computes in unsigned 64-bit: a padding-skip count larger than the MAC count wraps around before
    the ceil division (docs/vpunn.md §5), which is reproduced here. `wrap=False` (the network cost model's rule)
    counts no skipped MACs there instead, so the estimate stays the size of the work.
    """
    return _theoretical_rows(as_matrix(m), bool(wrap))


@njit(cache=True)
def _border_zeros(first, step, n):
    """Zero taps of one border: first + (first - step) + ... while positive, over n steps."""
    total = 0
    for k in range(n):
        total += max(first - k * step, 0)
    return total


@njit(cache=True)
def _corner(v_first, v_step, h_first, h_step, n):
    """Taps counted twice at one corner: sum of (v - k*v_step) * (h - k*h_step) while both stay positive."""
    total = 0
    for k in range(n):
        v, h = v_first - k * v_step, h_first - k * h_step
        if v > 0 and h > 0:
            total += v * h
    return total


@njit(cache=True)
def _padding_taps(row):
    """Kernel taps that read zero padding, summed over the output plane, as the runtime estimates them.

    Each border's zero count (the pad, minus one stride per output row/column, while positive) is multiplied by
    the kernel extent along the border and by ceil(in / stride) positions; a bottom/right pad first loses
    `in % stride`. The four corners, counted by both borders, are subtracted once.
    """
    kw, kh = int_field(row, F.k_w), int_field(row, F.k_h)
    sw, sh = int_field(row, F.s_w), int_field(row, F.s_h)
    in_w, in_h = int_field(row, F.in_w), int_field(row, F.in_h)
    pt, pl = int_field(row, F.pad_top), int_field(row, F.pad_left)
    pb_raw, pr_raw = int_field(row, F.pad_bottom), int_field(row, F.pad_right)
    pb, pr = pb_raw - in_h % sh, pr_raw - in_w % sw
    cols, rows = -(-in_w // sw), -(-in_h // sh)
    n = max(pt, pb_raw, pl, pr_raw, 0) + 1
    vertical = (_border_zeros(pt, sh, n) + _border_zeros(pb, sh, n)) * kw * cols
    horizontal = (_border_zeros(pl, sw, n) + _border_zeros(pr, sw, n)) * kh * rows
    corners = _corner(pt, sh, pl, sw, n) + _corner(pt, sh, pr, sw, n) + _corner(pb, sh, pl, sw, n) \
        + _corner(pb, sh, pr, sw, n)
    return vertical + horizontal - corners


@njit(cache=True)
def theoretical_row(row, wrap) -> int:
    """`theoretical_cycles` of one sanitized workload."""
    raw_dev, op = int_field(row, F.device), int_field(row, F.operation)
    dev = min(max(raw_dev, 0), len(_PPE) - 1)
    kk = int_field(row, F.k_w) * int_field(row, F.k_h)
    in_c, out_c = int_field(row, F.in_c), int_field(row, F.out_c)
    base = kk * int_field(row, F.out_w) * int_field(row, F.out_h) * out_c * int_field(row, F.out_b)
    if op == OP.ELTWISE:
        lanes = _PPE[dev] // (2 if int_field(row, F.output_write_tiles) > 1 else 1)
        base = -(-(int_field(row, F.in_w) * int_field(row, F.in_h) * in_c * int_field(row, F.in_b)) // lanes)
    conv = op == OP.CONVOLUTION or op == OP.CM_CONVOLUTION
    macs = _MACS[dev] // (1 if conv else _ICPM[dev])
    if conv:
        skipped = _padding_taps(row) * in_c * out_c
        if not wrap and skipped > base * in_c:
            skipped = 0
        base = base * in_c - skipped
    ceil_div = (np.uint64(base) + (np.uint64(macs) - np.uint64(1))) // np.uint64(macs)  # C's unsigned division
    in_dtype = int_field(row, F.in_dtype)
    fp = member(in_dtype, _FLOAT_INPUTS)
    cycles = np.int64(ceil_div * np.uint64(_FP_RATIO[dev]) if fp else ceil_div)
    if member(raw_dev, _CMX_BOUND):
        mode = min(max(int_field(row, F.execution_mode), 0), len(_CMX_GRID) - 1)
        gx, gy, gz = _CMX_GRID[mode, 0], _CMX_GRID[mode, 1], _CMX_GRID[mode, 2]
        per = in_c * kk * dtype_bytes(in_dtype)
        act = -(-out_c // gz) * int_field(row, F.out_h) * int_field(row, F.out_w) * per
        wt = -(-int_field(row, F.out_h) // gy) * -(-int_field(row, F.out_w) // gx) * out_c * per
        reads = np.int64(np.ceil((act + wt) / _PORT_BYTES[dev] * _CMX_RATIO[dev]))
        cycles = max(cycles, reads)
    return cycles


@njit(cache=True)
def _theoretical_rows(m, wrap):
    out = np.empty(len(m), dtype=np.int64)
    for k in range(len(m)):
        out[k] = theoretical_row(m[k], wrap)
    return out
