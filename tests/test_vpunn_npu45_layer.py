"""The layer model on VPU 4.0 and NPU 5.0 against every row of npu45_layer.csv (docs/vpunn.md §8): errors, per-tile
details, cycles and the four DMA variants, for the seven strategies of these devices and AUTO_MIN."""
from __future__ import annotations


import numpy as np
import pytest

from hw_cost.vpunn import (DataType, DMADirection, DmaModel, DpuModel, ExecutionMode, LayerModel, LayerRequest,
                           Operation, VPUDevice, VPUTilingStrategy, dpu_layer, theoretical_dma_cycles)
from hw_cost.vpunn.layer import tiling_strategies
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import read_vpunn
from hw_cost.vpunn.sanitizer import check, layer_fixups, sanitize
from hw_cost.vpunn.tables import STRATEGY_NAMES
from hw_cost.vpunn.workload import F, workloads_to_matrix
from conftest import int_list, vector_rows_by_device, vpunn_layer_of_row

#: device -> (DPU model, DMA model), the pairing of the reference vectors (docs/vpunn.md §1.3)
MODELS = {"VPU_4_0": ("vpu_4_0.vpunn", "dma_4_0.vpunn"), "NPU_5_0": ("vpu_5_1.vpunn", "dmann_5_0.vpunn")}
DMA_COLUMNS = {"cycles_wdma_theo": (dict(prefetching=False), False),
               "cycles_ddr_theo": (dict(prefetching=False, input_in_ddr=True, output_in_ddr=True), False),
               "cycles_wdma_nn": (dict(prefetching=False), True),
               "cycles_ddr_nn": (dict(prefetching=False, input_in_ddr=True, output_in_ddr=True), True)}


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    return vector_rows_by_device("npu45/npu45_layer.csv", MODELS)


@pytest.fixture(scope="module")
def dpu_models() -> dict[str, DpuModel]:
    return {d: DpuModel(read_vpunn(SHIPPED_MODEL_DIR / dpu)) for d, (dpu, _) in MODELS.items()}


@pytest.fixture(scope="module")
def dma_models() -> dict[str, DmaModel]:
    return {d: DmaModel(read_vpunn(SHIPPED_MODEL_DIR / dma)) for d, (_, dma) in MODELS.items()}


def _requests(rows, **flags):
    return [LayerRequest(vpunn_layer_of_row(r), STRATEGY_NAMES[r["strategy"]], int(r["n_dpu"]), int(r["n_tiles"]),
                         **flags)
            for r in rows]


def _nn_evaluations(rows: list[dict]) -> dict[str, int]:
    """Per layer: the most DPU workloads summed into one tile over its strategies (a row's cycle tolerance)."""
    out: dict[str, int] = {}
    for r in rows:
        counts = [int(float(v)) for v in r["tile_n_workloads"].split(";")] if r["tile_n_workloads"] else [1]
        out[r["layer_id"]] = max(out.get(r["layer_id"], 1), *counts)
    return out


def _close(got: int, ref: int, n_eval: int) -> bool:
    """docs/vpunn.md §10: a plain float32 matmul moves a ceil by one on 0.1-0.4 % of the workloads, and a tile sums
    its workloads."""
    return abs(got - ref) <= max(n_eval, 1e-5 * ref)


@pytest.mark.parametrize("device", MODELS)
def test_layer_cycles_errors_and_details(rows, dpu_models, device):
    sub = rows[device]
    tolerance = _nn_evaluations(sub)
    results = LayerModel(dpu_models[device]).cost(_requests(sub))
    exact = 0
    for r, res in zip(sub, results):
        where = (r["layer_id"], r["strategy"])
        assert res.error == r["error"], (*where, res.error)
        if r["error"]:
            assert res.cycles == int(r["cycles"])
            assert len(res.tiles) == int(float(r["n_tiles_computed"] or 0)), where
            assert all(t.cycles == 0 and t.n_workloads == 0 for t in res.tiles)
            continue
        ref = int(r["cycles"])
        assert _close(res.cycles, ref, tolerance[r["layer_id"]]), (*where, res.cycles, ref)
        exact += res.cycles == ref
        if r["strategy"] == "AUTO_MIN":
            assert [x.strategy for x in res.by_strategy] == list(tiling_strategies(VPUDevice[device]))
            assert res.cycles == min(x.cycles for x in res.by_strategy)
            continue
        tiles = res.tiles
        assert len(tiles) == int(float(r["n_tiles_computed"])), where
        assert ";".join(str(t.n_workloads) for t in tiles) == int_list(r["tile_n_workloads"]), where
        assert ";".join(t.mode.name for t in tiles) == r["tile_exec_modes"], where
        assert ";".join("x".join(map(str, t.out_shape)) for t in tiles) == r["tile_out_shapes"], where
        assert ";".join("x".join(map(str, s)) for s in tiles[0].workload_shapes) == r["wl_shapes_tile0"], where
        tile_ref = [int(float(v)) for v in r["tile_cycles"].split(";")]
        assert all(_close(t.cycles, c, t.n_workloads) for t, c in zip(tiles, tile_ref)), where
    valid = sum(1 for r in sub if not r["error"])
    assert exact >= 0.95 * valid, (exact, valid)


@pytest.mark.parametrize("device", MODELS)
@pytest.mark.parametrize("column", DMA_COLUMNS)
def test_dma_variants(rows, dpu_models, dma_models, device, column):
    flags, use_nn = DMA_COLUMNS[column]
    sub = [r for r in rows[device] if r[column]]
    assert sub
    tolerance = _nn_evaluations(rows[device])
    results = LayerModel(dpu_models[device], dma_models[device] if use_nn else None).cost(_requests(sub, **flags))
    diff = np.array([res.cycles - int(float(r[column])) for r, res in zip(sub, results)])
    far = [(r["layer_id"], r["strategy"], d) for r, res, d in zip(sub, results, diff)
           if not _close(res.cycles, int(float(r[column])), tolerance[r["layer_id"]])]
    assert not far, far[:5]
    assert (diff == 0).mean() > 0.95
    # the DMA term itself (weights on the DMA ports, activations) is exact on every row; errors are not changed
    dma_off = [(r["layer_id"], r["strategy"]) for r, res in zip(sub, results)
               if (res.dma_cycles != int(float(r[column])) - int(r["cycles"]) if res.valid
                   else res.cycles != int(float(r[column])))]
    assert not dma_off, dma_off[:5]


def test_strategies_per_device():
    t = VPUTilingStrategy
    assert tiling_strategies(VPUDevice.VPU_2_7) == (t.NONE, t.SOH_Overlapped, t.SOK)
    assert tiling_strategies(VPUDevice.NPU_5_0) == (t.NONE, t.SOH_Overlapped, t.SOK, t.SOW, t.SOHW, t.SOHK,
                                                    t.SOHO_K_SWITCH)


class _ConstantDpu:
    """Every workload the sanitizer accepts costs `cycles`, or `by_mode[its MPE mode]` where given."""

    def __init__(self, cycles: int, by_mode: dict | None = None):
        self.cycles, self.by_mode = cycles, by_mode or {}

    def cost(self, workloads):
        m = sanitize(workloads_to_matrix(workloads))
        cycles = [self.by_mode.get(ExecutionMode(int(mode)), self.cycles) for mode in m[:, F.execution_mode]]
        code = check(m, "workload")
        return np.where(code == 0, cycles, code)


def _conv(device, whc_in, whc_out, **kw):
    return dpu_layer(device, Operation.CONVOLUTION, whc_in, whc_out, kernel=(3, 3), padding=(1, 1, 1, 1), **kw)


def _tiles(layer, strategy, n_tiles):
    row = layer_fixups(workloads_to_matrix([layer]))[0]
    return [{name: int(t[getattr(F, name)]) for name in ("in_w", "in_h", "out_w", "out_h", "pad_top", "pad_bottom",
                                                         "pad_left", "pad_right", "output_write_tiles", "mem_w",
                                                         "mem_h", "isi_strategy")}
            for t in LayerModel._split_layer(row, strategy, n_tiles)]


def test_width_and_broadcast_splits():
    conv = _conv(VPUDevice.VPU_4_0, (28, 5, 64), (28, 5, 64))
    sow = _tiles(conv, VPUTilingStrategy.SOW, 4)
    assert [(t["in_w"], t["out_w"], t["pad_left"], t["pad_right"]) for t in sow] == [
        (8, 7, 1, 0), (9, 7, 0, 0), (9, 7, 0, 0), (8, 7, 0, 1)]
    assert {(t["out_h"], t["mem_w"], t["output_write_tiles"], t["isi_strategy"]) for t in sow} == {(5, 7, 1, 0)}
    # five rows over four tiles: 2, 2, 1; the broadcast goes to the three tiles that exist
    switch = _tiles(conv, VPUTilingStrategy.SOHO_K_SWITCH, 4)
    assert [(t["out_h"], t["pad_top"], t["pad_bottom"]) for t in switch] == [(2, 1, 0), (2, 0, 0), (1, 0, 1)]
    assert {(t["mem_h"], t["output_write_tiles"], t["isi_strategy"]) for t in switch} == {(5, 3, 0)}
    assert [t["output_write_tiles"] for t in _tiles(conv, VPUTilingStrategy.SOH_Overlapped, 4)] == [1, 1, 1]
    assert _tiles(conv, VPUTilingStrategy.SOHW, 4) == _tiles(conv, VPUTilingStrategy.SOHK, 4) == []


def test_layer_errors_and_auto_min():
    lm = LayerModel(_ConstantDpu(100))
    fc = dpu_layer(VPUDevice.NPU_5_0, Operation.CONVOLUTION, (1, 1, 1280), (1, 1, 1008))
    res = lm.layer(fc, VPUTilingStrategy.AUTO_MIN, 1, 4)
    errors = {r.strategy.name: r.error for r in res.by_strategy}
    assert errors == {"NONE": "", "SOK": "", "SOH_Overlapped": "ERROR_INVALID_LAYER_CONFIGURATION",
                      "SOW": "ERROR_INVALID_LAYER_CONFIGURATION", "SOHW": "ERROR_INVALID_LAYER_CONFIGURATION",
                      "SOHK": "ERROR_INVALID_LAYER_CONFIGURATION", "SOHO_K_SWITCH": "ERROR_INVALID_LAYER_CONFIGURATION"}
    assert res.valid and res.strategy == VPUTilingStrategy.NONE  # equal costs: the first strategy wins
    assert lm.layer(fc, VPUTilingStrategy.NONE, 1, 9).error == "ERROR_INVALID_LAYER_CONFIGURATION"  # owt <= 8
    batch2 = dpu_layer(VPUDevice.NPU_5_0, Operation.CONVOLUTION, (8, 8, 32), (8, 8, 32), batch=2)
    assert lm.layer(batch2, VPUTilingStrategy.NONE, 1, 4).error == "ERROR_INVALID_LAYER_CONFIGURATION"
    # too big for every tile: the unimplemented strategies' ERROR_TILE_OUTPUT is the smallest code
    huge = _conv(VPUDevice.VPU_4_0, (14, 14, 1024), (14, 14, 1024), dtype=DataType.FLOAT16)
    res = lm.layer(huge, VPUTilingStrategy.AUTO_MIN, 1, 4)
    assert res.error == "ERROR_TILE_OUTPUT"
    assert {r.error for r in res.by_strategy} == {"ERROR_INPUT_TOO_BIG", "ERROR_TILE_OUTPUT"}


def test_zero_cycle_splits_are_rejected():
    conv = _conv(VPUDevice.VPU_4_0, (16, 16, 32), (16, 16, 32))
    assert LayerModel(_ConstantDpu(7)).layer(conv, VPUTilingStrategy.SOK, 1, 2).cycles == 7
    assert LayerModel(_ConstantDpu(0)).layer(conv, VPUTilingStrategy.SOK, 1, 2).error == "ERROR_TILE_OUTPUT"


def test_avepool_native_on_5_0_and_per_device_modes():
    def pool(device):
        return dpu_layer(device, Operation.AVEPOOL, (16, 16, 128), (16, 16, 128), kernel=(3, 3), padding=(1, 1, 1, 1))

    lm = LayerModel(_ConstantDpu(10))
    native = lm.layer(pool(VPUDevice.NPU_5_0), VPUTilingStrategy.NONE, 1, 1, prefetching=False)
    # 128 channels: split into two 64-channel workloads, like a DW_CONVOLUTION; no weights to move
    assert (native.dpu_cycles, native.tiles[0].n_workloads) == (20, 2)
    assert native.dma_cycles == theoretical_dma_cycles(VPUDevice.NPU_5_0, 0, DMADirection.DDR2CMX)
    as_dw = lm.layer(pool(VPUDevice.VPU_4_0), VPUTilingStrategy.NONE, 1, 1, prefetching=False)
    assert as_dw.dpu_cycles == 20 and as_dw.dma_cycles > theoretical_dma_cycles(VPUDevice.VPU_4_0, 0,
                                                                                DMADirection.DDR2CMX)
    # CM_CONVOLUTION tries all three MPE modes on 5.0, only 16x16 on 4.0
    cheap_4x16 = LayerModel(_ConstantDpu(20, {ExecutionMode.CUBOID_4x16: 10}))
    first = {device: dpu_layer(VPUDevice[device], Operation.CONVOLUTION, (32, 32, 3), (16, 16, 32), kernel=(3, 3),
                               stride=(2, 2), padding=(1, 0, 1, 0)) for device in MODELS}
    modes = {d: cheap_4x16.layer(layer, VPUTilingStrategy.NONE, 1, 1).tiles[0].mode for d, layer in first.items()}
    assert modes == {"VPU_4_0": ExecutionMode.CUBOID_16x16, "NPU_5_0": ExecutionMode.CUBOID_4x16}
