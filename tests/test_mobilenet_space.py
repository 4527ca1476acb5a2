import numpy as np
import pytest
import torch

from conftest import sampled_archs
from search_spaces import ArchError, arch_key, build_space, space_config_class
from search_spaces.mobilenet import MobileNetSpaceConfig, MobileNetStageConfig as StageConfig


def small_space(**overrides):
    overrides.setdefault("stages", [StageConfig(16, 1, [1, 2]), StageConfig(24, 2, [2, 3])])
    cfg = MobileNetSpaceConfig(stem_width=8, stem_stride=2, first_width=8, head_width=32, **overrides)
    return build_space(cfg, input_shape=(1, 28, 28), num_outputs=10)


def test_registry_lists_valid_names_on_unknown():
    assert space_config_class("mobilenet") is MobileNetSpaceConfig
    with pytest.raises(ArchError, match="valid: .*mobilenet"):
        space_config_class("mobilenet_v9")


def test_arch_is_plain_json_and_round_trips_through_genes():
    space = small_space()
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
        small_space().validate(arch)


def test_mutation_changes_only_some_genes_and_is_seeded():
    space = small_space()
    arch = space.largest()
    a = space.mutate(arch, np.random.default_rng(1), prob=0.3)
    b = space.mutate(arch, np.random.default_rng(1), prob=0.3)
    assert a == b and a != arch
    assert space.mutate(arch, np.random.default_rng(1), prob=0.0) == arch


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_extracted_subnet_matches_supernet(seed):
    torch.manual_seed(seed)
    space = small_space() if seed < 2 else stage_t1_space()
    supernet = space.build_supernet()
    archs = [space.largest(), space.smallest(), space.sample(np.random.default_rng(seed))]
    supernet.train()
    for arch in archs:  # give every subnet's batch-norm slices their own non-trivial statistics
        supernet.set_active(arch)
        supernet(torch.randn(16, 1, 28, 28))
    x = torch.randn(4, 1, 28, 28)
    supernet.eval()
    for arch in archs:
        supernet.set_active(arch)
        expected = supernet(x)
        subnet = supernet.extract(arch).eval()
        torch.testing.assert_close(subnet(x), expected, rtol=1e-5, atol=1e-5)
        n_params = sum(p.numel() for p in subnet.parameters())
        assert n_params < sum(p.numel() for p in supernet.parameters()) or arch == space.largest()


def test_extracted_subnet_is_independent_of_the_supernet():
    space = small_space()
    supernet = space.build_supernet().eval()
    arch = space.smallest()
    subnet = supernet.extract(arch).eval()
    x = torch.randn(2, 1, 28, 28)
    before = subnet(x)
    with torch.no_grad():
        for p in supernet.parameters():
            p.add_(1.0)
    torch.testing.assert_close(subnet(x), before)


@pytest.mark.parametrize("make_space", [small_space, lambda: stage_t1_space()])
def test_blocks_cover_the_subnet_and_all_blocks_cover_every_arch(make_space):
    space = make_space()
    supernet = space.build_supernet()
    all_keys = {b.key for b in space.all_blocks()}
    rng = np.random.default_rng(3)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(10)]:
        blocks = space.blocks(arch)
        assert {b.key for b in blocks} <= all_keys
        assert len(blocks) == 2 + 1 + sum(arch["depth"])  # stem, first block, searched blocks, head
        from hw_cost import extract_layers

        whole = extract_layers(supernet.extract(arch), (1, 1, 28, 28))
        by_block = [l for b in blocks for l in b.layers()]
        assert sum(l.macs for l in whole) == sum(l.macs for l in by_block)
        assert [l.op for l in whole] == [l.op for l in by_block]


def stage_t1_space():
    """The small space whose first stage also searches ratio 1 (no expand conv)."""
    return small_space(stages=[StageConfig(16, 1, [1, 2], expand_ratios=[1, 3]), StageConfig(24, 2, [2, 3])])


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


def test_space_config_errors_name_the_field():
    with pytest.raises(ArchError, match="expand_ratios"):
        small_space(expand_ratios=[0, 3])
    with pytest.raises(ArchError, match=r"stages\[1\].expand_ratios"):
        small_space(stages=[StageConfig(16, 1, [1]), StageConfig(24, 2, [2], expand_ratios=[])])
    with pytest.raises(ArchError, match="kernel_sizes"):
        small_space(kernel_sizes=[2, 3])


def test_arch_key_is_canonical():
    assert arch_key({"b": 1, "a": [1, 2]}) == arch_key({"a": [1, 2], "b": 1})


def test_block_key_names_the_expanded_width():
    """The same kernel and ratio at another channel divisor is another block: its key differs, its module too."""
    arch = {"depth": [1, 2], "kernel": [[3], [3, 3]], "expand": [[3], [3, 3]]}
    by_divisor = {d: small_space(channel_divisor=d).blocks(arch) for d in (8, 32)}
    for narrow, wide in zip(by_divisor[8][2:-1], by_divisor[32][2:-1]):  # the searched blocks
        mids = [b.build().depthwise[0].out_channels for b in (narrow, wide)]
        assert (narrow.key == wide.key) == (mids[0] == mids[1]), (narrow.key, wide.key, mids)
        assert f"|mid{mids[0]}|" in narrow.key and f"|mid{mids[1]}|" in wide.key
    assert any(n.key != w.key for n, w in zip(by_divisor[8], by_divisor[32]))
