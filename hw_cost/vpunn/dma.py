"""DMA costs: the DMA NN (`dma_2_7.vpunn`, `DMACostModel<DMANNWorkload_NPU27>`) and the legacy theoretical model.

vpunn-reference.md §3.5, §4.2 and §6 step 6. Both return DPU-clock cycles.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .devices import device_config
from .dpu import LruCache
from .enums import DMADirection, VPUDevice, parse_enum
from .errors import ERROR_INVALID_OUTPUT_RANGE, VpunnError
from .reader import VpunnNetwork, read_vpunn

__all__ = ["DMAWorkload", "DmaModel", "DMA_COLUMNS", "dma_workload_from_row", "theoretical_dma_cycles",
           "dma_1d"]

#: workload columns of vpunn_dma.csv
DMA_COLUMNS = ("device", "num_planes", "length", "src_width", "dst_width", "src_stride", "dst_stride",
               "src_plane_stride", "dst_plane_stride", "direction")
_DESCRIPTOR_SIZE = 12
_INPUT_VERSION = 1
_OUTPUT_VERSION = 1  # the NN value is a fraction of the DMA bandwidth


@dataclass(frozen=True)
class DMAWorkload:
    """A `DMANNWorkload_NPU27` transfer; sizes and strides in bytes, `num_planes` 0 meaning one plane."""

    device: VPUDevice
    num_planes: int
    length: int
    src_width: int
    dst_width: int
    src_stride: int
    dst_stride: int
    src_plane_stride: int
    dst_plane_stride: int
    direction: DMADirection

    @property
    def bytes(self) -> int:
        return (self.num_planes + 1) * self.length

    def row(self) -> tuple:
        return tuple(float(getattr(self, name)) for name in DMA_COLUMNS)


def dma_1d(device: VPUDevice, n_bytes: int, direction: DMADirection) -> DMAWorkload:
    """A contiguous transfer of `n_bytes` (what the layer model uses for weights and activations)."""
    return DMAWorkload(device, 0, int(n_bytes), int(n_bytes), int(n_bytes), 0, 0, 0, 0, direction)


def dma_workload_from_row(row: dict, where: str = "") -> DMAWorkload:
    values = {}
    for name in DMA_COLUMNS:
        cell = row.get(name)
        if cell is None:
            raise VpunnError(f"{where}missing column {name!r}")
        try:
            if name == "device":
                values[name] = parse_enum(VPUDevice, cell)
            elif name == "direction":
                values[name] = parse_enum(DMADirection, cell)
            else:
                value = float(cell)
                if not value.is_integer() or value < 0:
                    raise ValueError("expected a non-negative integer")
                values[name] = int(value)
        except (VpunnError, ValueError) as exc:
            raise VpunnError(f"{where}column {name!r}: bad value {cell.strip()!r} ({exc})") from None
    return DMAWorkload(**values)


def _matrix(workloads) -> np.ndarray:
    if isinstance(workloads, np.ndarray):
        m = workloads
    else:
        m = np.array([w.row() for w in workloads], dtype=np.float64).reshape(-1, len(DMA_COLUMNS))
    if m.ndim != 2 or m.shape[1] != len(DMA_COLUMNS):
        raise VpunnError(f"a DMA workload matrix has {len(DMA_COLUMNS)} columns; got shape {m.shape}")
    return m


class DmaModel:
    """The DMA NN (`dma_2_7.vpunn`: DMA descriptor interface 1, output 1 = bandwidth fraction).

    Args:
        model: path of the file or a parsed `VpunnNetwork`.
        cache_size: entries of the descriptor-keyed result cache; 0 disables.
    """

    def __init__(self, model, cache_size: int = 16384):
        self.network: VpunnNetwork = model if isinstance(model, VpunnNetwork) else read_vpunn(Path(model))
        net = self.network
        if net.input_version != _INPUT_VERSION or net.output_version != _OUTPUT_VERSION:
            raise VpunnError(f"{net.source}: DMA interface {net.input_version} with output {net.output_version} "
                             f"(model name {net.name!r}) is not implemented; implemented: DMA interface "
                             f"{_INPUT_VERSION} with output {_OUTPUT_VERSION} (bandwidth fraction)")
        if net.input_size != _DESCRIPTOR_SIZE:
            raise VpunnError(f"{net.source}: the network takes {net.input_size} inputs, DMA interface "
                             f"{_INPUT_VERSION} has {_DESCRIPTOR_SIZE}")
        self._cache = LruCache(cache_size)

    def clear_cache(self) -> None:
        self._cache.clear()

    @staticmethod
    def descriptors(workloads) -> np.ndarray:
        m = _matrix(workloads)
        d = np.zeros((len(m), _DESCRIPTOR_SIZE), dtype=np.float32)
        d[:, :8] = m[:, 1:9]
        direction = m[:, 9].astype(np.int64)
        if ((direction < 0) | (direction >= len(DMADirection))).any():
            raise VpunnError("DMA direction out of range")
        d[np.arange(len(m)), 8 + direction] = 1.0
        return d

    def nn_values(self, descriptors: np.ndarray) -> np.ndarray:
        d = np.ascontiguousarray(descriptors, dtype=np.float32)
        values = np.empty(len(d), dtype=np.float32)
        keys = [row.tobytes() for row in d]
        missing = []
        for i, key in enumerate(keys):
            hit = self._cache.get(key)
            if hit is None:
                missing.append(i)
            else:
                values[i] = hit
        if missing:
            out = self.network.forward(d[missing])
            values[missing] = out
            for i, v in zip(missing, out):
                self._cache.put(keys[i], v)
        return values

    def cost(self, workloads: Iterable[DMAWorkload] | np.ndarray) -> np.ndarray:
        """DPU cycles per transfer (int64 holding the uint32; ERROR_INVALID_OUTPUT_RANGE where the NN is off)."""
        m = _matrix(workloads)
        if len(m) == 0:
            return np.zeros(0, np.int64)
        u = self.nn_values(self.descriptors(m))
        configs = [device_config(d) for d in m[:, 0].astype(np.int64)]
        f_dpu = np.array([c.dpu_mhz for c in configs], dtype=np.float32)
        f_cmx = np.array([c.cmx_mhz for c in configs], dtype=np.float32)
        per_cycle = np.array([c.dma_bytes_per_cycle for c in configs], dtype=np.float32)
        bw = np.clip(u * per_cycle, np.float32(1 / 200), per_cycle).astype(np.float32)
        n_bytes = ((m[:, 1] + 1) * m[:, 2]).astype(np.float32)
        cycles = np.ceil(n_bytes / bw * f_dpu / f_cmx).astype(np.int64)
        valid = (u >= np.float32(-0.1)) & (u <= np.float32(1.1))
        return np.where(valid, cycles, ERROR_INVALID_OUTPUT_RANGE)


def theoretical_dma_cycles(device, n_bytes, direction) -> np.ndarray:
    """Legacy `VPUCostModel::DMA` cycles of contiguous transfers (arrays broadcast), latency included.

    max(latency_src, latency_dst) + max(cycles_src, cycles_dst), each side ceil(bytes * cost per byte): DRAM
    f_DPU/BW, CMX (f_DPU/f_CMX)/min(DMA bytes per cycle, 32), or /16 for CMX->CMX up to VPU 2.7.
    """
    cfg = device_config(device)
    n_bytes = np.asarray(n_bytes, dtype=np.int64)
    direction = np.broadcast_to(np.asarray(direction, dtype=np.int64), n_bytes.shape)
    f32 = np.float32
    dram_cost = f32(cfg.dpu_mhz) / f32(cfg.dram_mbps)
    cmx_lanes = np.where((direction == DMADirection.CMX2CMX) & (cfg.device <= VPUDevice.VPU_2_7), 16,
                         min(cfg.dma_bytes_per_cycle, 32)).astype(f32)
    cmx_cost = f32(cfg.dpu_mhz) / f32(cfg.cmx_mhz) / cmx_lanes
    src_dram = (direction == DMADirection.DDR2CMX) | (direction == DMADirection.DDR2DDR)
    dst_dram = (direction == DMADirection.CMX2DDR) | (direction == DMADirection.DDR2DDR)

    def side(is_dram):
        # the cost per byte is a float32, the product is taken in double
        cost = np.where(is_dram, dram_cost, cmx_cost).astype(f32).astype(np.float64)
        cycles = np.ceil(n_bytes * cost).astype(np.int64)
        latency = np.where(is_dram, cfg.dram_latency_cycles, cfg.cmx_latency_cycles)
        return np.where(n_bytes > 0, cycles, 0), latency

    c_in, l_in = side(src_dram)
    c_out, l_out = side(dst_dram)
    return np.maximum(l_in, l_out) + np.maximum(c_in, c_out)
