"""Bulk VPUNN queries on CSV tables (the `vpunas vpunn dpu|layer|dma` commands).

Input columns are those of the reference vectors (`vpunn_dpu.csv`, `vpunn_layer.csv`, `vpunn_dma.csv`); other
columns are ignored. A missing column, an empty table or a bad cell raises VpunnError naming the row and column.
Outputs are written to a temporary file and renamed, so a failed run leaves no partial table behind.
"""
from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .dma import DmaModel
from .descriptors import first_unencodable
from .dpu import DpuModel, UnencodableWorkload
from .enums import ActivationFunction, DataType, Layout, Operation, VPUDevice, VPUTilingStrategy, parse_enum
from .errors import VpunnError, error_name
from .layer import LayerModel, LayerRequest, LayerResult, dpu_layer
from .network import read_model_cached
from .paths import resolve_model_file
from .sanitizer import broken_rules, sanitize
from .workload import WORKLOAD_COLUMNS, workload_from_row, workloads_to_matrix

__all__ = ["read_table", "write_table", "dpu_table", "layer_table", "dma_table", "LAYER_COLUMNS",
           "STRATEGY_NAMES"]

LAYER_COLUMNS = ("layer_id", "device", "operation", "in_w", "in_h", "in_c", "out_w", "out_h", "out_c", "k_w", "k_h",
                 "s_w", "s_h", "pad_top", "pad_bottom", "pad_left", "pad_right", "in_dtype", "out_dtype",
                 "activation", "n_tiles", "n_dpu", "strategy")
#: strategy names of the layer table
STRATEGY_NAMES = {("SOHO" if s == VPUTilingStrategy.SOH_Overlapped else s.name): s for s in VPUTilingStrategy}
_DETAIL_COLUMNS = ("n_tiles_computed", "tile_cycles", "tile_n_workloads", "tile_exec_modes", "tile_out_shapes",
                   "wl_shapes_tile0")


def read_table(path, required: Sequence[str]) -> list[dict]:
    """Rows of a CSV file with a header that has every `required` column."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if not header:
                raise VpunnError(f"{path}: empty file (expected a CSV header with {', '.join(required)})")
            if missing:
                more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
                raise VpunnError(f"{path}: missing column {missing[0]!r}{more}")
            rows = list(reader)
    except FileNotFoundError:
        raise VpunnError(f"input table not found: {path}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise VpunnError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows:
        raise VpunnError(f"{path}: the table has a header but no rows")
    return rows


def write_table(path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """Write a CSV atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _where(path, i: int, row: dict, id_column: str) -> str:
    return f"{Path(path).name} row {i + 2} ({id_column}={row.get(id_column, '?')}): "


def _rows_of(device: str | None, rows: list[dict], in_csv) -> list[dict]:
    """The rows of one device (all rows when `device` is None)."""
    if device is None:
        return rows
    keep = parse_enum(VPUDevice, device, "`device`").name
    rows = [r for r in rows if r.get("device", "").strip() == keep]
    if not rows:
        raise VpunnError(f"{in_csv}: no rows for device {keep}")
    return rows


def dpu_table(model_file, in_csv, out_csv, *, model_dir=None, device: str | None = None) -> int:
    """Cost every workload row of `in_csv` with a DPU model file; write `id,cycles,error,rule`: the rule of
    `sanitizer.RULES` an invalid workload breaks (after the runtime's sanitizing). Returns the row count.

    `device` keeps only the rows of that device (e.g. "VPU_2_7" for a 2.7 model on the mixed reference table).
    """
    model = DpuModel(read_model_cached(resolve_model_file(model_file, model_dir)))
    rows = read_table(in_csv, ("id",) + WORKLOAD_COLUMNS)
    rows = _rows_of(device, rows, in_csv)
    workloads = [workload_from_row(r, _where(in_csv, i, r, "id")) for i, r in enumerate(rows)]
    matrix = workloads_to_matrix(workloads)
    try:
        cycles = model.cost(matrix)
    except UnencodableWorkload as exc:
        r = rows[exc.index]
        raise VpunnError(f"{Path(in_csv).name} id={r['id']} ({r['device']}): {exc.reason}; the model file "
                         f"{Path(model_file).name} cannot cost it (select the rows of one device: `device`)") from None
    rules = broken_rules(sanitize(matrix))
    write_table(out_csv, ("id", "cycles", "error", "rule"),
                ((r["id"], int(c), error_name(c), rule) for r, c, rule in zip(rows, cycles, rules)))
    return len(rows)


def _layer_request(row: dict, where: str, dma_flags: dict) -> LayerRequest:
    try:
        device = parse_enum(VPUDevice, row["device"], "device")
        op = parse_enum(Operation, row["operation"], "operation")
        dtype_in = parse_enum(DataType, row["in_dtype"], "in_dtype")
        dtype_out = parse_enum(DataType, row["out_dtype"], "out_dtype")
        act = parse_enum(ActivationFunction, row["activation"], "activation")
        strategy_name = row["strategy"].strip()
        if strategy_name not in STRATEGY_NAMES:
            raise VpunnError(f"strategy: unknown strategy {strategy_name!r}; valid: {', '.join(STRATEGY_NAMES)}")
        ints = {}
        for name in LAYER_COLUMNS[3:17] + ("n_tiles", "n_dpu"):
            cell = row[name].strip()
            try:
                value = float(cell)
            except ValueError:
                raise VpunnError(f"{name}: bad value {cell!r} (expected an integer)") from None
            if not value.is_integer():
                raise VpunnError(f"{name}: bad value {cell!r} (expected an integer)")
            ints[name] = int(value)
    except VpunnError as exc:
        raise VpunnError(f"{where}column {exc}") from None
    if ints["n_tiles"] < 1 or ints["n_dpu"] < 1:
        raise VpunnError(f"{where}n_tiles and n_dpu must be at least 1")
    layer = dpu_layer(device, op, (ints["in_w"], ints["in_h"], ints["in_c"]), (ints["out_w"], ints["out_h"],
                      ints["out_c"]), kernel=(ints["k_w"], ints["k_h"]), stride=(ints["s_w"], ints["s_h"]),
                      padding=(ints["pad_top"], ints["pad_bottom"], ints["pad_left"], ints["pad_right"]),
                      dtype=dtype_in, out_dtype=dtype_out, activation=act)
    for col in ("in_layout", "out_layout"):  # optional columns
        if row.get(col, "").strip():
            try:
                layer = replace(layer, **{col: parse_enum(Layout, row[col], col)})
            except VpunnError as exc:
                raise VpunnError(f"{where}column {exc}") from None
    return LayerRequest(layer, STRATEGY_NAMES[strategy_name], ints["n_dpu"], ints["n_tiles"], **dma_flags)


def _details(res: LayerResult) -> list[str]:
    if res.by_strategy:  # AUTO_MIN rows carry no per-tile detail, as in the reference table
        return [""] * len(_DETAIL_COLUMNS)
    tiles = res.tiles
    shape = lambda s: "x".join(map(str, s))  # noqa: E731
    return [str(len(tiles)), ";".join(str(t.cycles) for t in tiles), ";".join(str(t.n_workloads) for t in tiles),
            ";".join(t.mode.name if t.mode is not None else "" for t in tiles),
            ";".join(shape(t.out_shape) for t in tiles),
            ";".join(shape(s) for s in tiles[0].workload_shapes) if tiles else ""]


def layer_table(model_file, in_csv, out_csv, *, model_dir=None, device: str | None = None, dma_model=None,
                prefetching: bool = True, input_in_ddr: bool = False, output_in_ddr: bool = False,
                details: bool = False) -> int:
    """Cost every layer row of `in_csv`; write `layer_id,strategy,cycles,error` (+ per-tile detail columns).

    device: keep only that device's rows. dma_model: a DMA model file for the DMA terms (default: the
    theoretical DMA model).
    """
    dpu = DpuModel(read_model_cached(resolve_model_file(model_file, model_dir)))
    dma = DmaModel(read_model_cached(resolve_model_file(dma_model, model_dir))) if dma_model else None
    rows = read_table(in_csv, LAYER_COLUMNS)
    rows = _rows_of(device, rows, in_csv)
    flags = dict(prefetching=prefetching, input_in_ddr=input_in_ddr, output_in_ddr=output_in_ddr)
    requests = [_layer_request(r, _where(in_csv, i, r, "layer_id"), flags) for i, r in enumerate(rows)]
    for dev in dict.fromkeys(req.layer.device for req in requests):  # a device the interface cannot express
        probe = sanitize(workloads_to_matrix([dpu_layer(dev, Operation.CONVOLUTION, (16, 16, 16), (16, 16, 16))]))
        bad = first_unencodable(probe, dpu.version)
        if bad is not None:
            row = next(r for r, req in zip(rows, requests) if req.layer.device == dev)
            raise VpunnError(f"{Path(in_csv).name} layer_id={row['layer_id']} ({dev.name}): {bad[1]}; the model file "
                             f"{Path(model_file).name} cannot cost {dev.name} layers (select the rows "
                             "of one device: `device`)")
    results = LayerModel(dpu, dma).cost(requests)
    header = ("layer_id", "strategy", "cycles", "error") + (_DETAIL_COLUMNS if details else ())
    write_table(out_csv, header, ([r["layer_id"], r["strategy"].strip(), res.cycles, res.error]
                                  + (_details(res) if details else []) for r, res in zip(rows, results)))
    return len(rows)


def dma_table(model_file, in_csv, out_csv, *, model_dir=None, device: str | None = None) -> int:
    """Cost every DMA transfer row of `in_csv` with a DMA model file; write `id,cycles,error`. The rows have the
    columns of the file's workload type: `vpunn_dma.csv`'s for dma_2_7, `npu45_dma.csv`'s for dma_4_0 and
    dmann_5_0. `device` keeps only that device's rows."""
    model = DmaModel(read_model_cached(resolve_model_file(model_file, model_dir)))
    rows = _rows_of(device, read_table(in_csv, ("id",) + model.columns), in_csv)  # the file's workload type
    workloads = [model.workload_from_row(r, _where(in_csv, i, r, "id")) for i, r in enumerate(rows)]
    cycles = model.cost(workloads)
    write_table(out_csv, ("id", "cycles", "error"),
                ((r["id"], int(c), error_name(c)) for r, c in zip(rows, np.asarray(cycles))))
    return len(rows)
