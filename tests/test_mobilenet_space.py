import numpy as np
import pytest
import torch

from conftest import SMOKE, sampled_archs, small_mobilenet_space
from hw_cost import load_cost_model
from nas.config import load_config
from search_spaces import ArchError, arch_key, build_space
from search_spaces.mobilenet import MobileNetStageConfig as StageConfig


def test_arch_is_plain_json_and_round_trips_through_genes():
    space = small_mobilenet_space()
    for arch in sampled_archs(space):
        assert all(len(k) == d for k, d in zip(arch["kernel"], arch["depth"]))
    assert space.largest() == {"depth": [2, 3], "kernel": [[7, 7], [7, 7, 7]], "expand": [[6, 6], [6, 6, 6]]}
    assert space.smallest() == {"depth": [1, 2], "kernel": [[3], [3, 3]], "expand": [[3], [3, 3]]}


@pytest.mark.parametrize("arch, field", [
    ({"depth": [1, 2], "kernel": [[3], [3, 3]]}, "missing"),
    ({"depth": [4, 2], "kernel": [[3] * 4, [3, 3]], "expand": [[3] * 4, [3, 3]]}, r"arch.depth\[0\]"),
    ({"depth": [1, 2], "kernel": [[4], [3, 3]], "expand": [[3], [3, 3]]}, "s0.b0.kernel"),
    ({"depth": [1, 2], "kernel": [[3], [3]], "expand": [[3], [3, 3]]}, r"arch.kernel\[1\]"),
    ({"depth": [1], "kernel": [[3]], "expand": [[3]]}, "2 stages"),
])
def test_invalid_archs_name_the_field(arch, field):
    with pytest.raises(ArchError, match=field):
        small_mobilenet_space().validate(arch)


def test_mutation_changes_only_some_genes_and_is_seeded():
    space = small_mobilenet_space()
    arch = space.largest()
    a = space.mutate(arch, np.random.default_rng(1), prob=0.3)
    b = space.mutate(arch, np.random.default_rng(1), prob=0.3)
    assert a == b and a != arch
    assert space.mutate(arch, np.random.default_rng(1), prob=0.0) == arch


@pytest.mark.parametrize("make_space", [small_mobilenet_space, lambda: stage_t1_space(), lambda: se_space()])
def test_an_arch_has_a_block_per_layer_group(make_space):
    """Stem, first block, one block per searched block, head (tests/test_space_contract.py: what they hold)."""
    space = make_space()
    rng = np.random.default_rng(3)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(10)]:
        assert len(space.blocks(arch)) == 2 + 1 + sum(arch["depth"])


def stage_t1_space():
    """The small space whose first stage also searches ratio 1 (no expand conv)."""
    return small_mobilenet_space(stages=[StageConfig(16, 1, [1, 2], expand_ratios=[1, 3]),
                                         StageConfig(24, 2, [2, 3])])


def se_space():
    """The small space with MobileNetV3's settings: a relu first block and stage (with squeeze-excite and ratio 1),
    then hardswish; squeeze-excite in the last stage too."""
    return small_mobilenet_space(activation="hardswish", first_activation="relu",
                                 stages=[StageConfig(16, 1, [1, 2], expand_ratios=[1, 3], se=True, activation="relu"),
                                         StageConfig(24, 2, [1, 2]), StageConfig(24, 1, [1, 2], se=True)])


def test_squeeze_excite_follows_the_active_expanded_width():
    """The extracted block's SE reduces to a quarter of the active expanded width (rounded to 8) and holds the
    leading slices of the supernet's weights; stages without SE have none."""
    space = se_space()
    supernet = space.build_supernet()
    arch = {"depth": [2, 1, 2], "kernel": [[3, 5], [7], [3, 5]], "expand": [[1, 3], [6], [4, 6]]}
    subnet = supernet.extract(arch)
    blocks = list(subnet.blocks)[1:]  # after the fixed first block
    widths = [(b.depthwise[0].out_channels, None if isinstance(b.se, torch.nn.Identity) else b.se.reduce.out_channels)
              for b in blocks]
    assert widths == [(8, 8), (48, 16), (96, None), (96, 24), (144, 40)]
    assert isinstance(subnet.blocks[0].se, torch.nn.Identity)  # the first block has none
    se, elastic = blocks[3].se, supernet.stages[2][0].expanded.se  # ratio 4 of 6: 96 of 144 channels, SE 24 of 40
    assert elastic.reduce.weight.shape[:2] == (40, 144)
    assert torch.equal(se.reduce.weight, elastic.reduce.weight[:24, :96])
    assert torch.equal(se.reduce.bias, elastic.reduce.bias[:24])
    assert torch.equal(se.expand.weight, elastic.expand.weight[:96, :24])
    assert torch.equal(se.expand.bias, elastic.expand.bias[:96])
    acts = [type(b.depthwise[2]).__name__ for b in subnet.blocks]
    assert acts == ["ReLU", "ReLU", "ReLU", "Hardswish", "Hardswish", "Hardswish"]


def test_block_keys_name_squeeze_excite_and_activation():
    arch = {"depth": [1, 1, 1], "kernel": [[3], [3], [3]], "expand": [[3], [3], [3]]}
    keys = [b.key for b in se_space().blocks(arch)]
    assert keys[:2] == ["stem|in1x28x28|out8|k3|s2|hardswish", "mbconv|k3|e1|mid8|in8x14x14|out8|s1|relu"]
    assert keys[2:5] == ["mbconv|k3|e3|mid24|in8x14x14|out16|s1|relu|se8",
                         "mbconv|k3|e3|mid48|in16x14x14|out24|s2|hardswish",
                         "mbconv|k3|e3|mid72|in24x7x7|out24|s1|hardswish|se24"]
    plain = small_mobilenet_space(stages=[StageConfig(16, 1, [1, 2], expand_ratios=[1, 3]), StageConfig(24, 2, [1, 2]),
                                          StageConfig(24, 1, [1, 2])])
    assert [b.key for b in plain.blocks(arch)][2:5] == ["mbconv|k3|e3|mid24|in8x14x14|out16|s1|relu6",
                                                        "mbconv|k3|e3|mid48|in16x14x14|out24|s2|relu6",
                                                        "mbconv|k3|e3|mid72|in24x7x7|out24|s1|relu6"]
    # the cost layers of an SE block: global pool, two 1x1 convs (relu, hard sigmoid), the channel-wise product
    layers = se_space().blocks(arch)[4].layers()
    assert [(l.op, l.activation) for l in layers[2:6]] == [("global_avgpool", "none"), ("conv", "relu"),
                                                           ("conv", "hardsigmoid"), ("mul", "none")]


def test_default_configs_keep_their_block_keys():
    """Without SE and stage activations the keys are those of the shipped CPU latency table (which covers them)."""
    config = load_config(SMOKE)
    space = build_space(config.space, input_shape=(1, 28, 28), num_outputs=10)
    load_cost_model(config.cost.model).check_covers(space.all_blocks())


def test_a_stage_searches_its_own_ratios_and_ratio_1_drops_the_expand_conv():
    space = stage_t1_space()
    assert space.smallest()["expand"] == [[1], [3, 3]] and space.largest()["expand"] == [[3, 3], [6, 6, 6]]
    torch.manual_seed(0)
    supernet = space.build_supernet()
    supernet.train()
    arch = {"depth": [2, 2], "kernel": [[5, 3], [3, 7]], "expand": [[1, 3], [4, 6]]}
    supernet.set_active(arch)
    supernet(torch.randn(16, 1, 28, 28))
    supernet.eval()
    x = torch.randn(4, 1, 28, 28)
    subnet = supernet.extract(arch).eval()
    torch.testing.assert_close(subnet(x), supernet(x), rtol=1e-5, atol=1e-5)
    t1_block = subnet.blocks[1]  # after the fixed first block
    assert isinstance(t1_block.expand, torch.nn.Identity) and t1_block.depthwise[0].in_channels == 8
    assert not isinstance(subnet.blocks[2].expand, torch.nn.Identity)
    key = space.blocks(arch)[2].key
    assert "|e1|mid8|in8x" in key
    with pytest.raises(ArchError, match=r"s1.b0.expand"):  # ratio 1 is only the first stage's
        space.validate({"depth": [1, 2], "kernel": [[3], [3, 3]], "expand": [[1], [1, 3]]})


def test_ratio_1_trains_weights_of_its_own():
    """Ratio 1's depthwise conv sees the block's input, the other ratios' expanded features: no shared weights."""
    space = stage_t1_space()
    supernet = space.build_supernet().train()
    block = supernet.stages[0][0]
    assert supernet.stages[1][0].unexpanded is None  # a stage without ratio 1 has no such path
    for ratio, trained, untouched in ((1, block.unexpanded, block.expanded), (3, block.expanded, block.unexpanded)):
        supernet.zero_grad(set_to_none=True)
        supernet.set_active({"depth": [1, 2], "kernel": [[3], [3, 3]], "expand": [[ratio], [3, 3]]})
        supernet(torch.randn(4, 1, 28, 28)).sum().backward()
        assert trained.dw_conv.weight.grad is not None and trained.project_conv.weight.grad.abs().sum() > 0
        assert untouched.dw_conv.weight.grad is None and untouched.project_conv.weight.grad is None
        assert (block.expand_conv.weight.grad is None) == (ratio == 1)


def test_space_config_errors_name_the_field():
    with pytest.raises(ArchError, match="expand_ratios"):
        small_mobilenet_space(expand_ratios=[0, 3])
    with pytest.raises(ArchError, match=r"stages\[1\].expand_ratios"):
        small_mobilenet_space(stages=[StageConfig(16, 1, [1]), StageConfig(24, 2, [2], expand_ratios=[])])
    with pytest.raises(ArchError, match="kernel_sizes"):
        small_mobilenet_space(kernel_sizes=[2, 3])
    with pytest.raises(ArchError, match=r"stages\[1\].activation: 'gelu'"):
        small_mobilenet_space(stages=[StageConfig(16, 1, [1]), StageConfig(24, 2, [2], activation="gelu")])
    with pytest.raises(ArchError, match="first_activation"):
        small_mobilenet_space(first_activation="swish")


def test_arch_key_is_canonical():
    assert arch_key({"b": 1, "a": [1, 2]}) == arch_key({"a": [1, 2], "b": 1})


def test_block_key_names_the_expanded_width():
    """The same kernel and ratio at another channel divisor is another block: its key differs, its module too."""
    arch = {"depth": [1, 2], "kernel": [[3], [3, 3]], "expand": [[3], [3, 3]]}
    by_divisor = {d: small_mobilenet_space(channel_divisor=d).blocks(arch) for d in (8, 32)}
    for narrow, wide in zip(by_divisor[8][2:-1], by_divisor[32][2:-1]):  # the searched blocks
        mids = [b.build().depthwise[0].out_channels for b in (narrow, wide)]
        assert (narrow.key == wide.key) == (mids[0] == mids[1]), (narrow.key, wide.key, mids)
        assert f"|mid{mids[0]}|" in narrow.key and f"|mid{mids[1]}|" in wide.key
    assert any(n.key != w.key for n, w in zip(by_divisor[8], by_divisor[32]))
