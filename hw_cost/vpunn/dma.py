"""DMA costs: the DMA NNs and the theoretical DMA models, in DPU-clock cycles.

* `DMAWorkload` (`DMANNWorkload_NPU27`, VPU 2.x) and `DMAWorkloadNPU40_50` (`DMANNWorkload_NPU40_50`, VPU 4.0 and
  NPU 5.0): one transfer each.
* `DmaModel`: a DMA NN file. Its input interface selects the workload type and the descriptor (1: `dma_2_7`,
  2: `dma_4_0`, 3: `dmann_5_0`), its output interface the post-processing (1: fraction of the DMA bandwidth,
  2: DPU cycles). `DmaModel.cost_1d` is the contiguous transfer of the layer model.
* `theoretical_dma_cycles`: the runtime's theoretical DMA of a contiguous transfer.

docs/vpunn.md §6, §7 and §8 step 6.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .devices import LEGACY_DMA_OVERRIDES, DeviceConfig, device_config
from .dpu import LruCache
from .enums import DMADirection, NumDMAEngine, VPUDevice, parse_enum
from .errors import ERROR_INVALID_INPUT_DEVICE, ERROR_INVALID_OUTPUT_RANGE, VpunnError
from .reader import VpunnNetwork, read_vpunn

__all__ = ["DMAWorkload", "DMAWorkloadNPU40_50", "DmaModel", "DMA_COLUMNS", "DMA40_COLUMNS", "dma_workload_from_row",
           "dma_npu40_50_workload_from_row", "theoretical_dma_cycles", "dma_1d"]

#: workload columns of vpunn_dma.csv
DMA_COLUMNS = ("device", "num_planes", "length", "src_width", "dst_width", "src_stride", "dst_stride",
               "src_plane_stride", "dst_plane_stride", "direction")
_N_DIMS = 5  # extra dimensions of a DMANNWorkload_NPU40_50
_DIM_FIELDS = ("src_stride", "dst_stride", "src_dim_size", "dst_dim_size")
#: workload columns of npu45_dma.csv
DMA40_COLUMNS = ("device", "src_width", "dst_width", "num_dim",
                 *(f"{field}_{i}" for field in _DIM_FIELDS for i in range(1, _N_DIMS + 1)), "num_engine", "direction")
_SRC_STRIDE, _DST_STRIDE, _SRC_DIM, _DST_DIM = (slice(4 + k * _N_DIMS, 4 + (k + 1) * _N_DIMS) for k in range(4))
_ENUM_COLUMNS = {"device": VPUDevice, "direction": DMADirection, "num_engine": NumDMAEngine}


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


@dataclass(frozen=True)
class DMAWorkloadNPU40_50:  # the runtime's type name
    """A `DMANNWorkload_NPU40_50` transfer (docs/vpunn.md §6.1); sizes and strides in bytes.

    `src_width` / `dst_width` are the innermost contiguous bytes; `num_dim` (0..5, 0 = 1-D) extra dimensions follow,
    each given by one entry of the four 5-tuples (a dim size is "repetitions - 1"; strides may be negative).
    """

    device: VPUDevice
    src_width: int
    dst_width: int
    direction: DMADirection
    num_dim: int = 0
    src_stride: tuple[int, ...] = (0,) * _N_DIMS
    dst_stride: tuple[int, ...] = (0,) * _N_DIMS
    src_dim_size: tuple[int, ...] = (0,) * _N_DIMS
    dst_dim_size: tuple[int, ...] = (0,) * _N_DIMS
    num_engine: NumDMAEngine = NumDMAEngine.Num_Engine_1

    def __post_init__(self):
        if not 0 <= self.num_dim <= _N_DIMS:
            raise VpunnError(f"num_dim {self.num_dim} outside 0..{_N_DIMS}")
        for field in _DIM_FIELDS:
            values = tuple(int(v) for v in getattr(self, field))
            if len(values) != _N_DIMS:
                raise VpunnError(f"{field} has {len(values)} entries; a DMANNWorkload_NPU40_50 has {_N_DIMS}")
            object.__setattr__(self, field, values)

    @property
    def bytes(self) -> int:
        """Accessed bytes: the source side, dims beyond `num_dim` ignored."""
        return int(_bytes_40(np.array([self.row()]))[0])

    def row(self) -> tuple:
        dims = (v for field in _DIM_FIELDS for v in getattr(self, field))
        return tuple(float(v) for v in (self.device, self.src_width, self.dst_width, self.num_dim, *dims,
                                        self.num_engine, self.direction))


def dma_1d(device: VPUDevice, n_bytes: int, direction: DMADirection) -> DMAWorkload:
    """A contiguous VPU 2.x transfer of `n_bytes` (what the layer model uses for weights and activations)."""
    return DMAWorkload(device, 0, int(n_bytes), int(n_bytes), int(n_bytes), 0, 0, 0, 0, direction)


def _parse_row(row: dict, columns: tuple[str, ...], where: str, signed: Callable[[str], bool]) -> dict:
    """Column name -> enum member or int; integers must be non-negative unless `signed(name)`."""
    values = {}
    for name in columns:
        cell = row.get(name)
        if cell is None:
            raise VpunnError(f"{where}missing column {name!r}")
        try:
            if name in _ENUM_COLUMNS:
                values[name] = parse_enum(_ENUM_COLUMNS[name], cell)
            else:
                value = float(cell)
                if not value.is_integer() or (value < 0 and not signed(name)):
                    raise ValueError("expected an integer" if signed(name) else "expected a non-negative integer")
                values[name] = int(value)
        except (VpunnError, ValueError) as exc:
            raise VpunnError(f"{where}column {name!r}: bad value {cell.strip()!r} ({exc})") from None
    return values


def dma_workload_from_row(row: dict, where: str = "") -> DMAWorkload:
    return DMAWorkload(**_parse_row(row, DMA_COLUMNS, where, lambda name: False))


def dma_npu40_50_workload_from_row(row: dict, where: str = "") -> DMAWorkloadNPU40_50:
    """A transfer from a row with the `DMA40_COLUMNS` of npu45_dma.csv (`where` prefixes error messages)."""
    v = _parse_row(row, DMA40_COLUMNS, where, lambda name: name.startswith(("src_stride", "dst_stride")))
    dims = {field: tuple(v.pop(f"{field}_{i}") for i in range(1, _N_DIMS + 1)) for field in _DIM_FIELDS}
    try:
        return DMAWorkloadNPU40_50(**v, **dims)
    except VpunnError as exc:
        raise VpunnError(f"{where}{exc}") from None


def _one_hot(codes: np.ndarray, n: int, what: str) -> np.ndarray:
    codes = codes.astype(np.int64)
    if ((codes < 0) | (codes >= n)).any():
        raise VpunnError(f"{what} out of range")
    return np.eye(n, dtype=np.float32)[codes]


def _bytes_27(m: np.ndarray) -> np.ndarray:
    return (m[:, 1] + 1).astype(np.int64) * m[:, 2].astype(np.int64)


def _bytes_40(m: np.ndarray) -> np.ndarray:
    reps = np.where(np.arange(_N_DIMS) < m[:, 3:4], m[:, _SRC_DIM] + 1, 1).astype(np.int64)
    return m[:, 1].astype(np.int64) * reps.prod(axis=1)


def _contiguous_27(device, n_bytes, direction) -> np.ndarray:
    z = np.zeros_like(n_bytes)
    return np.stack([device, z, n_bytes, n_bytes, n_bytes, z, z, z, z, direction], axis=1).astype(np.float64)


def _contiguous_40(device, n_bytes, direction) -> np.ndarray:
    m = np.zeros((len(n_bytes), len(DMA40_COLUMNS)))
    m[:, 0], m[:, 1], m[:, 2], m[:, -2], m[:, -1] = device, n_bytes, n_bytes, NumDMAEngine.Num_Engine_1, direction
    return m


def _descriptors_01(m: np.ndarray) -> np.ndarray:
    """DMA interface 1 (12 floats): the eight size/stride columns, the direction one-hot."""
    return np.concatenate([m[:, 1:9].astype(np.float32), _one_hot(m[:, 9], len(DMADirection), "DMA direction")],
                          axis=1)


def _descriptors_02(m: np.ndarray) -> np.ndarray:
    """DMA interface 2 (29 floats): dst/src width, num_dim, per dim (dst stride, src stride, dst size, src size),
    engine one-hot, direction one-hot; all five dims whatever num_dim says."""
    quads = np.stack([m[:, _DST_STRIDE], m[:, _SRC_STRIDE], m[:, _DST_DIM], m[:, _SRC_DIM]], axis=2)
    return np.concatenate([m[:, [2, 1, 3]], quads.reshape(len(m), -1),
                           _one_hot(m[:, 24], len(NumDMAEngine), "DMA engine count"),
                           _one_hot(m[:, 25], len(DMADirection), "DMA direction")], axis=1).astype(np.float32)


def _descriptors_03(m: np.ndarray) -> np.ndarray:
    """DMA interface 3 (27 floats): num_dim, dst/src width, the five dst then src dim sizes, the five dst then src
    strides, direction one-hot (the engine is not encoded)."""
    return np.concatenate([m[:, [3, 2, 1]], m[:, _DST_DIM], m[:, _SRC_DIM], m[:, _DST_STRIDE], m[:, _SRC_STRIDE],
                           _one_hot(m[:, 25], len(DMADirection), "DMA direction")], axis=1).astype(np.float32)


@dataclass(frozen=True)
class _WorkloadType:
    """A DMA workload type of the runtime: its table columns and the devices the layer model costs with it."""

    workload: type
    columns: tuple[str, ...]
    devices: frozenset[VPUDevice]
    from_row: Callable[[dict, str], object]
    n_bytes: Callable[[np.ndarray], np.ndarray]
    contiguous: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    #: an NN value outside the valid range gives the theoretical DMA (the runtime's provider chain); the 2.x
    #: runtime (docs/vpunn.md §6.3) reports ERROR_INVALID_OUTPUT_RANGE for DMANNWorkload_NPU27
    falls_back: bool


_NPU27 = _WorkloadType(DMAWorkload, DMA_COLUMNS, frozenset({VPUDevice.VPU_2_0, VPUDevice.VPU_2_1, VPUDevice.VPU_2_7}),
                       dma_workload_from_row, _bytes_27, _contiguous_27, falls_back=False)
_NPU40_50 = _WorkloadType(DMAWorkloadNPU40_50, DMA40_COLUMNS, frozenset({VPUDevice.VPU_4_0, VPUDevice.NPU_5_0}),
                          dma_npu40_50_workload_from_row, _bytes_40, _contiguous_40, falls_back=True)
#: input interface -> (workload type, descriptor size, encoder)
_INPUTS = {1: (_NPU27, 12, _descriptors_01), 2: (_NPU40_50, 29, _descriptors_02), 3: (_NPU40_50, 27, _descriptors_03)}


def _per_device(devices: np.ndarray, field: str) -> np.ndarray:
    return np.array([getattr(device_config(d), field) for d in devices], dtype=np.float32)


def _bandwidth_cycles(u: np.ndarray, devices: np.ndarray, n_bytes: np.ndarray) -> np.ndarray:
    """Output 1: u is the fraction of the DMA bytes per CMX cycle; the product and each step in float32."""
    per_cycle = _per_device(devices, "dma_bytes_per_cycle")
    bw = np.clip(u * per_cycle, np.float32(1 / 200), per_cycle).astype(np.float32)
    cmx_cycles = n_bytes.astype(np.float32) / bw
    return np.ceil(cmx_cycles * _per_device(devices, "dpu_mhz") / _per_device(devices, "cmx_mhz")).astype(np.int64)


def _direct_cycles(u: np.ndarray, devices: np.ndarray, n_bytes: np.ndarray) -> np.ndarray:
    """Output 2: u is DPU cycles."""
    return np.ceil(u).astype(np.int64)


#: output interface -> (valid range of the NN value, post-processing)
_OUTPUTS = {1: ((-0.1, 1.1), _bandwidth_cycles), 2: ((0.0, 1e9), _direct_cycles)}


class DmaModel:
    """A DMA NN: `dma_2_7.vpunn` (interface 1), `dma_4_0.vpunn` (2) or `dmann_5_0.vpunn` (3).

    The input interface fixes the workload type (`workload_type`: `DMAWorkload` for 1, `DMAWorkloadNPU40_50` for
    2 and 3) and the devices the layer model may cost with it (`devices`); the post-processing reads each
    workload's own device. The library pairs dma_4_0 with VPU_4_0 and dmann_5_0 with NPU_5_0 (docs/vpunn.md §6.1).

    Args:
        model: path of the file or a parsed `VpunnNetwork`.
        cache_size: entries of the descriptor-keyed cache of NN values; 0 disables.
    """

    def __init__(self, model, cache_size: int = 16384):
        self.network: VpunnNetwork = model if isinstance(model, VpunnNetwork) else read_vpunn(Path(model))
        net = self.network
        if net.input_version not in _INPUTS or net.output_version not in _OUTPUTS:
            raise VpunnError(f"{net.source}: DMA interface {net.input_version} with output {net.output_version} "
                             f"(model name {net.name!r}) is not implemented; implemented: DMA interfaces "
                             f"{', '.join(map(str, sorted(_INPUTS)))} with outputs "
                             f"{', '.join(map(str, sorted(_OUTPUTS)))}")
        self._type, size, self._encode = _INPUTS[net.input_version]
        (self._low, self._high), self._post = _OUTPUTS[net.output_version]
        if net.input_size != size:
            raise VpunnError(f"{net.source}: the network takes {net.input_size} inputs, DMA interface "
                             f"{net.input_version} has {size}")
        self._cache = LruCache(cache_size)

    @property
    def input_version(self) -> int:
        return self.network.input_version

    @property
    def output_version(self) -> int:
        return self.network.output_version

    @property
    def workload_type(self) -> type:
        return self._type.workload

    @property
    def columns(self) -> tuple[str, ...]:
        """The table columns of a workload (`DMA_COLUMNS` or `DMA40_COLUMNS`)."""
        return self._type.columns

    @property
    def devices(self) -> frozenset[VPUDevice]:
        """The devices whose transfers the layer model costs with this model (the runtime matches the type)."""
        return self._type.devices

    def workload_from_row(self, row: dict, where: str = ""):
        return self._type.from_row(row, where)

    def clear_cache(self) -> None:
        self._cache.clear()

    def _matrix(self, workloads) -> np.ndarray:
        if isinstance(workloads, np.ndarray):
            m = workloads
        else:
            m = np.array([w.row() for w in workloads], dtype=np.float64).reshape(-1, len(self.columns))
        if m.ndim != 2 or m.shape[1] != len(self.columns):
            raise VpunnError(f"a {self.workload_type.__name__} matrix has {len(self.columns)} columns; "
                             f"got shape {m.shape}")
        return m

    def descriptors(self, workloads) -> np.ndarray:
        return self._encode(self._matrix(workloads))

    def nn_values(self, descriptors: np.ndarray) -> np.ndarray:
        """Raw NN values; one forward pass over the distinct descriptors not in the cache."""
        d = np.ascontiguousarray(descriptors, dtype=np.float32)
        values = np.empty(len(d), dtype=np.float32)
        keys = [row.tobytes() for row in d]
        missing: dict[bytes, list[int]] = {}  # key -> rows
        for i, key in enumerate(keys):
            hit = self._cache.get(key)
            if hit is None:
                missing.setdefault(key, []).append(i)
            else:
                values[i] = hit
        if missing:
            out = self.network.forward(d[[rows[0] for rows in missing.values()]])
            for (key, rows), v in zip(missing.items(), out):
                values[rows] = v
                self._cache.put(key, v)
        return values

    def cost(self, workloads: Iterable | np.ndarray) -> np.ndarray:
        """DPU cycles per transfer (int64 holding the uint32).

        An NN value outside the output's valid range gives the theoretical DMA of the accessed bytes on 4.0 / 5.0
        and ERROR_INVALID_OUTPUT_RANGE on 2.x (see `_WorkloadType.falls_back`).
        """
        m = self._matrix(workloads)
        if len(m) == 0:
            return np.zeros(0, np.int64)
        u = self.nn_values(self._encode(m))
        valid = (u >= np.float32(self._low)) & (u <= np.float32(self._high))  # NaN is invalid
        devices, n_bytes = m[:, 0].astype(np.int64), self._type.n_bytes(m)
        cycles = self._post(np.where(valid, u, np.float32(0)), devices, n_bytes)
        bad = np.flatnonzero(~valid)
        if len(bad):
            cycles[bad] = (_theoretical_rows(devices[bad], n_bytes[bad], m[bad, -1]) if self._type.falls_back
                           else ERROR_INVALID_OUTPUT_RANGE)
        return cycles

    def cost_1d(self, device, n_bytes, direction) -> np.ndarray:
        """Contiguous transfers as the layer model costs them (arrays broadcast): a 1-D workload of this model's type;
        ERROR_INVALID_INPUT_DEVICE where the device is not one of `devices`."""
        device, n_bytes, direction = (a.astype(np.int64) for a in np.broadcast_arrays(device, n_bytes, direction))
        out = np.full(device.shape, ERROR_INVALID_INPUT_DEVICE, dtype=np.int64)
        ok = np.isin(device, [int(d) for d in self.devices])
        if ok.any():
            out[ok] = self.cost(self._type.contiguous(device[ok], n_bytes[ok], direction[ok]))
        return out


def _theoretical_rows(devices: np.ndarray, n_bytes: np.ndarray, directions: np.ndarray) -> np.ndarray:
    out = np.empty(len(devices), dtype=np.int64)
    for device in np.unique(devices):
        sel = devices == device
        out[sel] = theoretical_dma_cycles(device, n_bytes[sel], directions[sel])
    return out


def theoretical_dma_cycles(device, n_bytes, direction) -> np.ndarray:
    """The runtime's theoretical DMA cycles of contiguous transfers (arrays broadcast), latency included.

    max(latency_src, latency_dst) + max(cycles_src, cycles_dst). Up to VPU_4_0 the legacy formula on the legacy
    constant set (`LEGACY_DMA_OVERRIDES`), from NPU_5_0 on the newer formula on the main set (docs/vpunn.md §6.4).
    """
    cfg = device_config(device)
    n_bytes, direction = (a.astype(np.int64) for a in np.broadcast_arrays(n_bytes, direction))
    src_dram = np.isin(direction, (DMADirection.DDR2CMX, DMADirection.DDR2DDR))
    dst_dram = np.isin(direction, (DMADirection.CMX2DDR, DMADirection.DDR2DDR))
    if cfg.device <= VPUDevice.VPU_4_0:
        cfg = replace(cfg, **LEGACY_DMA_OVERRIDES.get(cfg.device, {}))
        half_duplex = (direction == DMADirection.CMX2CMX) & (cfg.device <= VPUDevice.VPU_2_7)
        c_in, c_out = (_legacy_side_cycles(cfg, n_bytes, dram, half_duplex) for dram in (src_dram, dst_dram))
    else:
        c_in, c_out = (_newer_side_cycles(cfg, n_bytes, dram) for dram in (src_dram, dst_dram))
    l_in, l_out = (np.where(dram, cfg.dram_latency_cycles, cfg.cmx_latency_cycles) for dram in (src_dram, dst_dram))
    return np.maximum(l_in, l_out) + np.maximum(c_in, c_out)


def _legacy_side_cycles(cfg: DeviceConfig, n_bytes: np.ndarray, is_dram: np.ndarray, half_duplex) -> np.ndarray:
    """ceil(bytes * cost per byte), the float32 cost taken to double: DRAM f_DPU/BW; CMX (f_DPU/f_CMX) per word of
    min(bytes, 32) bytes, 16 for half-duplex CMX->CMX (a 0-byte side costs 0)."""
    f32 = np.float32
    word = np.minimum(np.maximum(n_bytes, 1), np.where(half_duplex, 16, 32)).astype(f32)
    cost = np.where(is_dram, f32(cfg.dpu_mhz) / f32(cfg.dram_mbps), f32(cfg.dpu_mhz) / f32(cfg.cmx_mhz) / word)
    return np.ceil(n_bytes * cost.astype(f32).astype(np.float64)).astype(np.int64)


def _newer_side_cycles(cfg: DeviceConfig, n_bytes: np.ndarray, is_dram: np.ndarray) -> np.ndarray:
    """ceil(float32(bytes / bytes per CMX cycle) * f_DPU/f_CMX): the DMA engine width, for DRAM bounded by
    floor(BW / f_CMX); the main set's transfer efficiencies are 1."""
    f32 = np.float32
    dram_per_cycle = min(cfg.dram_mbps // cfg.cmx_mhz, cfg.dma_bytes_per_cycle)
    per_cycle = np.where(is_dram, dram_per_cycle, cfg.dma_bytes_per_cycle).astype(f32)
    return np.ceil(n_bytes.astype(f32) / per_cycle * (f32(cfg.dpu_mhz) / f32(cfg.cmx_mhz))).astype(np.int64)
