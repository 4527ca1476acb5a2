"""DMA on VPU 4.0 / NPU 5.0: dma_4_0.vpunn (interface 02, output 1), dmann_5_0.vpunn (03, output 2) and the theoretical
DMA against Intel's reference vectors (tests/data/vpunn-vectors/npu45, docs/vpunn.md §6, §7).

Everything is compared exactly: with a plain float32 matrix product the raw NN values stay within 4e-6 relative of
the library's and no ceil moves on these rows.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hw_cost.vpunn import VPUDevice, VpunnError, error_name
from hw_cost.vpunn.dma import (DMA40_COLUMNS, DMAWorkloadNPU40_50, DmaModel, dma_1d, dma_npu40_50_workload_from_row,
                               theoretical_dma_cycles)
from hw_cost.vpunn.enums import DMADirection, NumDMAEngine
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import FCLayer, VpunnNetwork, read_vpunn
from conftest import vector_rows

MODELS = {"dma_4_0": ("02", VPUDevice.VPU_4_0), "dmann_5_0": ("03", VPUDevice.NPU_5_0)}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return vector_rows("npu45/npu45_dma.csv")


@pytest.fixture(scope="module", params=sorted(MODELS))
def case(request, rows):
    """(model, its rows, their workloads, descriptor file version)."""
    name = request.param
    model = DmaModel(read_vpunn(SHIPPED_MODEL_DIR / f"{name}.vpunn"))
    mine = [r for r in rows if r["model_file"] == f"models/{name}.vpunn"]
    assert mine and {r["device"] for r in mine} == {MODELS[name][1].name}
    return model, mine, [dma_npu40_50_workload_from_row(r, f"row {r['id']}: ") for r in mine], MODELS[name][0]


def test_model_interfaces(case):
    model, mine, _, version = case
    assert (model.input_version, model.output_version) == (int(version), int(version) - 1)
    assert {(r["nn_version_in"], r["nn_version_out"]) for r in mine} == {(str(int(version)), str(int(version) - 1))}
    assert model.workload_type is DMAWorkloadNPU40_50 and model.columns == DMA40_COLUMNS
    assert model.devices == {VPUDevice.VPU_4_0, VPUDevice.NPU_5_0}


def test_descriptors_exact(case):
    model, mine, workloads, version = case
    ref = {r["id"]: np.array([float(r[f"d{i}"]) for i in range(len(r) - 1)], np.float32)
           for r in vector_rows(f"npu45/npu45_dma_descriptors_{version}.csv")}
    got = model.descriptors(workloads)
    assert got.dtype == np.float32 and got.shape == (len(mine), model.network.input_size)
    for r, d in zip(mine, got):
        np.testing.assert_array_equal(d, ref[r["id"]], err_msg=f"row {r['id']}")


def test_accessed_bytes_exact(case):
    _, mine, workloads, _ = case
    assert [w.bytes for w in workloads] == [int(r["accessed_bytes"]) for r in mine]


def test_cycles_and_raw_nn(case):
    model, mine, workloads, _ = case
    got = model.cost(workloads)
    assert got.tolist() == [int(r["cycles"]) for r in mine]
    assert {r["error"] for r in mine} == {""} and not any(error_name(c) for c in got)
    u = model.nn_values(model.descriptors(workloads))
    np.testing.assert_allclose(u, [float(r["raw_nn_output"]) for r in mine], rtol=1e-5, atol=0)


def test_theoretical_dma_exact(rows):
    for device in (VPUDevice.VPU_4_0, VPUDevice.NPU_5_0):
        mine = [r for r in rows if r["device"] == device.name]
        got = theoretical_dma_cycles(device, [int(r["accessed_bytes"]) for r in mine],
                                     [DMADirection[r["direction"]] for r in mine])
        assert got.tolist() == [int(r["theoretical_cycles_1d"]) for r in mine], device.name


def test_theoretical_dma_constants():
    f32 = np.float32
    # VPU_4_0: legacy set (latency 956 ns = 1625 cycles DRAM, 16 CMX cycles = 27), CMX->CMX full duplex
    assert int(theoretical_dma_cycles(VPUDevice.VPU_4_0, 0, DMADirection.DDR2CMX)) == 1625
    assert int(theoretical_dma_cycles(VPUDevice.VPU_4_0, 0, DMADirection.CMX2CMX)) == 27
    n = 10**6
    assert int(theoretical_dma_cycles(VPUDevice.VPU_4_0, n, DMADirection.CMX2CMX)) == \
        27 + int(np.ceil(n * float(f32(1700) / f32(975) / f32(32))))
    dram, cmx = (int(np.ceil(n * float(cost))) for cost in (f32(1700) / f32(45000), f32(1700) / f32(975) / f32(32)))
    assert int(theoretical_dma_cycles(VPUDevice.VPU_4_0, n, DMADirection.DDR2CMX)) == 1625 + max(dram, cmx) == 56113
    assert int(theoretical_dma_cycles(VPUDevice.VPU_4_0, 10, DMADirection.CMX2DDR)) == \
        1625 + int(np.ceil(10 * float(f32(1700) / f32(975) / f32(10))))  # CMX word min(n, 32)
    # NPU_5_0: main set (300 ns = 585 cycles, 32 CMX cycles = 56), 64 B per CMX cycle on both sides
    assert int(theoretical_dma_cycles(VPUDevice.NPU_5_0, 0, DMADirection.CMX2DDR)) == 585
    assert int(theoretical_dma_cycles(VPUDevice.NPU_5_0, n, DMADirection.CMX2CMX)) == \
        56 + int(np.ceil(f32(n) / f32(64) * (f32(1950) / f32(1114))))


def _constant_net(value: float, name: str) -> VpunnNetwork:
    """A network of the given interfaces that outputs `value` for every descriptor."""
    size = {"VPUNN-02-01": 29, "DMANN-03-02": 27}[name]
    layer = FCLayer("fc", np.zeros((1, size), np.float32), np.array([value], np.float32), "NOOP")
    return VpunnNetwork(name, int(name[6:8]), int(name[9:11]), (layer,), name)


_WL = DMAWorkloadNPU40_50(VPUDevice.VPU_4_0, 3200, 3200, DMADirection.DDR2CMX)


@pytest.mark.parametrize("value, valid", [(1.5, False), (-0.2, False), (0.5, True), (1.05, True), (-0.05, True)])
def test_output1_fallback_to_theoretical(value, valid):
    got = int(DmaModel(_constant_net(value, "VPUNN-02-01")).cost([_WL])[0])
    if valid:  # bw = clamp(u * 64, 1/200, 64) bytes per CMX cycle, in DPU cycles at 1700/971 (main set)
        bw = np.clip(np.float32(value) * np.float32(64), np.float32(1 / 200), np.float32(64))
        assert got == int(np.ceil(np.float32(3200) / bw * np.float32(1700) / np.float32(971)))
    else:  # silently the theoretical DMA, no error
        assert got == int(theoretical_dma_cycles(VPUDevice.VPU_4_0, 3200, DMADirection.DDR2CMX)) == 1625 + 175


@pytest.mark.parametrize("value, valid", [(0.0, True), (123.2, True), (1e9, True), (2e9, False), (-1.0, False)])
def test_output2_fallback_to_theoretical(value, valid):
    wl = replace(_WL, device=VPUDevice.NPU_5_0)
    got = int(DmaModel(_constant_net(value, "DMANN-03-02")).cost([wl])[0])
    assert got == (int(np.ceil(np.float32(value))) if valid
                   else int(theoretical_dma_cycles(VPUDevice.NPU_5_0, 3200, DMADirection.DDR2CMX)))


def test_reference_rows_fall_back(rows):
    out_of_range = [r for r in rows if r["device"] == "VPU_4_0" and not -0.1 <= float(r["raw_nn_output"]) <= 1.1]
    assert len(out_of_range) >= 10
    assert all(r["cycles"] == r["theoretical_cycles_1d"] for r in out_of_range)


def test_dma_4_0_zero_output_quirk():
    """dma_4_0 outputs exactly 0 for most 3-D transfers: the minimum bandwidth, 1/200 B per CMX cycle."""
    model = DmaModel(read_vpunn(SHIPPED_MODEL_DIR / "dma_4_0.vpunn"))
    wl = DMAWorkloadNPU40_50(VPUDevice.VPU_4_0, 64, 64, DMADirection.DDR2CMX, num_dim=2,
                             src_stride=(64, 4096, 0, 0, 0), dst_stride=(128, 8192, 0, 0, 0),
                             src_dim_size=(63, 31, 0, 0, 0), dst_dim_size=(63, 31, 0, 0, 0))
    assert wl.bytes == 128 * 1024
    assert float(model.nn_values(model.descriptors([wl]))[0]) == 0.0
    f32 = np.float32
    expected = int(np.ceil(f32(131072) / f32(1 / 200) * f32(1700) / f32(971)))
    assert int(model.cost([wl])[0]) == expected == 45895448


def test_cost_1d_matches_workloads_and_checks_device():
    m40 = DmaModel(read_vpunn(SHIPPED_MODEL_DIR / "dma_4_0.vpunn"))
    m27 = DmaModel(read_vpunn(SHIPPED_MODEL_DIR / "dma_2_7.vpunn"))
    devices = [VPUDevice.VPU_4_0, VPUDevice.NPU_5_0, VPUDevice.VPU_2_7]
    sizes, direction = [4096, 100000, 4096], DMADirection.CMX2DDR
    got = m40.cost_1d(devices, sizes, direction)
    for device, n, c in zip(devices[:2], sizes, got):
        wl = DMAWorkloadNPU40_50(device, n, n, direction, num_engine=NumDMAEngine.Num_Engine_1)
        assert c == m40.cost([wl])[0]
    assert error_name(got[2]) == "ERROR_INVALID_INPUT_DEVICE"
    got27 = m27.cost_1d(devices, sizes, direction)
    assert [error_name(c) for c in got27[:2]] == ["ERROR_INVALID_INPUT_DEVICE"] * 2
    assert got27[2] == m27.cost([dma_1d(VPUDevice.VPU_2_7, 4096, direction)])[0]


def test_one_nn_pass_over_distinct_descriptors(monkeypatch):
    model = DmaModel(read_vpunn(SHIPPED_MODEL_DIR / "dmann_5_0.vpunn"))
    calls = []
    forward = VpunnNetwork.forward
    monkeypatch.setattr(VpunnNetwork, "forward", lambda self, x, *a, **k: calls.append(len(x)) or forward(self, x))
    first = model.cost_1d(VPUDevice.NPU_5_0, [1000, 2000, 1000, 3000], DMADirection.DDR2CMX)
    again = model.cost_1d(VPUDevice.NPU_5_0, [3000, 2000], DMADirection.DDR2CMX)
    assert calls == [3] and again.tolist() == first[[3, 1]].tolist()
    model.clear_cache()
    model.cost_1d(VPUDevice.NPU_5_0, 1000, DMADirection.DDR2CMX)
    assert calls == [3, 1]


def test_row_errors(rows):
    row = next(r for r in rows if r["num_dim"] == "2")
    with pytest.raises(VpunnError, match="row 7: column 'num_engine': bad value 'Num_Engine_3'.*Num_Engine_2"):
        dma_npu40_50_workload_from_row(dict(row, num_engine="Num_Engine_3"), "row 7: ")
    with pytest.raises(VpunnError, match="row 7: num_dim 6 outside 0..5"):
        dma_npu40_50_workload_from_row(dict(row, num_dim="6"), "row 7: ")
    with pytest.raises(VpunnError, match="column 'src_dim_size_1'.*non-negative"):
        dma_npu40_50_workload_from_row(dict(row, src_dim_size_1="-1"))
    with pytest.raises(VpunnError, match="missing column 'dst_stride_5'"):
        dma_npu40_50_workload_from_row({k: v for k, v in row.items() if k != "dst_stride_5"})
    wl = dma_npu40_50_workload_from_row(dict(row, src_stride_1="-64"))
    assert wl.src_stride[0] == -64 and DmaModel(_constant_net(0.5, "VPUNN-02-01")).descriptors([wl])[0, 4] == -64
