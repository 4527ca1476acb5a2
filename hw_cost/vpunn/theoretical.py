"""Theoretical DPU cycles ("hw_theoretical_cycles", vpunn-reference.md §4.3), vectorised.

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
_DEV = int_codes(VPUDevice)

def _pad_loss(pad, s):
    """Taps of one border pad over the output positions that reach it: sum over i of max(0, pad - i*s)."""
    i = np.arange(8)[None, :]
    return np.clip(pad[:, None] - i * s[:, None], 0, None).sum(axis=1)


def padding_taps(a: np.ndarray) -> np.ndarray:
    """Kernel taps that read zero padding, summed over the output plane, as the runtime counts them.

    This is the runtime's closed form, not an exact count (fitted to and checked on the reference vectors):
    each border loses `_pad_loss(pad)` taps per position along the other axis, over ceil(in/stride) positions;
    a bottom/right pad only counts as far as the last window overhangs the input (for the right border the
    overhang is measured with min(top, bottom) as the left offset); corners are removed once per vertical
    border that has padding, as (effective horizontal pad) x (horizontal pad loss).
    """
    kw, kh, sw, sh = a[:, F.k_w], a[:, F.k_h], a[:, F.s_w], a[:, F.s_h]
    pt, pb, pl, pr = a[:, F.pad_top], a[:, F.pad_bottom], a[:, F.pad_left], a[:, F.pad_right]
    m_h, m_w = -(-a[:, F.in_h] // sh), -(-a[:, F.in_w] // sw)
    over_h = (a[:, F.out_h] - 1) * sh + kh - pt - a[:, F.in_h]
    over_w = (a[:, F.out_w] - 1) * sw + kw - np.minimum(pt, pb) - a[:, F.in_w]
    pb_eff, pr_eff = np.clip(over_h, 0, pb), np.clip(over_w, 0, pr)
    loss_h = _pad_loss(pt, sh) + _pad_loss(pb_eff, sh)
    loss_l, loss_r = _pad_loss(pl, sw), _pad_loss(pr_eff, sw)
    corners = ((pt > 0).astype(np.int64) + (pb > 0)) * (pl * loss_l + pr_eff * loss_r)
    return loss_h * kw * m_w + (loss_l + loss_r) * kh * m_h - corners


_CMX_GRID = {_MODE.CUBOID_4x16: (8, 8, 256), _MODE.CUBOID_8x16: (16, 8, 128),
             _MODE.CUBOID_16x16: (16, 16, 64)}


def theoretical_cycles(m: np.ndarray) -> np.ndarray:
    """Theoretical cycles of sanitized workloads, int64."""
    a = np.asfortranarray(m, dtype=np.int64)
    dev, op = a[:, F.device], a[:, F.operation]
    v27 = dev == _DEV.VPU_2_7
    cfg20, cfg27 = DEVICES[VPUDevice.VPU_2_0], DEVICES[VPUDevice.VPU_2_7]
    pick = lambda attr: np.where(v27, getattr(cfg27, attr), getattr(cfg20, attr))  # noqa: E731
    kk = a[:, F.k_w] * a[:, F.k_h]
    base = kk * a[:, F.out_w] * a[:, F.out_h] * a[:, F.out_c] * a[:, F.out_b]
    lanes = pick("ppe_lanes") // np.where(a[:, F.output_write_tiles] > 1, 2, 1)
    in_elems = a[:, F.in_w] * a[:, F.in_h] * a[:, F.in_c] * a[:, F.in_b]
    is_elt = op == _OP.ELTWISE
    base = np.where(is_elt, -(-in_elems // lanes), base)
    conv = (op == _OP.CONVOLUTION) | (op == _OP.CM_CONVOLUTION)
    base = np.where(conv, base * a[:, F.in_c] - padding_taps(a) * a[:, F.in_c] * a[:, F.out_c], base)
    macs = np.where(conv, pick("macs_per_dpu"), pick("macs_per_dpu") // pick("input_channels_per_mac"))
    cycles = -(-base // macs)
    fp = (a[:, F.in_dtype] == _DTYPE.FLOAT16) | (a[:, F.in_dtype] == _DTYPE.BFLOAT16)
    cycles = np.where(fp, cycles * pick("fp16_ratio"), cycles)
    if v27.any():
        mode = a[:, F.execution_mode]
        gx, gy, gz = (np.select([mode == k for k in _CMX_GRID], [g[i] for g in _CMX_GRID.values()], 1)
                      for i in range(3))  # a non-cuboid mode reads with a 1x1x1 grid
        per = a[:, F.in_c] * kk * dtype_bytes(a[:, F.in_dtype])
        act = -(-a[:, F.out_c] // gz) * a[:, F.out_h] * a[:, F.out_w] * per
        wt = -(-a[:, F.out_h] // gy) * -(-a[:, F.out_w] // gx) * a[:, F.out_c] * per
        ratio = cfg27.cmx_mhz / cfg27.dpu_mhz
        port_bytes = cfg27.cmx_word_bytes * cfg27.cmx_read_ports
        reads = np.ceil((act + wt) / port_bytes * ratio).astype(np.int64)
        cycles = np.where(v27, np.maximum(cycles, reads), cycles)
    return cycles
