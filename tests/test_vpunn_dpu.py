"""DPU workloads against the official vectors: sanitizer, descriptors v10/v11, theoretical cycles, NN cycles."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hw_cost.vpunn import (DataType, DPUWorkload, DpuModel, ExecutionMode, ISIStrategy, Layout, Operation, Swizzling,
                           VPUDevice, VpunnError, error_name, workload_from_row)
from hw_cost.vpunn.descriptors import encode, first_unencodable
from hw_cost.vpunn.dpu import UnencodableWorkload
from hw_cost.vpunn.errors import ERROR_CODES, is_error
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import FCLayer, VpunnNetwork, read_vpunn
from hw_cost.vpunn.sanitizer import broken_rules, check, sanitize
from hw_cost.vpunn.theoretical import theoretical_cycles
from hw_cost.vpunn.workload import F, workloads_to_matrix
from conftest import assert_descriptors_bit_exact, nn_tolerance, vector_rows

MODELS = SHIPPED_MODEL_DIR
STEM = {"VPU_2_0": "vpu_2_0", "VPU_2_7": "vpu_2_7"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return vector_rows("vpunn_dpu.csv")


@pytest.fixture(scope="module")
def models() -> dict[str, DpuModel]:
    return {f"{stem}{sfx}": DpuModel(read_vpunn(MODELS / f"{stem}{sfx}.vpunn")) for stem in STEM.values()
            for sfx in ("", ".fast")}


# -- sanitizer and theoretical cycles -------------------------------------------------------------------------

def test_sanitizer_matches_official(rows, matrix):
    s = sanitize(matrix)
    codes = check(s)
    for r, srow, code in zip(rows, s, codes):
        assert (code == 0) == (r["sanitized_ok"] == "1"), r["id"]
        if r["sanitized_ok"] == "0":
            assert error_name(code) == r["error"], r["id"]
            continue
        assert Operation(int(srow[F.operation])).name == r["san_operation"], r["id"]
        assert (int(srow[F.in_c]), int(srow[F.out_c])) == (int(r["san_in_c"]), int(r["san_out_c"]))
        assert Layout(int(srow[F.in_layout])).name == r["san_in_layout"]
        swz = [Swizzling(int(srow[c])).name for c in (F.in_swizzling0, F.in_swizzling1, F.out_swizzling0)]
        assert swz == [r["san_in_swizzling0"], r["san_in_swizzling1"], r["san_out_swizzling0"]]


def test_every_error_kind_is_present_and_named(rows):
    errors = {r["error"] for r in rows if r["error"]}
    assert {"ERROR_INVALID_INPUT_CONFIGURATION", "ERROR_INPUT_TOO_BIG"} <= errors


def test_theoretical_cycles_exact(rows, matrix):
    got = theoretical_cycles(sanitize(matrix))
    ref = np.array([int(r["theoretical_cycles"]) for r in rows])
    bad = [(r["id"], int(g), int(x)) for r, g, x in zip(rows, got, ref) if g != x]
    assert not bad, bad[:5]


# -- descriptors ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, size", [(10, 67), (11, 93)])
def test_descriptors_bit_exact(rows, matrix, version, size):
    assert_descriptors_bit_exact(rows, matrix, vector_rows(f"vpunn_dpu_descriptors_v{version}.csv"), version, size)


def _conv(device=VPUDevice.VPU_2_7, **kw) -> DPUWorkload:
    base = dict(device=device, operation=Operation.CONVOLUTION, in_w=16, in_h=16, in_c=32, out_w=16, out_h=16,
                out_c=32, k_w=3, k_h=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    if device == VPUDevice.VPU_2_0:
        base.update(in_layout=Layout.ZMAJOR, out_layout=Layout.ZMAJOR, execution_mode=ExecutionMode.MATRIX)
    base.update(kw)
    return DPUWorkload(**base)


def test_broken_rules_name_the_rule_an_invalid_workload_breaks():
    """Each workload below breaks one validity rule; `check` refuses it and `broken_rules` says which."""
    cases = {"": _conv(), "kernel size": _conv(k_w=16, k_h=16), "padding": _conv(pad_top=2),
             "stride": _conv(s_w=9), "output width": _conv(out_w=15), "output height": _conv(out_h=12),
             "output channels": _conv(out_c=40), "input channels": _conv(in_c=24), "batch": _conv(out_b=2),
             "sparsity": _conv(act_sparsity=1.5), "CMX size": _conv(in_w=256, in_h=256, out_w=256, out_h=256,
                                                                    in_c=512, out_c=512),
             "ISI strategy": _conv(isi_strategy=ISIStrategy.SPLIT_OVER_K)}
    matrix = sanitize(workloads_to_matrix(list(cases.values())))
    assert broken_rules(matrix) == list(cases)
    assert [bool(code) for code in check(matrix)] == [bool(rule) for rule in cases]


def test_v11_adapter_rules():
    elt = _conv(operation=Operation.ELTWISE, k_w=1, k_h=1, pad_top=0, pad_bottom=0, pad_left=0, pad_right=0,
                in_w=7, in_h=5, in_c=48, out_w=7, out_h=5, out_c=48, output_write_tiles=2,
                isi_strategy=ISIStrategy.SPLIT_OVER_K, in_swizzling0=Swizzling.KEY_0,
                in_swizzling1=Swizzling.KEY_0, out_swizzling0=Swizzling.KEY_0)
    pool = _conv(operation=Operation.MAXPOOL, in_c=16, out_c=16)
    d = encode(sanitize(workloads_to_matrix([elt, pool])), 11)
    assert list(d[0, 26:30]) == [5, 48, 7, 1]  # ELTWISE weights: a permuted copy of the input (H, C, W, B)
    assert d[0, 89] == 1 and list(d[0, 90:93]) == [1, 0, 0]  # SOK on ELTWISE becomes clustering, owt 1
    assert d[0, 71] == d[0, 77] == d[0, 83] == 1  # all KEY_0 stays KEY_0 for ELTWISE
    assert list(d[1, 26:30]) == [0, 0, 0, 0] and d[1, 26 + 8 + 6] == 1  # MAXPOOL: no weights, INVALID layout
    assert d[1, 76] == 1 and d[1, 77] == 1 and d[1, 88] == 1  # swizzling KEY_5, weights KEY_0, output KEY_5


def test_unencodable_values_raise_with_the_interface_name():
    w20 = sanitize(workloads_to_matrix([_conv(VPUDevice.VPU_2_0)]))
    assert first_unencodable(w20, 10) is None
    row, reason = first_unencodable(w20, 11)
    assert row == 0 and "cannot be encoded by descriptor interface 11" in reason
    with pytest.raises(VpunnError, match="interface 11"):
        encode(w20, 11)
    with pytest.raises(VpunnError, match="interface 12 is not implemented"):
        encode(w20, 12)


# -- cycles ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["VPU_2_0", "VPU_2_7"])
@pytest.mark.parametrize("fast", [False, True])
def test_cycles_match_official(rows, matrix, models, device, fast):
    sel = [i for i, r in enumerate(rows) if r["device"] == device]
    model = models[STEM[device] + (".fast" if fast else "")]
    got = model.cost(matrix[sel])
    cyc_col, err_col = ("cycles_fast", "error_fast") if fast else ("cycles", "error")
    ref = np.array([int(rows[i][cyc_col]) for i in sel])
    assert [error_name(c) for c in got] == [rows[i][err_col] for i in sel]
    diff = np.abs(got - ref)
    # A >64-channel DW/MAXPOOL cost is extrapolated from two ceil'ed NN values, so a +-1 from float32 summation
    # order in one of them is multiplied by up to C_out/32 (seen once, fast 2.0 model, 2 cycles).
    extrapolated = np.array([rows[i]["linear_extrapolated"] == "1" for i in sel])
    c_out = matrix[sel, F.out_c]
    tol = np.where(extrapolated, 1 + np.ceil(c_out / 32), nn_tolerance(ref))
    assert (diff <= tol).all(), [(rows[sel[i]]["id"], got[i], ref[i]) for i in np.nonzero(diff > tol)[0][:5]]
    assert (diff[~extrapolated] <= nn_tolerance(ref[~extrapolated])).all()
    assert (diff == 0).mean() > 0.9


def test_special_paths_are_exercised(rows, matrix, models):
    """Dual sparsity, extrapolation and the negative-output fallback, checked on their own rows."""
    for flag in ("dual_sparsity", "linear_extrapolated"):
        sel = [i for i, r in enumerate(rows) if r[flag] == "1"]
        assert sel, flag
    edge = [i for i, r in enumerate(rows) if r["split_kind"] == "EDGE:negative_nn_output"]
    got = models["vpu_2_0"].cost(matrix[edge])
    assert [float(rows[i]["raw_nn_output"]) < 0 for i in edge] == [True] * len(edge)
    assert list(got) == [int(rows[i]["theoretical_cycles"]) for i in edge]


class _ConstantNet(VpunnNetwork):
    """A stand-in network answering a fixed value (to reach the output-range checks)."""

    def __init__(self, value: float, version: int, output_version: int = 2, size: int = 93):
        weight = np.zeros((1, size), np.float32)
        super().__init__("const", version, output_version, (FCLayer("fc", weight, np.array([value], np.float32),
                                                                    "NOOP"),), "const")


@pytest.mark.parametrize("value", [-5.0, 5e9])
def test_out_of_range_output_falls_back_to_theoretical(value):
    model = DpuModel(_ConstantNet(value, 11))
    wl = workloads_to_matrix([_conv(), _conv(operation=Operation.DW_CONVOLUTION, in_c=32, out_c=32)])
    np.testing.assert_array_equal(model.cost(wl), theoretical_cycles(sanitize(wl)))


def test_error_codes_for_invalid_workloads():
    model = DpuModel(_ConstantNet(100.0, 11))
    cases = {
        "ERROR_INVALID_INPUT_DEVICE": _conv(device=VPUDevice.NPU_RESERVED),
        "ERROR_INVALID_INPUT_CONFIGURATION": _conv(out_c=24),
        "ERROR_INPUT_TOO_BIG": _conv(in_w=512, in_h=512, in_c=64, out_w=512, out_h=512, out_c=64),
    }
    got = model.cost(list(cases.values()))
    assert [error_name(c) for c in got] == list(cases)
    unknown_op = workloads_to_matrix([_conv()])
    unknown_op[0, F.operation] = 9
    assert error_name(model.cost(unknown_op)[0]) == "ERROR_INVALID_INPUT_OPERATION"
    assert all(c == ERROR_CODES[n] for c, n in zip(got, cases))
    assert is_error(got).all()
    assert model.cost([_conv()])[0] == 100


def test_dual_sparsity_takes_the_cheaper_clone():
    model = DpuModel(read_vpunn(MODELS / "vpu_2_7.vpunn"))
    sparse = _conv(in_c=64, in_sparsity_enabled=True, act_sparsity=0.5, weight_sparsity_enabled=True,
                   weight_sparsity=0.4)
    clone_a = replace(sparse, in_sparsity_enabled=False, act_sparsity=0.0)
    clone_b = replace(sparse, weight_sparsity_enabled=False, weight_sparsity=0.0)
    both, a, b = model.cost([sparse, clone_a, clone_b])
    assert both == min(a, b)


def test_unencodable_workload_is_an_error_not_a_crash():
    model = DpuModel(read_vpunn(MODELS / "vpu_2_7.vpunn"))
    with pytest.raises(UnencodableWorkload) as info:
        model.cost([_conv(), _conv(VPUDevice.VPU_2_0)])
    assert info.value.index == 1


def test_batching_cache_and_single_calls_agree(rows, matrix):
    model = DpuModel(read_vpunn(MODELS / "vpu_2_7.vpunn"))
    sel = [i for i, r in enumerate(rows) if r["device"] == "VPU_2_7"][:60]
    batched = model.cost(matrix[sel])
    assert model.cache_len > 0
    again = model.cost(matrix[sel])
    np.testing.assert_array_equal(batched, again)
    fresh = DpuModel(read_vpunn(MODELS / "vpu_2_7.vpunn"), cache_size=0)
    singles = np.array([fresh.cost(matrix[[i]])[0] for i in sel])
    assert fresh.cache_len == 0
    assert (np.abs(singles - batched) <= nn_tolerance(batched)).all()
    assert model.cost_one(workload_from_row(rows[sel[0]])) == (int(batched[0]), error_name(batched[0]))


def test_csv_row_errors_name_the_column():
    row = {"device": "VPU_2_7", "operation": "CONV"}
    with pytest.raises(VpunnError, match="row 7: column 'operation': bad value 'CONV'.*CONVOLUTION"):
        workload_from_row(row, "row 7: ")
    with pytest.raises(VpunnError, match="missing column 'in_w'"):
        workload_from_row({"device": "VPU_2_7", "operation": "CONVOLUTION"})
    good = {name: "1" for name in ("in_w", "in_h", "in_c", "in_b", "out_w", "out_h", "out_c", "out_b", "k_w", "k_h",
                                  "s_w", "s_h", "pad_top", "pad_bottom", "pad_left", "pad_right",
                                  "output_write_tiles")}
    good.update(device="VPU_2_7", operation="CONVOLUTION", in_dtype="UINT8", out_dtype="UINT8", in_layout="ZXY",
                out_layout="ZXY", execution_mode="CUBOID_16x16", activation="NONE", act_sparsity="0",
                weight_sparsity="0", in_sparsity_enabled="0", weight_sparsity_enabled="false", in_swizzling0="KEY_5",
                in_swizzling1="KEY_5", out_swizzling0="KEY_5", isi_strategy="CLUSTERING")
    assert workload_from_row(good).in_dtype == DataType.UINT8
    with pytest.raises(VpunnError, match="column 'k_w': bad value '1.5'"):
        workload_from_row({**good, "k_w": "1.5"})
    with pytest.raises(VpunnError, match="column 'in_sparsity_enabled'"):
        workload_from_row({**good, "in_sparsity_enabled": "maybe"})
