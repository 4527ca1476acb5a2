import numpy as np
import pytest
import torch

from conftest import sampled_archs
from hw_cost import extract_layers
from search_spaces import ArchError, build_space
from search_spaces.edsr import EdsrSpaceConfig, PlainLayer, build_edsr

INPUT = (3, 12, 16)


def small_space(**overrides):
    cfg = dict(depths=[1, 2, 3], channels=[8, 16], kernel_sizes=[3, 5], res_scales=[0.1, 1.0],
               global_skips=["none", "bicubic"], upsamplers=["subpixel", "edsr"], block_types=["plain", "res"]) | overrides
    return build_space(EdsrSpaceConfig(**cfg), input_shape=INPUT, num_outputs=3)


def test_arch_is_plain_json_and_round_trips_through_genes():
    space = small_space()
    for arch in sampled_archs(space):
        assert len(arch["kernel"]) == arch["blocks"]
    assert space.largest() == {"blocks": 3, "channels": 16, "kernel": [5, 5, 5], "res_scale": 1.0,
                               "global_skip": "bicubic", "upsampler": "edsr", "block": "res"}
    # a plain body has no residual scaling: its archs carry the largest value, whatever the gene says
    assert space.smallest() == {"blocks": 1, "channels": 8, "kernel": [3], "res_scale": 1.0, "global_skip": "none",
                                "upsampler": "subpixel", "block": "plain"}
    assert space.validate(space.smallest() | {"res_scale": 0.1}) == space.smallest()


GOOD = {"blocks": 2, "channels": 8, "kernel": [3, 3], "res_scale": 1.0, "global_skip": "none", "upsampler": "edsr",
        "block": "res"}


def test_an_arch_from_before_the_upsampler_and_body_choices_has_edsrs():
    old = {k: v for k, v in GOOD.items() if k not in ("upsampler", "block")}
    assert small_space().validate(old) == GOOD


@pytest.mark.parametrize("change, field", [
    ({"res_scale": None}, "missing"), ({"depth": 2}, "unknown"), ({"blocks": 4, "kernel": [3] * 4}, "arch.blocks"),
    ({"channels": 12}, "channels"), ({"kernel": [3]}, "arch.kernel"), ({"kernel": [3, 7]}, "b1.kernel"),
    ({"res_scale": 0.5}, "res_scale"), ({"global_skip": "nearest"}, "global_skip"), ({"upsampler": "deconv"}, "upsampler"),
    ({"block": "dense"}, "block"),
])
def test_invalid_archs_name_the_field(change, field):
    arch = {k: v for k, v in (GOOD | change).items() if v is not None}
    assert small_space().validate(GOOD) == GOOD
    with pytest.raises(ArchError, match=field):
        small_space().validate(arch)


@pytest.mark.parametrize("overrides, field", [
    ({"scale": 5}, "space.scale"), ({"kernel_sizes": [2, 3]}, "kernel_sizes"), ({"depths": [0, 2]}, "depths"),
    ({"channels": []}, "channels"), ({"res_scales": [0.0]}, "res_scales"), ({"global_skips": ["x"]}, "global_skips"),
    ({"upsamplers": ["deconv"]}, "upsamplers"), ({"block_types": ["dense"]}, "block_types"),
])
def test_space_config_errors_name_the_field(overrides, field):
    with pytest.raises(ArchError, match=field):
        small_space(**overrides)


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_every_arch_upscales_by_the_scale(scale):
    """(tests/test_space_contract.py: the subnet computes what the supernet computes, at scales 2 and 4.)"""
    space = small_space(scale=scale)
    supernet = space.build_supernet().eval()
    rng = np.random.default_rng(scale)
    x = torch.randn(2, *INPUT)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(4)]:
        assert supernet.extract(arch).eval()(x).shape == (2, 3, INPUT[1] * scale, INPUT[2] * scale)


def test_global_skip_adds_the_bicubic_upscaled_input():
    torch.manual_seed(0)
    space = small_space()
    supernet = space.build_supernet().eval()
    x = torch.randn(1, *INPUT)
    plain = supernet.extract(GOOD)(x)
    skipped = supernet.extract(GOOD | {"global_skip": "bicubic"})(x)
    bicubic = torch.nn.functional.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
    torch.testing.assert_close(skipped, plain + bicubic)


def test_residual_scaling_changes_the_function_and_is_folded_into_weights():
    torch.manual_seed(0)
    space = small_space()
    supernet = space.build_supernet().eval()
    x = torch.randn(1, *INPUT)
    a = {"blocks": 2, "channels": 16, "kernel": [3, 5], "res_scale": 1.0, "global_skip": "none"}
    b = dict(a, res_scale=0.1)
    out_a, out_b = supernet.extract(a)(x), supernet.extract(b)(x)
    assert not torch.allclose(out_a, out_b)
    sub_a, sub_b = supernet.extract(a), supernet.extract(b)
    torch.testing.assert_close(sub_b.blocks[1].conv2.weight, 0.1 * sub_a.blocks[1].conv2.weight)
    assert sub_a.blocks[1].conv2.weight.shape == (16, 16, 5, 5)  # centre crop of the shared 5x5 weight


@pytest.mark.parametrize("scale", [2, 4])
def test_blocks_cover_the_subnet_and_all_blocks_cover_every_arch(scale):
    space = small_space(scale=scale)
    supernet = space.build_supernet()
    all_keys = {b.key for b in space.all_blocks()}
    rng = np.random.default_rng(3)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(5)]:
        blocks = space.blocks(arch)
        assert {b.key for b in blocks} <= all_keys
        # head, residual blocks and the body end or plain layers, upsampler and tail or the sub-pixel conv
        # (, global skip)
        output = 2 if arch["upsampler"] == "edsr" else 1
        body = arch["blocks"] + (arch["block"] == "res")
        assert len(blocks) == 1 + body + output + (arch["global_skip"] == "bicubic")
        hr = f"{INPUT[1] * scale}x{INPUT[2] * scale}"
        assert all(f"{INPUT[1]}x{INPUT[2]}" in b.key or b.key.startswith("tail") and hr in b.key for b in blocks)
        whole = [l.signature() for l in extract_layers(supernet.extract(arch), (1, *INPUT))]
        by_block = [layer.signature() for b in blocks for layer in b.layers()]
        if arch["block"] == "plain":  # the same fused ReLUs, one conv earlier (module docstring: _plain_layer_cost)
            assert sum("|relu|" in s for s in whole) == sum("|relu|" in s for s in by_block) == arch["blocks"]
            whole, by_block = ([s.replace("|relu|", "|none|") for s in sigs] for sigs in (whole, by_block))
        assert whole == by_block
    blocks = space.blocks(space.largest())
    assert [l.op for l in blocks[-3].layers()] == ["conv", "pixel_shuffle"] * (2 if scale == 4 else 1)
    assert [l.op for l in blocks[-1].layers()] == ["upsample", "add"]


def test_reference_network_may_lie_outside_the_ranges():
    space = small_space()
    arch = {"blocks": 5, "channels": 24, "kernel": [3] * 5, "res_scale": 1.0, "global_skip": "bicubic"}
    with pytest.raises(ArchError):
        space.validate(arch)
    net, blocks = space.reference_network(arch)
    assert net(torch.randn(1, *INPUT)).shape == (1, 3, 24, 32)
    whole = extract_layers(net, (1, *INPUT))
    assert [l.signature() for l in whole] == [l.signature() for b in blocks for l in b.layers()]
    baseline = build_edsr(scale=2, blocks=16, channels=64)
    # head 1792 + 16 blocks x 2 x 36928 + body end 36928 + upsampler 147712 + tail 1731 (EDSR-baseline x2: 1.37M)
    assert sum(p.numel() for p in baseline.parameters()) == 1_369_859
    with pytest.raises(ArchError, match="kernel"):
        space.reference_network(dict(arch, kernel=[3] * 4))
    with pytest.raises(ArchError, match="keys"):
        space.reference_network({"blocks": 2})


def test_fresh_network_starts_as_a_network_of_its_own_size():
    space = small_space()
    arch = {"blocks": 2, "channels": 8, "kernel": [3, 3], "res_scale": 1.0, "global_skip": "bicubic",
            "upsampler": "subpixel"}
    torch.manual_seed(0)
    fresh, sliced = space.fresh_network(arch), space.build_supernet().extract(arch)
    # the same modules and shapes (a finalised arch's weights load into the extracted subnet) ...
    assert {k: v.shape for k, v in fresh.state_dict().items()} == {k: v.shape for k, v in sliced.state_dict().items()}
    # ... but PyTorch's default bound 1/sqrt(fan in) for its own 8 x 3 x 3 inputs, not the supernet's 16 x 5 x 5
    w, w_sliced = fresh.blocks[0].conv1.weight, sliced.blocks[0].conv1.weight
    bound = 1 / (8 * 3 * 3) ** 0.5
    assert 0.8 * bound < w.abs().max() <= bound and w_sliced.abs().max() <= 1 / (16 * 5 * 5) ** 0.5 < 0.5 * bound
    assert fresh(torch.randn(1, *INPUT)).shape == (1, 3, 24, 32)
    with pytest.raises(ArchError, match="channels"):
        space.fresh_network(dict(arch, channels=24))


def test_a_plain_body_is_a_chain_of_relu_convs_that_costs_less_than_residual_blocks():
    from hw_cost import load_cost_model

    space = build_space(EdsrSpaceConfig(depths=[3], channels=[32], kernel_sizes=[3], global_skips=["bicubic"],
                                        upsamplers=["subpixel"], block_types=["plain", "res"]),
                        input_shape=(3, 360, 640), num_outputs=3)
    plain = {"blocks": 3, "channels": 32, "kernel": [3] * 3, "res_scale": 1.0, "global_skip": "bicubic",
             "upsampler": "subpixel", "block": "plain"}
    net = space.build_supernet().extract(plain)
    assert all(isinstance(layer, PlainLayer) for layer in net.blocks) and net.body_end is None
    x = torch.randn(1, 3, 12, 16)
    h = net.head(x)
    for layer in net.blocks:
        h = layer.conv(torch.relu(h))
    expected = torch.nn.functional.pixel_shuffle(net.upsampler[0](h), 2) + net.skip(x)
    torch.testing.assert_close(net(x), expected)
    # deployed: head, three convs with their ReLUs fused, the sub-pixel conv; only the skip adds
    layers = [layer for b in space.blocks(plain) for layer in b.layers()]
    assert [l.op for l in layers].count("add") == 1 and [l.op for l in layers].count("conv") == 5
    vpu = load_cost_model("vpunn:VPU_2_7")
    res = dict(plain, block="res")
    assert vpu.latency_ms(space.blocks(plain)) < 0.75 * vpu.latency_ms(space.blocks(res))


@pytest.mark.parametrize("block", ["plain", "res"])
def test_with_the_bicubic_skip_every_arch_starts_as_bicubic_upscaling(block):
    space = small_space(global_skips=["bicubic"], block_types=[block])
    x = torch.randn(1, *INPUT)
    bicubic = torch.nn.functional.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
    supernet = space.build_supernet()
    rng = np.random.default_rng(0)
    for arch in [space.largest(), space.smallest(), space.sample(rng)]:
        supernet.set_active(arch)
        torch.testing.assert_close(supernet(x), bicubic)
        torch.testing.assert_close(space.fresh_network(arch)(x), bicubic)
    # the output conv alone starts at zero; and only when every arch has the skip
    assert space.fresh_network(space.largest()).head.weight.abs().max() > 0
    assert not torch.allclose(small_space(block_types=[block]).build_supernet()(x), bicubic)
