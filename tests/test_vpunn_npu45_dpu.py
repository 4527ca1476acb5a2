"""DPU workloads on VPU 4.0 / NPU 5.0 against Intel's reference vectors (tests/data/vpunn-vectors/npu45): sanitizer,
CMX check, descriptors 4011 / 5114, theoretical cycles, NN cycles (docs/vpunn.md §2-5).

Everything but the NN is compared exactly; NN cycles and raw values within max(1 cycle, 1e-5 relative), since a plain
float32 matrix product does not reproduce the library's dot-product order (docs/vpunn.md §10).
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from hw_cost.vpunn import (DataType, DPUWorkload, DpuModel, ExecutionMode, ISIStrategy, Layout, Operation, Swizzling,
                           VPUDevice, error_name, workload_from_row)
from hw_cost.vpunn.descriptors import encode
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import FCLayer, VpunnNetwork, read_vpunn
from hw_cost.vpunn.sanitizer import check, cmx_required, sanitize
from hw_cost.vpunn.theoretical import theoretical_cycles
from hw_cost.vpunn.workload import F, UNSET, workloads_to_matrix
from conftest import assert_descriptors_bit_exact, nn_tolerance, vector_rows

MODEL = {"VPU_4_0": "vpu_4_0.vpunn", "NPU_5_0": "vpu_5_1.vpunn"}
VERSION = {"VPU_4_0": 4011, "NPU_5_0": 5114}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return vector_rows("npu45/npu45_dpu.csv")


@pytest.fixture(scope="module")
def models() -> dict[str, DpuModel]:
    return {dev: DpuModel(read_vpunn(SHIPPED_MODEL_DIR / name)) for dev, name in MODEL.items()}


# -- sanitizer, CMX and theoretical cycles --------------------------------------------------------------------

_SAN_ENUMS = {"san_operation": (F.operation, Operation), "san_in_layout": (F.in_layout, Layout),
              "san_out_layout": (F.out_layout, Layout), "san_in_dtype": (F.in_dtype, DataType),
              "san_out_dtype": (F.out_dtype, DataType), "san_in_swizzling0": (F.in_swizzling0, Swizzling),
              "san_in_swizzling1": (F.in_swizzling1, Swizzling), "san_out_swizzling0": (F.out_swizzling0, Swizzling)}


def test_sanitizer_matches_official(rows, matrix):
    s = sanitize(matrix)
    codes = check(s)
    assert [error_name(c) for c in codes] == [r["error"] for r in rows]
    assert [str(int(c == 0)) for c in codes] == [r["sanitized_ok"] for r in rows]
    for r, srow in zip(rows, s):
        got = {k: enum(int(srow[col])).name for k, (col, enum) in _SAN_ENUMS.items()}
        got.update(san_in_c=str(int(srow[F.in_c])), san_out_c=str(int(srow[F.out_c])))
        assert got == {k: r[k] for k in got}, r["id"]


def test_every_error_kind_and_device_is_present(rows):
    seen = {(r["device"], r["error"]) for r in rows}
    assert {("VPU_4_0", ""), ("NPU_5_0", ""), ("VPU_4_0", "ERROR_INPUT_TOO_BIG"),
            ("VPU_4_0", "ERROR_INVALID_INPUT_CONFIGURATION"), ("NPU_5_0", "ERROR_INVALID_INPUT_CONFIGURATION")} <= seen


def test_cmx_required_matches_the_reported_bytes(rows, matrix):
    reported = [(i, int(m.group(1))) for i, r in enumerate(rows) if (m := re.search(r"required=(\d+)", r["info"]))]
    assert reported
    idx, ref = zip(*reported)
    assert list(cmx_required(sanitize(matrix[list(idx)]))) == list(ref)


def test_theoretical_cycles_exact(rows, matrix):
    got = theoretical_cycles(sanitize(matrix))
    ref = np.array([int(r["theoretical_cycles"]) for r in rows], dtype=np.uint64)
    bad = [(r["id"], int(g), int(x)) for r, g, x in zip(rows, got, ref) if int(g) != int(x)]
    assert not bad, bad[:5]
    assert int(ref.max()) == 9_007_199_254_740_864  # the unsigned wrap-around row is covered


# -- descriptors ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, size", [(4011, 93), (5114, 53)])
def test_descriptors_bit_exact(rows, matrix, version, size):
    assert_descriptors_bit_exact(rows, matrix, vector_rows(f"npu45/npu45_dpu_descriptors_{version}.csv"), version, size)


# -- cycles ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", sorted(MODEL))
def test_cycles_match_official(rows, matrix, models, device):
    sel = [i for i, r in enumerate(rows) if r["device"] == device]
    model = models[device]
    assert (model.version, model.network.output_version) == (VERSION[device], 5)
    got = model.cost(matrix[sel])
    assert [error_name(c) for c in got] == [rows[i]["error"] for i in sel]
    ref = np.array([int(rows[i]["cycles"]) for i in sel])
    diff = np.abs(got - ref)
    assert (diff <= nn_tolerance(ref)).all(), [(rows[sel[i]]["id"], got[i], ref[i]) for i in np.nonzero(diff > 1)[0]]
    assert (diff == 0).mean() > 0.99
    valid = [i for i in sel if rows[i]["sanitized_ok"] == "1"]
    raw = model.nn_values(model.descriptors(matrix[valid]))
    raw_ref = np.array([float(rows[i]["raw_nn_output"]) for i in valid])
    np.testing.assert_allclose(raw, raw_ref, rtol=1e-5, atol=1e-3)


def test_dual_sparsity_rows_take_the_cheaper_clone(rows, matrix, models):
    for device, model in models.items():
        sel = [i for i, r in enumerate(rows) if r["device"] == device and r["dual_sparsity"] == "1"]
        assert sel
        s = sanitize(matrix[sel])
        clone_a, clone_b = s.copy(), s.copy()
        clone_a[:, [F.act_sparsity, F.in_sparsity_enabled]] = 0
        clone_b[:, [F.weight_sparsity, F.weight_sparsity_enabled]] = 0
        np.testing.assert_array_equal(model.cost(matrix[sel]), np.minimum(model.cost(clone_a), model.cost(clone_b)))


# -- focused rules --------------------------------------------------------------------------------------------

def _wl(device=VPUDevice.NPU_5_0, operation=Operation.CONVOLUTION, **kw) -> DPUWorkload:
    base = dict(device=device, operation=operation, in_w=16, in_h=16, in_c=32, out_w=16, out_h=16, out_c=32,
                k_w=3, k_h=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    if operation in (Operation.ELTWISE, Operation.ELTWISE_MUL):
        base.update(k_w=1, k_h=1, pad_top=0, pad_bottom=0, pad_left=0, pad_right=0,
                    execution_mode=ExecutionMode.CUBOID_8x16)
    base.update(kw)
    return DPUWorkload(**base)


def _desc(version, *workloads) -> np.ndarray:
    return encode(sanitize(workloads_to_matrix(workloads)), version)


def test_optional_fields_parse_and_default(rows):
    row = next(r for r in rows if r["weight_type"] == "INT4")
    assert workload_from_row(row).weight_type == DataType.INT4
    legacy = {k: v for k, v in rows[0].items() if k not in ("weight_type", "superdense", "in_place_output",
                                                            "weightless", "input_autopad", "output_autopad")}
    w = workload_from_row(legacy)  # a 2.x row without the optional columns
    assert (w.weight_type, w.in_place_output, w.weightless, w.superdense) == (None, None, None, False)
    m = workloads_to_matrix([w, replace(w, in_place_output=False, weight_type=DataType.UINT4)])
    assert list(m[:, F.in_place_output]) == [UNSET, 0] and list(m[:, F.weight_type]) == [UNSET, DataType.UINT4]


def test_5114_in_place_and_weightless_defaults_and_flags():
    same = _wl(operation=Operation.ELTWISE)
    layout_change = replace(same, out_layout=Layout.XYZ)
    size_change = replace(same, out_dtype=DataType.FLOAT16)
    forced = replace(same, in_place_output=False, weightless=True)
    conv = _wl(in_place_output=True, weightless=True)  # flags only count for ELTWISE / ELTWISE_MUL
    mul = _wl(operation=Operation.ELTWISE_MUL)
    d = _desc(5114, same, layout_change, size_change, forced, conv, mul)
    assert d[:, 50:52].tolist() == [[1, 0], [0, 1], [0, 1], [0, 1], [0, 0], [1, 0]]
    # the CMX check drops the output of an in-place ELTWISE and the second operand of a weightless one
    req = cmx_required(sanitize(workloads_to_matrix([same, forced, replace(same, weightless=False,
                                                                           in_place_output=False)])))
    tensor = 16 * 16 * 32
    assert req.tolist() == [2 * tensor, 2 * tensor, 3 * tensor]


def test_5114_autopad_and_weight_type():
    padded = _wl(in_c=3, input_autopad=True, weight_type=DataType.INT4, s_w=2, s_h=2, out_w=8, out_h=8)
    s = sanitize(workloads_to_matrix([padded, replace(padded, input_autopad=False)]))
    assert s[:, F.operation].tolist() == [Operation.CONVOLUTION, Operation.CM_CONVOLUTION]
    assert check(s).tolist() == [0, 0]
    d = encode(s, 5114)
    assert d[0, 9] == 16 and d[1, 9] == 3  # autopadded input channels are written as 16
    assert d[0, 16 + 4] == 1 and d[0, 11] == 1  # INT4 weights -> UINT4 slot; UINT8 input
    fp16 = replace(padded, in_dtype=DataType.FLOAT16, out_dtype=DataType.FLOAT16, in_c=12, weight_type=None)
    assert error_name(check(sanitize(workloads_to_matrix([fp16])))[0]) == "ERROR_INVALID_INPUT_CONFIGURATION"


def test_4011_isi_and_owt_filter():
    soh = _wl(VPUDevice.VPU_4_0, isi_strategy=ISIStrategy.SPLIT_OVER_H)
    clu_owt3 = _wl(VPUDevice.VPU_4_0, output_write_tiles=3)
    sok_owt8 = _wl(VPUDevice.VPU_4_0, isi_strategy=ISIStrategy.SPLIT_OVER_K, output_write_tiles=8)
    elt_sok = _wl(VPUDevice.VPU_4_0, Operation.ELTWISE, isi_strategy=ISIStrategy.SPLIT_OVER_K, output_write_tiles=4)
    d = _desc(4011, soh, clu_owt3, sok_owt8, elt_sok)
    assert d[:, 89].tolist() == [1, 3, 6, 4]  # owt clamped to 6; ELTWISE keeps its SOK and owt
    assert d[:, 90:93].tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 1], [0, 0, 1]]
    assert d[:, 3].tolist() == [1, 1, 1, 1]  # device slot VPU_4_0
    assert check(sanitize(workloads_to_matrix([soh, clu_owt3, sok_owt8, elt_sok]))).tolist() == [0, 0, 0, 0]


def test_npu50_swizzle_guard_and_4011_normalisation():
    mixed = dict(in_swizzling0=Swizzling.KEY_0, in_swizzling1=Swizzling.KEY_5, out_swizzling0=Swizzling.KEY_0)
    s = sanitize(workloads_to_matrix([_wl(**mixed), _wl(VPUDevice.VPU_4_0, Operation.ELTWISE, **mixed)]))
    swz = [F.in_swizzling0, F.in_swizzling1, F.out_swizzling0]
    assert s[0, swz].tolist() == [0, 0, 0] and s[1, swz].tolist() == [0, 5, 0]
    d = encode(s[1:], 4011)
    assert d[0, 71 + 5] == d[0, 77 + 5] == 1 and d[0, 83] == 1  # inputs (5, 5), output normalised alone: KEY_0


def test_avepool_native_on_50_and_dw_on_40():
    pool = dict(operation=Operation.AVEPOOL, in_c=64, out_c=64)
    s = sanitize(workloads_to_matrix([_wl(**pool), _wl(VPUDevice.VPU_4_0, **pool)]))
    assert s[:, F.operation].tolist() == [Operation.AVEPOOL, Operation.DW_CONVOLUTION]
    assert check(s).tolist() == [0, 0]
    assert encode(s[:1], 5114)[0, :7].tolist() == [0, 1, 0, 0, 0, 0, 0]  # encoded as DW_CONVOLUTION
    mode_4x16 = _wl(**pool, execution_mode=ExecutionMode.CUBOID_4x16)
    assert error_name(check(sanitize(workloads_to_matrix([mode_4x16])))[0]) == "ERROR_INVALID_INPUT_CONFIGURATION"


@pytest.mark.parametrize("change", [dict(in_b=2, out_b=2), dict(isi_strategy=ISIStrategy.SPLIT_OVER_H),
                                    dict(isi_strategy=ISIStrategy.SPLIT_OVER_K), dict(in_c=128, out_c=128,
                                                                                     operation=Operation.MAXPOOL)])
def test_npu50_rejects(change):
    assert error_name(check(sanitize(workloads_to_matrix([_wl(**change)])))[0]) == "ERROR_INVALID_INPUT_CONFIGURATION"


def test_vpu40_weight_memory_follows_the_input_layout():
    """4.0 sizes the weight masks in input0's layout: an X-innermost input makes each mask one element."""
    big = dict(in_c=512, out_c=512, in_w=4, in_h=4, out_w=4, out_h=4)
    zxy, xyz = _wl(VPUDevice.VPU_4_0, **big), _wl(VPUDevice.VPU_4_0, in_layout=Layout.XYZ, **big)
    page = 16 * 1024
    masks = -(-(512 * 9 * 512 + 16 * 512) // page) * page
    req = cmx_required(sanitize(workloads_to_matrix([zxy, xyz])))
    assert req.tolist() == [2 * page + masks, 3 * page]  # input0 and output0: one page each


class _ConstantNet(VpunnNetwork):
    def __init__(self, value: float, version: int, output_version: int, size: int):
        weight = np.zeros((1, size), np.float32)
        super().__init__("const", version, output_version,
                         (FCLayer("fc", weight, np.array([value], np.float32), "NOOP"),), "const")


@pytest.mark.parametrize("version, size, device", [(4011, 93, VPUDevice.VPU_4_0), (5114, 53, VPUDevice.NPU_5_0)])
def test_out_of_range_output_falls_back_to_theoretical(version, size, device):
    wl = workloads_to_matrix([_wl(device), _wl(device, Operation.DW_CONVOLUTION)])
    for value in (-5.0, 5e9):
        model = DpuModel(_ConstantNet(value, version, 5, size))
        np.testing.assert_array_equal(model.cost(wl), theoretical_cycles(sanitize(wl)))


def test_output_version_4_scales_dw_convolutions():
    model = DpuModel(_ConstantNet(100.0, 4011, 4, 93))
    dw = _wl(VPUDevice.VPU_4_0, Operation.DW_CONVOLUTION, in_c=16, out_c=16)
    cases = [dw, replace(dw, k_w=1, k_h=1, pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, in_c=32, out_c=32),
             replace(dw, in_dtype=DataType.FLOAT16, in_c=64, out_c=64, s_w=2, s_h=2, out_w=8, out_h=8), _wl(
                 VPUDevice.VPU_4_0)]
    assert model.cost(cases).tolist() == [50, 80, 73, 100]
