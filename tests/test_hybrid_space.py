"""The hybrid NPU space (search_spaces/hybrid.py): its block types, widths and head, shared weights, costs on every
NPU generation. The contract every family keeps is in test_space_contract.py."""
import numpy as np
import pytest
import torch

from conftest import CONFIGS, EVOLVE_TWO_GENERATIONS, NO_BASELINES, SCORE_ON_128
from hw_cost import extract_layers, load_cost_model
from nas.config import load_config
from search_spaces import ArchError, build_space
from search_spaces.hybrid import BLOCK_TYPES, HybridBlock, HybridSpaceConfig, HybridStageConfig

INPUT = (1, 28, 28)


def _space(config: HybridSpaceConfig | None = None):
    return build_space(config or HybridSpaceConfig(), input_shape=INPUT, num_outputs=10)


def _macs(space, arch) -> int:
    return sum(layer.macs for layer in extract_layers(space.build_supernet().extract(arch), (1, *INPUT)))


def _with(arch: dict, stage: int, **per_block) -> dict:
    arch = {key: [list(v) for v in value] if isinstance(value, list) and value and isinstance(value[0], list)
            else value for key, value in arch.items()}
    for key, value in per_block.items():
        arch[key][stage] = [value] * arch["depth"][stage]
    return arch


def test_each_block_type_has_its_layers():
    """convnext: dw, 1x1, 1x1; ib: 1x1, dw, 1x1; extradw: dw, 1x1, dw, 1x1; fused: k x k dense, 1x1."""
    layouts = {}
    for kind in BLOCK_TYPES:
        block = HybridBlock(kind, 32, 48, mid_channels=96, kernel_size=5, stride=2, act_layer=torch.nn.ReLU)
        convs = [m for m in block.modules() if isinstance(m, torch.nn.Conv2d)]
        layouts[kind] = [("dw" if c.groups > 1 else "dense") + f"{c.kernel_size[0]}s{c.stride[0]}" for c in convs]
    assert layouts == {"convnext": ["dw5s2", "dense1s1", "dense1s1"], "ib": ["dense1s1", "dw5s2", "dense1s1"],
                       "extradw": ["dw5s1", "dense1s1", "dw5s2", "dense1s1"], "fused": ["dense5s2", "dense1s1"]}


def test_widths_are_multiples_of_16_and_span_two_orders_of_magnitude():
    """Every conv of every arch has a multiple of 16 channels (the DPU's execution modes), the largest arch of
    the default config costs over 50x the MACs of its smallest (about 1 M, as small as the MobileNet space's)."""
    space = _space()
    rng = np.random.default_rng(0)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(6)]:
        net = space.build_supernet().extract(arch)
        convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)][1:]  # the stem sees the image
        assert all(c.in_channels % 16 == 0 and c.out_channels % 16 == 0 for c in convs)
    smallest, largest = _macs(space, space.smallest()), _macs(space, space.largest())
    assert 0.5e6 < smallest < 2.5e6 and largest > 50 * smallest


def test_block_types_share_one_expansion_and_projection_and_widths_share_them():
    """MobileNetV4's UIB: at a block position every type runs the one expansion and projection; the depthwise conv
    on the input is ConvNext-like's and ExtraDW's, the inner one IB's and ExtraDW's; a fused block runs the whole
    k x k expansion whose centre tap the other types use as their 1x1 expansion. Narrower archs run the leading
    channels of the same weights."""
    space = _space()
    supernet = space.build_supernet().eval()
    arch = space.largest()
    stage = 1  # its types: convnext, ib, extradw, fused
    variants = {kind: _with(arch, stage, block=kind, kernel=3) for kind in BLOCK_TYPES}
    x = torch.randn(2, *INPUT)

    def outputs():
        out = {}
        for kind, variant in variants.items():
            supernet.set_active(variant)
            out[kind] = supernet(x)
        return out

    position = supernet.stages[stage][0]
    touched = {"start": {"convnext", "extradw"}, "mid": {"ib", "extradw"}, "project": set(BLOCK_TYPES),
               "expand": set(BLOCK_TYPES)}
    for piece, users in touched.items():
        before = outputs()
        with torch.no_grad():
            getattr(position, piece).conv.weight.mul_(-1.5)
        after = outputs()
        changed = {kind for kind in BLOCK_TYPES if not torch.equal(after[kind], before[kind])}
        assert changed == users, piece
    # the expansion's ring around its centre tap is the fused block's alone
    before = outputs()
    with torch.no_grad():
        weight = position.expand.conv.weight
        centre = weight[..., 2:3, 2:3].clone()
        weight.add_(0.5)
        weight[..., 2:3, 2:3] = centre
    after = outputs()
    assert {kind for kind in BLOCK_TYPES if not torch.equal(after[kind], before[kind])} == {"fused"}
    ib = variants["ib"]
    narrow = dict(ib, width=[space.config.stages[s].widths[0] for s in range(len(ib["width"]))])
    wide_block = supernet.extract(ib).blocks[0]
    narrow_block = supernet.extract(narrow).blocks[0]
    out = narrow_block.project[0].weight.shape[0]
    torch.testing.assert_close(narrow_block.project[0].weight, wide_block.project[0].weight[:out, :])


def test_every_block_type_runs_as_its_extracted_block():
    """The supernet's output for an arch of each block type (strides placed by the type) is the extracted
    network's, in training mode (batch statistics) and in eval mode."""
    space = _space()
    supernet = space.build_supernet()
    rng = np.random.default_rng(3)
    x = torch.randn(4, *INPUT)
    for kind in BLOCK_TYPES:
        arch = _with(space.sample(rng), 1, block=kind)
        supernet.set_active(arch)
        for training in (True, False):
            supernet.train(training)
            net = supernet.extract(arch).train(training)
            supernet.set_active(arch)
            torch.manual_seed(0)  # the same dropout mask
            expected = net(x)
            torch.manual_seed(0)
            torch.testing.assert_close(supernet(x), expected, rtol=1e-4, atol=1e-5)


def test_every_block_type_is_costed_on_the_four_npu_generations():
    """VPUNN prices each block type on VPU 2.0, 2.7, 4.0 and NPU 5.0; at equal widths a fused block (a dense
    k x k expansion) does more MACs than an IB, which does more than a ConvNext-like block."""
    space = _space()
    arch = space.largest()
    macs = {}
    for device in ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0"):
        cost = load_cost_model(f"vpunn:{device}")
        for kind in BLOCK_TYPES:
            variant = _with(arch, 1, block=kind)
            block = space.blocks(variant)[1 + arch["depth"][0]]  # stage 1's first block
            assert block.key.startswith(f"hybrid|{kind}|")
            latency = float(cost.block_latencies_ms([block])[0])
            assert 0 < latency < 10, (device, kind, latency)
            macs[kind] = sum(layer.macs for layer in block.layers())
    assert macs["convnext"] < macs["ib"] < macs["extradw"] < macs["fused"]


def test_every_block_type_is_measured_into_a_latency_table():
    """`vpunas lut collect` measures each block type through OpenVINO on this machine's CPU."""
    from hw_cost.lut import collect_latency_table
    from hw_cost.profiler import MeasureSettings

    space = _space()
    arch = space.largest()
    blocks = [space.blocks(_with(arch, 1, block=kind))[1 + arch["depth"][0]] for kind in BLOCK_TYPES]
    table = collect_latency_table(blocks, (1, *INPUT), MeasureSettings(threads=1, warmup=2, repeats=5),
                                  progress=False)
    assert sorted(table.entries) == sorted(b.key for b in blocks)
    assert all(entry["raw_median_ms"] > 0 for entry in table.entries.values())


def test_the_default_config_covers_its_blocks_on_vpunn():
    config = load_config(CONFIGS / "fmnist_npu.yaml")
    space = build_space(config.space, input_shape=INPUT, num_outputs=10)
    cost = load_cost_model(config.cost.model)
    latencies = [cost.latency_ms(space.blocks(arch)) for arch in (space.smallest(), space.largest())]
    assert 0 < latencies[0] < latencies[1]


@pytest.mark.parametrize("change, message", [
    (dict(activation="hardswish"), "space.activation: 'hardswish' is not one of"),
    (dict(stem_widths=[24]), "space.stem_widths: positive multiples of 16"),
    (dict(stages=[HybridStageConfig([40], 1, [1])]), r"space.stages\[0\].widths: positive multiples of 16"),
    (dict(stages=[HybridStageConfig([32], 1, [1], ["mbconv"])]), r"space.stages\[0\].block_types: expected"),
    (dict(kernel_sizes=[4]), "space.kernel_sizes: odd sizes only"),
])
def test_space_config_errors_name_the_field(change, message):
    with pytest.raises(ArchError, match=message):
        _space(HybridSpaceConfig(**change))


def test_invalid_archs_name_the_field():
    space = _space()
    arch = space.largest()
    with pytest.raises(ArchError, match=r"s1.b0.block: 'mbconv'"):
        space.validate(_with(arch, 1, block="mbconv"))
    with pytest.raises(ArchError, match="s0.width: 40"):
        space.validate(dict(arch, width=[40] + arch["width"][1:]))
    with pytest.raises(ArchError, match="missing \\['head'\\]"):
        space.validate({k: v for k, v in arch.items() if k != "head"})


def test_smoke_search_end_to_end(tmp_path):
    """The hybrid smoke config through `vpunas search` (supernet training, evolution, finalisation, report with
    the archs drawn), then its best finalised arch exported to ONNX and to OpenVINO IR in INT8."""
    import json

    from nas.cli import main
    from nas.rundir import RunDir, read_csv

    run = RunDir(tmp_path / "run")
    assert main(["search", str(CONFIGS / "fmnist_npu_smoke.yaml"), "--out", str(run.path), "--no-progress",
                 *SCORE_ON_128, *EVOLVE_TWO_GENERATIONS, *NO_BASELINES]) == 0
    rows = read_csv(run.candidates)
    archs = [json.loads(r["arch"]) for r in rows]
    assert set(archs[0]) == {"stem", "depth", "width", "block", "kernel", "expand", "head"}
    assert {kind for arch in archs for stage in arch["block"] for kind in stage} == set(BLOCK_TYPES)
    assert all(r["cost_model"] == "vpunn:VPU_2_7" for r in rows)
    final = [r for r in rows if r["final_top1"] != ""]
    assert len(final) == 2
    page = run.report_html.read_text()
    assert "fused k" in page and "<svg class=\"arch\"" in page  # the archs drawn, block types named
    best = max(final, key=lambda r: float(r["final_top1"]))
    for fmt, precision, target in (("onnx", "fp32", tmp_path / "best.onnx"),
                                   ("openvino", "int8", tmp_path / "best.xml")):
        assert main(["export", str(run.path), "--arch", best["id"], "--format", fmt, "--precision", precision,
                     "-o", str(target)]) == 0
        info = json.loads(target.with_suffix(".json").read_text())
        assert info["precision"] == precision and info["input_shape"] == [1, 1, 28, 28]
    assert info["float_test_top1"] == float(best["final_test_top1"]) and info["int8_test_top1"] > 0
