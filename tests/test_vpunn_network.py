"""VpunnCostModel: specs and options, the per-layer rules, consistency with the layer vectors, NNI profiler."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch.nn as nn
import torchvision

import hw_cost.vpunn.paths as vpaths
from hw_cost import Block, CostModelError, LayerSpec, extract_layers, load_cost_model
from hw_cost.vpunn import DdrPolicy, Operation, VpunnCostModel, VpunnError, dpu_layer, load_vpunn_cost_model
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from conftest import vector_rows

MODELS = SHIPPED_MODEL_DIR


@pytest.fixture(scope="module")
def vpu27() -> VpunnCostModel:
    return load_cost_model("vpunn:VPU_2_7")


@pytest.fixture(scope="module")
def mobilenet_layers() -> list[LayerSpec]:
    return extract_layers(torchvision.models.mobilenet_v2(), (1, 3, 224, 224))


# -- specs, options, model folder -----------------------------------------------------------------------------

def test_specs_and_defaults():
    m27, m20 = load_cost_model("vpunn:VPU_2_7"), load_cost_model("vpunn:VPU_2_0")
    assert (m27.name, m27.clock_mhz, m27.n_tiles, m27.n_dpu) == ("vpunn:VPU_2_7", 1300, 2, 1)
    assert (m20.name, m20.clock_mhz, m20.n_tiles, m20.n_dpu) == ("vpunn:VPU_2_0", 700, 1, 5)
    fast = load_vpunn_cost_model("VPU_2_7.fast")
    assert fast.name == "vpunn:VPU_2_7.fast" and load_vpunn_cost_model("VPU_2_7", fast=True).name == fast.name
    by_path = load_vpunn_cost_model(str(MODELS / "vpu_2_0.fast.vpunn"))
    assert by_path.device.name == "VPU_2_0"
    assert load_vpunn_cost_model("vpu_2_7", dtype="fp16", strategy="SOHO", n_tiles=1).strategy.name == "SOH_Overlapped"


@pytest.mark.parametrize("spec, options, message", [
    ("VPU_3_0", {}, "unknown VPUNN model 'VPU_3_0'"),
    ("VPU_2_7", {"tiles": 2}, "unknown vpunn cost-model option.*tiles.*valid: model_dir"),
    ("VPU_2_7", {"dtype": "int4"}, "dtype must be 'uint8' or 'fp16'"),
    ("VPU_2_7", {"strategy": "MAGIC"}, "unknown VPUTilingStrategy 'MAGIC'"),
    ("VPU_2_7", {"strategy": "SOW"}, "strategy SOW is not one of VPU_2_7's: AUTO_MIN, NONE, SOH_Overlapped, SOK"),
    ("VPU_4_0", {"fast": True}, "Intel publishes no .fast model for VPU_4_0"),
    ("NPU_5_0.fast", {}, "Intel publishes no .fast model for NPU_5_0"),
    ("VPU_2_7", {"dma": "magic"}, "dma must be 'theoretical' or 'nn'"),
    ("VPU_2_7", {"n_tiles": -1}, "at least 1"),
    ("VPU_2_0", {"n_tiles": 2}, "VPU_2_0 layer model supports at most 1 tile"),
])
def test_bad_specs_and_options(spec, options, message):
    with pytest.raises(CostModelError, match=message):
        load_vpunn_cost_model(spec, **options)


def test_model_folder_lookup(tmp_path, monkeypatch):
    monkeypatch.delenv(vpaths.ENV_VAR, raising=False)
    monkeypatch.setattr(vpaths, "default_model_dir", lambda: None)
    with pytest.raises(VpunnError, match="no VPUNN model directory.*VPUNAS_VPUNN_DIR.*intel/npu-nn-cost-model"):
        load_vpunn_cost_model("VPU_2_7")
    with pytest.raises(VpunnError, match="does not exist.*intel/npu-nn-cost-model"):
        load_vpunn_cost_model("VPU_2_7", model_dir=tmp_path / "nowhere")
    with pytest.raises(VpunnError, match="vpu_2_7.vpunn not found.*intel/npu-nn-cost-model"):
        load_vpunn_cost_model("VPU_2_7", model_dir=tmp_path)
    monkeypatch.setenv(vpaths.ENV_VAR, str(MODELS))
    assert load_vpunn_cost_model("VPU_2_7").name == "vpunn:VPU_2_7"
    monkeypatch.setenv(vpaths.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(VpunnError, match="VPUNAS_VPUNN_DIR=.*not a directory"):
        load_vpunn_cost_model("VPU_2_7")


# -- consistency with the official layer model ----------------------------------------------------------------

def _assert_layers_match(model, layers, ref: list[dict], tolerance: int) -> None:
    """Each reference layer row (by shape) costs as the network model's DPU layer of that shape."""
    assert ref
    by_shape = {}
    for c in model.layer_costs(layers):
        if c.rule == "dpu":
            by_shape.setdefault(c.detail.split(" x")[0], c.cycles)
    for r in ref:
        key = (f"{r['operation']} {r['in_w']}x{r['in_h']}x{r['in_c']} -> "
               f"{r['out_w']}x{r['out_h']}x{r['out_c']}")
        assert key in by_shape, key
        assert abs(by_shape[key] - int(r["cycles"])) <= tolerance, (r["layer_name"], by_shape[key], r["cycles"])


def test_mobilenet_layers_match_official_layer_costs(vpu27, mobilenet_layers):
    """Each MobileNetV2@224 layer in the vectors (AUTO_MIN, VPU 2.7, uint8) costs exactly as the official Layer()."""
    ref = [r for r in vector_rows("vpunn_layer.csv") if r["network"] == "mobilenet_v2" and r["device"] == "VPU_2_7"
           and r["strategy"] == "AUTO_MIN" and r["in_dtype"] == "UINT8"]
    _assert_layers_match(vpu27, mobilenet_layers, ref, tolerance=1)


@pytest.mark.parametrize("device", ["VPU_4_0", "NPU_5_0"])
def test_npu45_mobilenet_layers_match_official_layer_costs(device, mobilenet_layers):
    """MobileNetV2@224 on VPU 4.0 / NPU 5.0 with the reference vectors' 4 tiles: every DPU layer of the vectors
    (AUTO_MIN over the seven strategies, uint8) costs as the official Layer(), within 1 cycle per workload."""
    ref = [r for r in vector_rows("npu45/npu45_layer.csv") if r["network"] == "mobilenet_v2" and r["device"] == device
           and r["strategy"] == "AUTO_MIN" and r["in_dtype"] == "UINT8"]
    _assert_layers_match(load_vpunn_cost_model(device, n_tiles=4), mobilenet_layers, ref, tolerance=2)


def test_npu45_specs_and_defaults(mobilenet_layers):
    m40, m50 = load_cost_model("vpunn:VPU_4_0"), load_cost_model("vpunn:NPU_5_0")
    assert (m40.name, m40.clock_mhz, m40.n_tiles, m40.n_dpu) == ("vpunn:VPU_4_0", 1700, 6, 1)
    assert (m50.name, m50.clock_mhz, m50.n_tiles, m50.n_dpu) == ("vpunn:NPU_5_0", 1950, 3, 1)
    assert load_vpunn_cost_model(str(MODELS / "vpu_5_1.vpunn")).device.name == "NPU_5_0"
    assert load_vpunn_cost_model("VPU_4_0", strategy="SOW").strategy.name == "SOW"
    nets = {m.name: m.network_cost(mobilenet_layers) for m in (m40, m50, load_cost_model("vpunn:VPU_2_7"))}
    assert all(all(c.cycles > 0 for c in net.layers) for net in nets.values())
    # the newer generations run MobileNetV2 faster than the NPU 3720
    assert nets["vpunn:VPU_2_7"].ms > max(nets["vpunn:VPU_4_0"].ms, nets["vpunn:NPU_5_0"].ms)
    dma = load_vpunn_cost_model("NPU_5_0", dma="nn", activations_in_ddr=True).network_cost(mobilenet_layers)
    assert dma.ms > nets["vpunn:NPU_5_0"].ms  # DDR transfers through dmann_5_0 add time


def test_theoretical_fallback_never_wraps_around():
    """The runtime's unsigned padding-skip arithmetic wraps on a small padded conv (a reference row costs
    9007199254740864 theoretical cycles); the network model's fallback counts no skipped MACs there."""
    from hw_cost.vpunn import DataType, DPUWorkload, VPUDevice
    from hw_cost.vpunn.sanitizer import sanitize
    from hw_cost.vpunn.theoretical import theoretical_cycles
    from hw_cost.vpunn.workload import workloads_to_matrix

    wl = DPUWorkload(VPUDevice.VPU_4_0, Operation.CONVOLUTION, 2, 2, 512, 1, 1, 256, in_dtype=DataType.UINT8,
                     k_w=3, k_h=3, pad_bottom=1, pad_left=1)
    m = sanitize(workloads_to_matrix([wl]))
    assert theoretical_cycles(m)[0] == 9007199254740864
    unpadded = sanitize(workloads_to_matrix([replace(wl, pad_bottom=0, pad_left=0)]))
    assert theoretical_cycles(m, wrap=False)[0] == theoretical_cycles(unpadded)[0] < 10_000
    model = load_vpunn_cost_model("VPU_4_0")
    model._theoretical(dpu_layer(VPUDevice.VPU_4_0, Operation.CONVOLUTION, (2, 2, 512), (1, 1, 256),
                                 kernel=(3, 3), padding=(0, 1, 1, 0)), None)
    assert 0 < max(c for c, _, _ in model._dpu_cache.values()) < 1000


def test_mobilenet_network_cost(vpu27, mobilenet_layers):
    vpu27.clear_cache()
    net = vpu27.network_cost(mobilenet_layers)
    assert len(net.layers) == len(mobilenet_layers)
    assert all(c.cycles > 0 for c in net.layers)
    assert {c.rule for c in net.layers} == {"dpu", "memory-bound"}
    assert net.total_cycles == sum(c.cycles for c in net.layers)
    assert net.ms == pytest.approx(net.total_cycles / 1.3e6)
    assert net.fps == pytest.approx(1e3 / net.ms)
    assert "global_avgpool" in net.table() and f"{net.total_cycles} cycles" in net.table()
    warm = vpu27.network_cost(mobilenet_layers)
    assert [c.cycles for c in warm.layers] == [c.cycles for c in net.layers]
    model = torchvision.models.mobilenet_v2()
    assert vpu27.model_latency_ms(model, (1, 3, 224, 224)) == pytest.approx(net.ms)


def test_vpu20_splits_cmx_overflows(mobilenet_layers):
    m20 = load_cost_model("vpunn:VPU_2_0")
    costs = m20.layer_costs(mobilenet_layers)
    split = [c for c in costs if c.rule.startswith("dpu-split")]
    assert split and all(c.cycles > 0 for c in costs)
    first = costs[0]  # the 224x224 stem overflows 1 MB CMX on VPU 2.0
    assert first.rule.startswith("dpu-split")
    stem = dpu_layer(m20.device, Operation.CONVOLUTION, (224, 224, 16), (112, 112, 32), kernel=(3, 3),
                     stride=(2, 2), padding=(1, 1, 1, 1))
    whole = m20.layer_model.layer(stem, n_dpu=5, n_tiles=1)
    assert not whole.valid and "ERROR_INPUT_TOO_BIG" in {r.error for r in whole.by_strategy}


def test_tensors_too_big_for_cmx_pay_ddr_transfers():
    """A 360x640 super-resolution frame cannot stay in the 2 MB CMX: its split layers read and write DDR and
    its memory-bound ops move through DDR, so it costs more than if every tensor stayed on chip; a 28x28 network
    fits and costs the same either way."""
    def sr_net(c=32):
        return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1),
                             nn.Conv2d(c, 12, 3, padding=1), nn.PixelShuffle(2))

    auto, on_chip = load_vpunn_cost_model("VPU_2_7"), load_vpunn_cost_model("VPU_2_7", activations_in_ddr=False)
    frame = auto.network_cost(extract_layers(sr_net(), (1, 3, 360, 640)))
    assert frame.total_cycles > on_chip.network_cost(extract_layers(sr_net(), (1, 3, 360, 640))).total_cycles
    rules = [c.rule for c in frame.layers]
    assert any(r.startswith("dpu-split") and r.endswith("+ddr") for r in rules) and "memory-bound+ddr" in rules
    small = extract_layers(sr_net(), (1, 3, 28, 28))
    assert auto.network_cost(small).total_cycles == on_chip.network_cost(small).total_cycles
    assert load_vpunn_cost_model("VPU_2_7", activations_in_ddr="never").activations_in_ddr is DdrPolicy.NEVER
    assert load_vpunn_cost_model("VPU_2_7", activations_in_ddr=True).activations_in_ddr is DdrPolicy.ALWAYS
    with pytest.raises(VpunnError, match="activations_in_ddr must be one of auto, always, never"):
        load_vpunn_cost_model("VPU_2_7", activations_in_ddr="sometimes")


# -- the rules for other layers -------------------------------------------------------------------------------

class _Odd(nn.Module):
    """Every kind of layer the DPU does not run, plus grouped and non-PPE activations."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 64, 3, padding=1)
        self.grouped = nn.Conv2d(64, 64, 3, padding=1, groups=4)
        self.hswish = nn.Hardswish()
        self.shuffle = nn.PixelShuffle(2)
        self.up = nn.Upsample(scale_factor=2)
        self.big = nn.Conv2d(16, 16, 17, padding=8)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = self.hswish(self.grouped(self.conv(x)))
        y = y * torch_sigmoid(y)
        y = self.up(self.shuffle(y))
        y = self.big(y)
        return self.pool(y)


def torch_sigmoid(x):
    import torch

    return torch.sigmoid(x)


def test_every_layer_gets_a_documented_rule(vpu27):
    layers = extract_layers(_Odd(), (1, 8, 16, 16))
    costs = {c.spec.name: c for c in vpu27.layer_costs(layers)}
    assert all(c.cycles > 0 for c in costs.values())
    assert costs["conv"].rule == "dpu"  # 8 input channels on 2.7: CM_CONVOLUTION
    assert costs["grouped"].rule == "dpu+act"  # hardswish is not a PPE activation
    assert costs["shuffle"].rule == costs["up"].rule == costs["pool"].rule == "memory-bound"
    assert costs["big"].rule == "dpu-theoretical"  # a 17x17 kernel is beyond the DPU's 15
    assert [c for c in costs.values() if c.spec.op == "mul"][0].rule == "memory-bound"
    assert costs["up"].cycles > costs["shuffle"].cycles  # 4x the bytes written


def test_grouped_conv_takes_the_cheaper_lowering(vpu27):
    dense, grouped = (extract_layers(nn.Conv2d(64, 64, 3, padding=1, groups=g), (1, 64, 28, 28)) for g in (1, 4))
    c_dense = vpu27.layer_costs(dense)[0].cycles
    c_grouped = vpu27.layer_costs(grouped)[0].cycles
    assert c_grouped <= c_dense
    per_group = extract_layers(nn.Conv2d(16, 16, 3, padding=1), (1, 16, 28, 28))
    assert c_grouped <= 4 * vpu27.layer_costs(per_group)[0].cycles


def test_batch_and_dtype(vpu27):
    block = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU())
    one = vpu27.network_cost(block, (1, 32, 28, 28))
    two = vpu27.network_cost(block, (2, 32, 28, 28))
    assert two.total_cycles == 2 * one.total_cycles and two.fps == pytest.approx(one.fps)
    fp16 = load_cost_model("vpunn:VPU_2_7", dtype="fp16").network_cost(block, (1, 32, 28, 28))
    assert fp16.total_cycles > one.total_cycles


def test_block_latencies_are_batched_and_cached():
    model = load_cost_model("vpunn:VPU_2_7")
    builds = {"a": 0, "b": 0}

    def builder(key, c):
        def build():
            builds[key] += 1
            return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 1))
        return build

    blocks = [Block("a", (1, 32, 28, 28), builder("a", 32)), Block("b", (1, 64, 14, 14), builder("b", 64)),
              Block("a", (1, 32, 28, 28), builder("a", 32))]
    ms = model.block_latencies_ms(blocks)
    assert ms.shape == (3,) and ms[0] == ms[2] and (ms > 0).all()
    assert builds == {"a": 1, "b": 1}
    again = model.block_latencies_ms(blocks[:2])
    np.testing.assert_array_equal(again, ms[:2])
    assert builds == {"a": 1, "b": 1}
    layers = blocks[1].layers()
    assert ms[1] == pytest.approx(sum(c.ms for c in model.layer_costs(layers)))
    assert model.latency_ms(blocks) == pytest.approx(ms.sum())


# -- NNI ------------------------------------------------------------------------------------------------------

def test_nni_profiler(vpu27):
    import nni
    from nni.nas.nn.pytorch import LayerChoice, ModelSpace, MutableConv2d

    from hw_cost.nni_profiler import CostModelProfiler

    class Space(ModelSpace):
        def __init__(self):
            super().__init__()
            width = nni.choice("width", [16, 32, 64])
            self.stem = MutableConv2d(3, width, 3, stride=2, padding=1)
            self.body = LayerChoice([MutableConv2d(width, width, 3, padding=1),
                                     MutableConv2d(width, width, 5, padding=2)], label="op")
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.body(self.stem(x)))

    profiler = CostModelProfiler(Space(), vpu27, (1, 3, 64, 64))
    small = profiler.profile({"width": 16, "op": 0})
    big = profiler.profile({"width": 64, "op": 1})
    assert 0 < small < big
    assert profiler.profile({"width": 16, "op": 0}) == small
    with pytest.raises(CostModelError, match="does not freeze the model space"):
        profiler.profile({"width": 16})
