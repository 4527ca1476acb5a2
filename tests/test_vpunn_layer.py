"""The layer model against every row of vpunn_layer.csv: cycles, errors, per-tile details and DMA variants."""
from __future__ import annotations


import numpy as np
import pytest

from hw_cost.vpunn import (DataType, DmaModel, DpuModel, LayerModel, LayerRequest, Operation,
                           VPUDevice, VPUTilingStrategy, dpu_layer)
from hw_cost.vpunn.errors import ERROR_CODES
from hw_cost.vpunn.layer import _halvings
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import read_vpunn
from hw_cost.vpunn.tables import STRATEGY_NAMES
from conftest import int_list, vector_rows_by_device, vpunn_layer_of_row

MODELS = SHIPPED_MODEL_DIR
DEVICES = ("VPU_2_7", "VPU_2_0")


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    return vector_rows_by_device("vpunn_layer.csv", DEVICES)


@pytest.fixture(scope="module")
def dpu_models() -> dict[str, DpuModel]:
    return {d: DpuModel(read_vpunn(MODELS / f"{d.lower()}.vpunn")) for d in DEVICES}


@pytest.fixture(scope="module")
def dma_model() -> DmaModel:
    return DmaModel(read_vpunn(MODELS / "dma_2_7.vpunn"))


def _requests(rows, **flags):
    return [LayerRequest(vpunn_layer_of_row(r), STRATEGY_NAMES[r["strategy"]], int(r["n_dpu"]), int(r["n_tiles"]),
                         **flags)
            for r in rows]


@pytest.mark.parametrize("device", DEVICES)
def test_layer_cycles_errors_and_details(rows, dpu_models, device):
    sub = rows[device]
    results = LayerModel(dpu_models[device]).cost(_requests(sub))
    within, exact = 0, 0
    for r, res in zip(sub, results):
        assert res.error == r["error"], (r["layer_id"], r["strategy"], res.error, r["error"])
        if r["error"]:
            assert res.cycles == int(r["cycles"])
            continue
        ref = int(r["cycles"])
        within += abs(res.cycles - ref) <= 1
        exact += res.cycles == ref
        if r["strategy"] == "AUTO_MIN":
            assert len(res.by_strategy) == 3 and res.cycles == min(x.cycles for x in res.by_strategy)
            continue
        tiles = res.tiles
        assert len(tiles) == int(float(r["n_tiles_computed"]))
        assert ";".join(str(t.n_workloads) for t in tiles) == int_list(r["tile_n_workloads"])
        assert ";".join(t.mode.name for t in tiles) == r["tile_exec_modes"]
        assert ";".join("x".join(map(str, t.out_shape)) for t in tiles) == r["tile_out_shapes"]
        assert ";".join("x".join(map(str, s)) for s in tiles[0].workload_shapes) == r["wl_shapes_tile0"]
        tile_ref = [int(float(v)) for v in r["tile_cycles"].split(";")]
        assert all(abs(t.cycles - c) <= 1 for t, c in zip(tiles, tile_ref))
    valid = sum(1 for r in sub if not r["error"])
    assert within == valid  # the acceptance bar is 1 % on 95 %; every row is within one cycle
    assert exact >= 0.95 * valid


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("column, flags, use_nn", [
    ("cycles_wdma_theo", dict(prefetching=False), False),
    ("cycles_ddr_theo", dict(prefetching=False, input_in_ddr=True, output_in_ddr=True), False),
    ("cycles_wdma_nn", dict(prefetching=False), True),
    ("cycles_ddr_nn", dict(prefetching=False, input_in_ddr=True, output_in_ddr=True), True),
])
def test_dma_variants(rows, dpu_models, dma_model, device, column, flags, use_nn):
    sub = [r for r in rows[device] if r[column]]
    assert sub
    results = LayerModel(dpu_models[device], dma_model if use_nn else None).cost(_requests(sub, **flags))
    diff = np.array([res.cycles - int(float(r[column])) for r, res in zip(sub, results)])
    assert (np.abs(diff) <= 2).all(), [(r["layer_id"], r["strategy"]) for r, d in zip(sub, diff) if abs(d) > 2][:5]
    assert (diff == 0).mean() > 0.95
    plain = LayerModel(dpu_models[device]).cost(_requests(sub))
    assert all(res.cycles >= p.cycles for res, p in zip(results, plain) if p.valid and res.valid)


@pytest.mark.parametrize("m, cap, expected", [(7, 128, [7]), (12, 128, [12, 6, 3]), (8, 128, [8, 4, 2]),
                                               (12, 5, [3]), (1, 128, []), (0, 128, [])])
def test_halvings(m, cap, expected):
    assert _halvings(m, cap) == expected


def test_layer_level_errors(dpu_models):
    lm = LayerModel(dpu_models["VPU_2_7"])
    conv = dpu_layer(VPUDevice.VPU_2_7, Operation.CONVOLUTION, (28, 28, 64), (28, 28, 64), kernel=(3, 3),
                     padding=(1, 1, 1, 1))
    assert lm.layer(conv, VPUTilingStrategy.SOK, 1, 3).error == "ERROR_INVALID_LAYER_CONFIGURATION"  # owt 3
    one_tile_sok = lm.layer(conv, VPUTilingStrategy.SOK, 1, 1)  # passes the layer check, its tile fails
    assert one_tile_sok.error == "ERROR_INVALID_INPUT_CONFIGURATION"
    assert [t.cycles for t in one_tile_sok.tiles] == [0]
    huge = dpu_layer(VPUDevice.VPU_2_7, Operation.CONVOLUTION, (224, 224, 256), (224, 224, 256), kernel=(3, 3),
                     padding=(1, 1, 1, 1), dtype=DataType.FLOAT16)
    res = lm.layer(huge, VPUTilingStrategy.AUTO_MIN, 1, 2)
    assert res.cycles == ERROR_CODES["ERROR_INPUT_TOO_BIG"]
    assert {r.error for r in res.by_strategy} == {"ERROR_INPUT_TOO_BIG"}
    ok = lm.layer(conv, VPUTilingStrategy.AUTO_MIN, 1, 2)
    assert ok.valid and ok.cycles == min(r.cycles for r in ok.by_strategy)
    warm = lm.layer(conv, VPUTilingStrategy.AUTO_MIN, 1, 2)
    assert warm == ok


class _RejectingDpu:
    """A DPU model that finds every workload invalid: no split of any tile survives."""

    def cost(self, workloads):
        return np.full(len(workloads), ERROR_CODES["ERROR_INVALID_INPUT_CONFIGURATION"], dtype=np.int64)


def test_tile_without_valid_split_and_dma_errors(dpu_models):
    conv = dpu_layer(VPUDevice.VPU_2_7, Operation.CONVOLUTION, (28, 28, 64), (28, 28, 64), kernel=(3, 3),
                     padding=(1, 1, 1, 1))
    res = LayerModel(_RejectingDpu()).layer(conv, VPUTilingStrategy.SOH_Overlapped, 1, 2)
    assert res.error == "ERROR_TILE_OUTPUT"
    from hw_cost.vpunn.reader import FCLayer, VpunnNetwork

    broken = VpunnNetwork("const", 1, 1, (FCLayer("fc", np.zeros((1, 12), np.float32), np.array([5.0], np.float32),
                                                  "NOOP"),), "const")
    lm = LayerModel(dpu_models["VPU_2_7"], DmaModel(broken))
    assert lm.layer(conv, VPUTilingStrategy.NONE, 1, 2).valid  # prefetching: no DMA term
    assert lm.layer(conv, VPUTilingStrategy.NONE, 1, 2, prefetching=False).error == "ERROR_INVALID_OUTPUT_RANGE"
