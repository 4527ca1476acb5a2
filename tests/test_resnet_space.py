import json

import numpy as np
import pytest
import torch

from conftest import sampled_archs
from search_spaces import ArchError, build_space
from search_spaces.common import StageConfig
from search_spaces.resnet import ResNetSpaceConfig

RATIOS = {"bottleneck": [0.25, 0.5, 0.75], "basic": [0.5, 0.75, 1.0]}


def small_space(block="bottleneck", input_shape=(1, 28, 28), **overrides):
    cfg = dict(block=block, stem_widths=[16], stem_stride=2, stem_pool=False,
               stages=[StageConfig(32, 1, [1, 2]), StageConfig(64, 2, [2, 3])], width_mults=[0.5, 0.75, 1.0],
               expand_ratios=RATIOS.get(block, [0.5]), channel_divisor=4)
    return build_space(ResNetSpaceConfig(**(cfg | overrides)), input_shape=input_shape, num_outputs=10)


def test_arch_is_plain_json_and_round_trips_through_genes():
    space = small_space()
    for arch in sampled_archs(space):
        assert all(len(e) == d for e, d in zip(arch["expand"], arch["depth"]))
    assert space.largest() == {"depth": [2, 3], "width": [1.0, 1.0], "expand": [[0.75, 0.75], [0.75] * 3]}
    assert space.smallest() == {"depth": [1, 2], "width": [0.5, 0.5], "expand": [[0.25], [0.25, 0.25]]}
    assert space.validate({"depth": [1, 2], "width": [1, 0.5], "expand": [[0.25], [0.25, 0.25]]})["width"] == [1.0, 0.5]


@pytest.mark.parametrize("arch, field", [
    ({"depth": [1, 2], "width": [1.0, 1.0]}, "missing"),
    ({"depth": [1, 2], "width": [1.0, 1.0], "expand": [[0.25], [0.25, 0.25]], "kernel": []}, "unknown"),
    ({"depth": [3, 2], "width": [1.0, 1.0], "expand": [[0.25] * 3, [0.25] * 2]}, r"arch.depth\[0\]"),
    ({"depth": [1, 2], "width": [1.0, 0.6], "expand": [[0.25], [0.25, 0.25]]}, "s1.width"),
    ({"depth": [1, 2], "width": [1.0, 1.0], "expand": [[0.3], [0.25, 0.25]]}, "s0.b0.expand"),
    ({"depth": [1, 2], "width": [1.0, 1.0], "expand": [[0.25], [0.25]]}, r"arch.expand\[1\]"),
    ({"depth": [1], "width": [1.0], "expand": [[0.25]]}, "2 stages"),
])
def test_invalid_archs_name_the_field(arch, field):
    with pytest.raises(ArchError, match=field):
        small_space().validate(arch)


@pytest.mark.parametrize("overrides, field", [
    ({"block": "bottle"}, "space.block"),
    ({"width_mults": [0.5, 0.55, 1.0]}, r"space.stages\[0\].width"),  # 16, 16, 32: two choices, one network
    ({"expand_ratios": [0.2, 0.25, 0.5]}, "space.expand_ratios"),
    ({"expand_ratios": [0.0, 0.5]}, "space.expand_ratios"),
    ({"stem_widths": []}, "space.stem_widths"),
    ({"stages": [StageConfig(32, 1, [0, 1])]}, r"space.stages\[0\].depths"),
])
def test_space_config_errors_name_the_field(overrides, field):
    with pytest.raises(ArchError, match=field):
        small_space(**overrides)


def test_widths_follow_the_multiplier_and_the_ratio():
    space = small_space()
    assert space.stage_widths(0) == [16, 24, 32] and space.stage_widths(1) == [32, 48, 64]
    assert [space.mid_width(64, r) for r in space.ratios] == [16, 32, 48]
    # first blocks project (stride or width change); later blocks keep the identity
    assert [space.has_projection(s, b) for s, b in ((0, 0), (0, 1), (1, 0), (1, 2))] == [True, False, True, False]
    # a stride-1 first block whose input and output widths are fixed and equal keeps the identity
    fixed = small_space(width_mults=[1.0], expand_ratios=[0.25], stem_widths=[32])
    assert not fixed.has_projection(0, 0) and fixed.has_projection(1, 0)


def _train_bn_stats(supernet, archs, input_shape):
    supernet.train()
    for arch in archs:  # give every subnet's batch-norm slices their own non-trivial statistics
        supernet.set_active(arch)
        supernet(torch.randn(16, *input_shape))


def test_extraction_with_pooled_stem_and_odd_maps():
    """An ImageNet-style stem (stride 2 + max pool) on an odd input: 45 -> 23 -> 12 -> 6 -> 3."""
    torch.manual_seed(0)
    space = small_space("basic", input_shape=(3, 45, 45), stem_widths=[8, 16], stem_pool=True,
                        stages=[StageConfig(32, 2, [1, 2]), StageConfig(64, 2, [1, 2])])
    assert space.stage_input_sizes() == [(12, 12), (6, 6), (3, 3)]
    supernet = space.build_supernet()
    archs = [space.largest(), space.smallest()]
    _train_bn_stats(supernet, archs, (3, 45, 45))
    supernet.eval()
    x = torch.randn(2, 3, 45, 45)
    for arch in archs:
        supernet.set_active(arch)
        torch.testing.assert_close(supernet.extract(arch).eval()(x), supernet(x), rtol=1e-5, atol=1e-5)


def test_blocks_of_the_space_and_of_an_arch():
    """One block per stem, searched block and head; every choice of a block has a block of its own
    (tests/test_space_contract.py: what they hold)."""
    space = small_space()
    all_keys = {b.key for b in space.all_blocks()}
    rng = np.random.default_rng(3)
    seen = set()
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(12)]:
        blocks = space.blocks(arch)
        seen |= {b.key for b in blocks}
        assert len(blocks) == 1 + sum(arch["depth"]) + 1
    # 1 stem; stage 0: 3 widths x 3 ratios (first block from the stem) + 9 later blocks; stage 1: 3 input
    # widths x 9 first blocks + 9 later blocks; 3 heads
    assert len(all_keys) == 1 + 9 + 9 + 27 + 9 + 3
    assert len(seen) > len(all_keys) // 2


def test_block_keys_name_the_input_width():
    space = small_space()
    a = {"depth": [1, 2], "width": [0.5, 1.0], "expand": [[0.25], [0.25, 0.25]]}
    b = dict(a, width=[1.0, 1.0])
    key_a, key_b = space.blocks(a)[2].key, space.blocks(b)[2].key  # stage 1's first block
    assert key_a != key_b and "in16x" in key_a and "in32x" in key_b


def test_vpunn_cost_of_extracted_subnets():
    """The VPUNN cost model prices every block, and the extracted networks themselves, the same way."""
    from hw_cost import load_cost_model

    space = small_space()
    cost = load_cost_model("vpunn:VPU_2_7")
    supernet = space.build_supernet()
    latencies = {}
    for name in ("largest", "smallest"):
        arch = getattr(space, name)()
        latencies[name] = cost.latency_ms(space.blocks(arch))
        whole = cost.network_cost(supernet.extract(arch), (1, 1, 28, 28)).ms
        assert whole == pytest.approx(latencies[name], rel=1e-6)
    assert latencies["largest"] > 1.5 * latencies["smallest"] > 0


def test_smoke_search_end_to_end(tmp_path):
    """The ResNet smoke config through `vpunas search`: a front, VPUNN latencies, both baselines."""
    from conftest import CONFIGS, assert_candidates_unchanged
    from nas.cli import main
    from nas.rundir import RunDir, read_csv

    out = tmp_path / "resnet_smoke"
    assert main(["search", str(CONFIGS / "fmnist_resnet_smoke.yaml"), "--out", str(out), "--no-progress"]) == 0
    run = RunDir(out)
    assert_candidates_unchanged(run, "fmnist_resnet_smoke")  # the CPU path bit-identical
    rows = read_csv(run.candidates)
    assert len({r["arch"] for r in rows}) == len(rows) >= 16
    assert all(r["cost_model"] == "vpunn:VPU_2_7" for r in rows)
    front = [r for r in rows if r["is_pareto"] == "True"]
    assert len(front) >= 2 and all(r["test_top1"] != "" for r in front)
    assert all(r["final_int8_test_top1"] == "" for r in rows)  # INT8 scoring is off in this config
    assert {"depth", "width", "expand"} == set(json.loads(rows[0]["arch"]))
    baselines = {b["name"]: b for b in read_csv(run.baselines)}
    assert set(baselines) == {"largest", "smallest"}
    assert float(baselines["largest"]["latency_ms"]) > 2 * float(baselines["smallest"]["latency_ms"]) > 0
    assert int(baselines["largest"]["macs"]) > 5 * int(baselines["smallest"]["macs"])
