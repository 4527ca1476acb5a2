"""DMA: the DMA NN (dma_2_7.vpunn) and the legacy theoretical DMA model against the official vectors."""
from __future__ import annotations


import numpy as np
import pytest

from hw_cost.vpunn import (DMADirection, DMAWorkload, DmaModel, VPUDevice, VpunnError, dma_workload_from_row,
                           error_name, theoretical_dma_cycles)
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import FCLayer, VpunnNetwork, read_vpunn
from conftest import vector_rows

MODELS = SHIPPED_MODEL_DIR


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return vector_rows("vpunn_dma.csv")


def test_dma_nn_cycles_exact(rows):
    model = DmaModel(read_vpunn(MODELS / "dma_2_7.vpunn"))
    workloads = [dma_workload_from_row(r) for r in rows]
    got = model.cost(workloads)
    ref = np.array([int(r["cycles"]) for r in rows])
    assert [error_name(c) for c in got] == [r["error"] for r in rows]
    assert (np.abs(got - ref) <= np.maximum(1, 1e-5 * ref)).all()
    assert (got == ref).mean() > 0.99
    u = model.nn_values(model.descriptors(workloads))
    np.testing.assert_allclose(u, [float(r["raw_nn_output"]) for r in rows], rtol=1e-5, atol=1e-7)
    assert {r["direction"] for r in rows} == {d.name for d in DMADirection}


def test_theoretical_dma_exact(rows):
    for r in rows:
        w = dma_workload_from_row(r)
        assert int(theoretical_dma_cycles(w.device, w.bytes, w.direction)) == int(r["theoretical_cycles_1d"]), r["id"]


def test_theoretical_dma_properties():
    # latency only for an empty transfer on 2.7 (DRAM 956 ns = 1242 cycles), none on 2.0
    assert int(theoretical_dma_cycles(VPUDevice.VPU_2_7, 0, DMADirection.DDR2CMX)) == 1242
    assert int(theoretical_dma_cycles(VPUDevice.VPU_2_0, 0, DMADirection.DDR2CMX)) == 0
    sizes = np.array([1, 1000, 10**6])
    cyc = theoretical_dma_cycles(VPUDevice.VPU_2_7, sizes, DMADirection.CMX2CMX)
    assert (np.diff(cyc) > 0).all()


class _ConstantNet(VpunnNetwork):
    def __init__(self, value: float):
        layer = FCLayer("fc", np.zeros((1, 12), np.float32), np.array([value], np.float32), "NOOP")
        super().__init__("const", 1, 1, (layer,), "const")


@pytest.mark.parametrize("value, error", [(1.5, "ERROR_INVALID_OUTPUT_RANGE"), (-0.2, "ERROR_INVALID_OUTPUT_RANGE"),
                                          (0.5, ""), (1.05, "")])
def test_dma_output_range(value, error):
    model = DmaModel(_ConstantNet(value))
    w = DMAWorkload(VPUDevice.VPU_2_7, 0, 3200, 3200, 3200, 0, 0, 0, 0, DMADirection.DDR2CMX)
    cycles = int(model.cost([w])[0])
    assert error_name(cycles) == error
    if not error:  # bw = clamp(u * 32, 1/200, 32) bytes per CMX cycle, in DPU cycles
        bw = min(value * 32, 32)
        assert cycles == int(np.ceil(np.float32(3200) / np.float32(bw) * np.float32(1300) / np.float32(975)))


def test_dma_row_errors_name_row_and_column(rows):
    bad = dict(rows[0], direction="SIDEWAYS")
    with pytest.raises(VpunnError, match="row 9: column 'direction': bad value 'SIDEWAYS'.*DDR2CMX"):
        dma_workload_from_row(bad, "row 9: ")
    with pytest.raises(VpunnError, match="missing column 'length'"):
        dma_workload_from_row({k: v for k, v in rows[0].items() if k != "length"})
