"""The contract every search-space family keeps (search_spaces/base.py), checked on a small space of each family:
archs are plain JSON that round-trip through genes; an extracted subnet computes what the supernet computes with
that arch active, and owns its weights; an arch's cost blocks are among the space's blocks and hold the layers of
its extracted network. Family-specific behaviour is in test_<family>_space.py."""
import numpy as np
import pytest
import torch

from conftest import sampled_archs
from hw_cost import extract_layers
from search_spaces import SPACES as REGISTERED, ArchError, build_space, space_config_class
from search_spaces.common import StageConfig
from search_spaces.edsr import EdsrSpaceConfig
from search_spaces.hybrid import BLOCK_TYPES, HybridSpaceConfig, HybridStageConfig
from search_spaces.mobilenet import MobileNetSpaceConfig, MobileNetStageConfig
from search_spaces.resnet import ResNetSpaceConfig


def _mobilenet(**overrides):
    stages = [MobileNetStageConfig(16, 1, [1, 2]), MobileNetStageConfig(24, 2, [2, 3])]
    config = dict(stem_width=8, stem_stride=2, first_width=8, head_width=32, stages=stages) | overrides
    return build_space(MobileNetSpaceConfig(**config), input_shape=(1, 28, 28), num_outputs=10)


def _resnet(block):
    ratios = {"bottleneck": [0.25, 0.5, 0.75], "basic": [0.5, 0.75, 1.0]}[block]
    config = ResNetSpaceConfig(block=block, stem_widths=[16], stem_stride=2, stem_pool=False,
                               stages=[StageConfig(32, 1, [1, 2]), StageConfig(64, 2, [2, 3])],
                               width_mults=[0.5, 0.75, 1.0], expand_ratios=ratios, channel_divisor=4)
    return build_space(config, input_shape=(1, 28, 28), num_outputs=10)


def _edsr(scale):
    config = EdsrSpaceConfig(scale=scale, depths=[1, 2, 3], channels=[8, 16], kernel_sizes=[3, 5],
                             res_scales=[0.1, 1.0], global_skips=["none", "bicubic"], upsamplers=["subpixel", "edsr"],
                             block_types=["plain", "res"])
    return build_space(config, input_shape=(3, 12, 16), num_outputs=3)


def _hybrid():
    stages = [HybridStageConfig([16, 32], 1, [1, 2], ["ib", "fused"]),
              HybridStageConfig([32, 48], 2, [1, 2, 3], list(BLOCK_TYPES))]
    config = HybridSpaceConfig(stem_widths=[16, 32], stem_stride=2, stages=stages, kernel_sizes=[3, 5],
                               expand_ratios=[1, 2, 4], head_widths=[32, 64])
    return build_space(config, input_shape=(1, 28, 28), num_outputs=10)


SPACES = {
    "mobilenet": lambda: _mobilenet(),
    "mobilenet-ratio-1": lambda: _mobilenet(stages=[MobileNetStageConfig(16, 1, [1, 2], expand_ratios=[1, 3]),
                                                    MobileNetStageConfig(24, 2, [2, 3])]),
    # MobileNetV3's settings: a relu first block and stage (squeeze-excite, ratio 1), then hardswish
    "mobilenet-v3": lambda: _mobilenet(activation="hardswish", first_activation="relu",
                                       stages=[MobileNetStageConfig(16, 1, [1, 2], expand_ratios=[1, 3], se=True,
                                                                    activation="relu"),
                                               MobileNetStageConfig(24, 2, [1, 2]),
                                               MobileNetStageConfig(24, 1, [1, 2], se=True)]),
    "resnet-bottleneck": lambda: _resnet("bottleneck"),
    "resnet-basic": lambda: _resnet("basic"),
    "hybrid": _hybrid,
    "edsr-x2": lambda: _edsr(2),
    "edsr-x4": lambda: _edsr(4),
}


@pytest.fixture(params=list(SPACES))
def space(request):
    torch.manual_seed(0)
    return SPACES[request.param]()


def test_every_registered_family_keeps_the_contract():
    """The spaces checked here sweep the registry: a family registered without a small space here fails."""
    assert {build().family for build in SPACES.values()} == set(REGISTERED)


def _archs(space, n_random: int, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(n_random)]


@pytest.mark.parametrize("family, config_class", [("mobilenet", MobileNetSpaceConfig), ("resnet", ResNetSpaceConfig),
                                                  ("edsr", EdsrSpaceConfig), ("hybrid", HybridSpaceConfig)])
def test_the_registry_gives_each_family_its_config(family, config_class):
    assert space_config_class(family) is config_class
    with pytest.raises(ArchError, match=f"valid: .*{family}"):
        space_config_class(f"{family}_v9")


def test_archs_are_plain_json_and_round_trip_through_genes(space):
    sampled_archs(space)  # asserts both for each arch
    for arch in _archs(space, 0):
        assert space.decode(space.encode(arch)) == arch and space.validate(arch) == arch


def test_extracted_subnet_matches_supernet(space):
    supernet = space.build_supernet()
    archs = _archs(space, 3)
    supernet.train()
    for arch in archs:  # give every subnet's batch-norm slices their own non-trivial statistics
        supernet.set_active(arch)
        supernet(torch.randn(16, *space.input_shape))
    x = torch.randn(4, *space.input_shape)
    supernet.eval()
    outputs = []
    for arch in archs:
        supernet.set_active(arch)
        expected = supernet(x)
        torch.testing.assert_close(supernet.extract(arch).eval()(x), expected, rtol=1e-5, atol=1e-5)
        outputs.append(expected)
        n_params = sum(p.numel() for p in supernet.extract(arch).parameters())
        assert n_params < sum(p.numel() for p in supernet.parameters()) or arch == space.largest()
    assert not torch.allclose(outputs[0], outputs[1])  # the largest and the smallest arch really differ


def test_extracted_subnet_is_independent_of_the_supernet(space):
    supernet = space.build_supernet().eval()
    subnet = supernet.extract(space.smallest()).eval()
    x = torch.randn(2, *space.input_shape)
    before = subnet(x)
    with torch.no_grad():
        for p in supernet.parameters():
            p.add_(1.0)
    torch.testing.assert_close(subnet(x), before)


def test_blocks_are_among_all_blocks_and_hold_the_extracted_network(space):
    supernet = space.build_supernet()
    all_blocks = space.all_blocks()
    all_keys = {b.key for b in all_blocks}
    assert len(all_keys) == len(all_blocks)
    for arch in _archs(space, 8):
        blocks = space.blocks(arch)
        assert {b.key for b in blocks} <= all_keys
        whole = extract_layers(supernet.extract(arch), (1, *space.input_shape))
        by_block = [layer for b in blocks for layer in b.layers()]
        assert sum(layer.macs for layer in whole) == sum(layer.macs for layer in by_block)
        assert [(layer.op, layer.in_shape, layer.out_shape) for layer in whole] == \
               [(layer.op, layer.in_shape, layer.out_shape) for layer in by_block]
