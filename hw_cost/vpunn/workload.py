"""DPU workloads: one `DPUWorkload`, and the float64 matrix (one row per workload) the batched code works on.

A workload has every field of the reference vectors (`vpunn_dpu.csv`, and the optional fields of the 4.0 / 5.0
vectors `npu45_dpu.csv`); fields not listed there stay at the library defaults (no halo, no SEP). The matrix adds
the output *memory* tensor (W, H, C), which only the layer model sets differently from the output (SOK broadcast,
see layer.py).

Optional fields are matrix columns too: `weight_type` is -1 when not set (weights dtype = input dtype);
`in_place_output` and `weightless` are -1 when not set (the runtime then derives them from the layouts and dtypes,
docs/vpunn.md §3.5), else 0/1; `superdense`, `input_autopad` and `output_autopad` are 0/1 (not set = 0).
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable

import numpy as np

from .enums import (ActivationFunction, DataType, ExecutionMode, ISIStrategy, Layout, Operation, Swizzling,
                    VPUDevice, parse_enum)
from .errors import VpunnError

__all__ = ["DPUWorkload", "F", "FIELDS", "WORKLOAD_COLUMNS", "OPTIONAL_COLUMNS", "UNSET", "workloads_to_matrix",
           "workload_from_row"]


@dataclass(frozen=True)
class DPUWorkload:
    """One DPU workload, as passed to VPUNN's `DPUWorkload` (shapes are [W, H, C, B], pads top/bottom/left/right).

    `out_mem` optionally gives the output memory tensor (W, H, C) used by the CMX check when it differs from the
    computed output (a broadcast SOK tile); None means the output itself.
    """

    device: VPUDevice
    operation: Operation
    in_w: int
    in_h: int
    in_c: int
    out_w: int
    out_h: int
    out_c: int
    in_b: int = 1
    out_b: int = 1
    in_dtype: DataType = DataType.UINT8
    out_dtype: DataType = DataType.UINT8
    in_layout: Layout = Layout.ZXY
    out_layout: Layout = Layout.ZXY
    k_w: int = 1
    k_h: int = 1
    s_w: int = 1
    s_h: int = 1
    pad_top: int = 0
    pad_bottom: int = 0
    pad_left: int = 0
    pad_right: int = 0
    execution_mode: ExecutionMode = ExecutionMode.CUBOID_16x16
    activation: ActivationFunction = ActivationFunction.NONE
    act_sparsity: float = 0.0
    weight_sparsity: float = 0.0
    in_sparsity_enabled: bool = False
    weight_sparsity_enabled: bool = False
    in_swizzling0: Swizzling = Swizzling.KEY_5
    in_swizzling1: Swizzling = Swizzling.KEY_5
    out_swizzling0: Swizzling = Swizzling.KEY_5
    output_write_tiles: int = 1
    isi_strategy: ISIStrategy = ISIStrategy.CLUSTERING
    weight_type: DataType | None = None
    superdense: bool = False
    in_place_output: bool | None = None
    weightless: bool | None = None
    input_autopad: bool = False
    output_autopad: bool = False
    out_mem: tuple[int, int, int] | None = None

    def row(self) -> tuple:
        """The workload as one row of the workload matrix (column order `FIELDS`)."""
        mem = self.out_mem or (self.out_w, self.out_h, self.out_c)
        optional = tuple(UNSET if getattr(self, name) is None else float(getattr(self, name))
                         for name in OPTIONAL_COLUMNS)
        return tuple(float(getattr(self, name)) for name in WORKLOAD_COLUMNS) + optional + tuple(map(float, mem))


#: the workload columns of vpunn_dpu.csv, in the matrix order
WORKLOAD_COLUMNS = (
    "device", "operation", "in_w", "in_h", "in_c", "in_b", "out_w", "out_h", "out_c", "out_b", "in_dtype",
    "out_dtype", "in_layout", "out_layout", "k_w", "k_h", "s_w", "s_h", "pad_top", "pad_bottom", "pad_left",
    "pad_right", "execution_mode", "activation", "act_sparsity", "weight_sparsity", "in_sparsity_enabled",
    "weight_sparsity_enabled", "in_swizzling0", "in_swizzling1", "out_swizzling0", "output_write_tiles",
    "isi_strategy",
)
#: optional columns (npu45_dpu.csv): an empty or missing cell is "not set"
OPTIONAL_COLUMNS = ("weight_type", "superdense", "in_place_output", "weightless", "input_autopad", "output_autopad")
FIELDS = WORKLOAD_COLUMNS + OPTIONAL_COLUMNS + ("mem_w", "mem_h", "mem_c")
#: matrix value of an optional field that is not set
UNSET = -1.0


#: column index of each field of the workload matrix: F.in_c, F.out_w, ... (a named tuple of plain ints: numpy hot
#: paths read them, and numba reads it as constants)
F = namedtuple("F", FIELDS)(*range(len(FIELDS)))

_ENUM_FIELDS: dict[str, type[IntEnum]] = {
    "device": VPUDevice, "operation": Operation, "in_dtype": DataType, "out_dtype": DataType, "in_layout": Layout,
    "out_layout": Layout, "execution_mode": ExecutionMode, "activation": ActivationFunction,
    "in_swizzling0": Swizzling, "in_swizzling1": Swizzling, "out_swizzling0": Swizzling, "isi_strategy": ISIStrategy,
    "weight_type": DataType,
}
_FLOAT_FIELDS = ("act_sparsity", "weight_sparsity")
_FLAG_FIELDS = ("in_sparsity_enabled", "weight_sparsity_enabled") + OPTIONAL_COLUMNS[1:]


def workloads_to_matrix(workloads: Iterable[DPUWorkload] | np.ndarray) -> np.ndarray:
    """An (n, len(FIELDS)) float64 matrix of workloads (a matrix passes through, checked for shape)."""
    if isinstance(workloads, np.ndarray):
        m = workloads
    else:
        m = np.array([w.row() for w in workloads], dtype=np.float64).reshape(-1, len(FIELDS))
    if m.ndim != 2 or m.shape[1] != len(FIELDS):
        raise VpunnError(f"a workload matrix has {len(FIELDS)} columns ({', '.join(FIELDS)}); got shape {m.shape}")
    return m


def workload_from_row(row: dict, where: str = "") -> DPUWorkload:
    """A workload from one CSV row (the columns of vpunn_dpu.csv, optionally those of `OPTIONAL_COLUMNS`; other
    keys are ignored). An optional column that is missing or empty is "not set".

    Enum cells hold C++ names (VPU_2_7, CONVOLUTION, UINT8, ...); 0/1 flags may also be true/false.
    Raises VpunnError naming the row and column of a bad value.
    """
    values = {}
    for name in WORKLOAD_COLUMNS + OPTIONAL_COLUMNS:
        cell = row.get(name)
        if cell is None and name not in OPTIONAL_COLUMNS:
            raise VpunnError(f"{where}missing column {name!r}")
        cell = (cell or "").strip()
        if not cell and name in OPTIONAL_COLUMNS:
            continue
        try:
            if name in _ENUM_FIELDS:
                values[name] = parse_enum(_ENUM_FIELDS[name], cell)
            elif name in _FLOAT_FIELDS:
                values[name] = float(cell)
            elif name in _FLAG_FIELDS:
                values[name] = _flag(cell)
            else:
                values[name] = _integer(cell)
        except (VpunnError, ValueError) as exc:
            raise VpunnError(f"{where}column {name!r}: bad value {cell!r} ({exc})") from None
    return DPUWorkload(**values)


def _integer(cell: str) -> int:
    value = float(cell)
    if not value.is_integer():
        raise ValueError("not an integer")
    return int(value)


def _flag(cell: str) -> bool:
    low = cell.lower()
    if low in ("1", "true", "1.0"):
        return True
    if low in ("0", "false", "0.0", ""):
        return False
    raise ValueError("expected 0 or 1")

