"""Which archs a sandwich step trains (nas/training/sandwich_archs.py): the whole space, or the search's latency
window (the largest arch within the limit on top, random archs spread evenly over the latency up to it)."""
import numpy as np
import pytest

from conftest import CONFIGS
from hw_cost import load_cost_model
from nas.config import load_config
from nas.context import build_task_and_space
from hw_cost import complexity
from nas.training.sandwich_archs import SpaceSandwich, WindowSandwich, largest_within, size_spread_sample


@pytest.fixture(scope="module")
def hybrid():
    config = load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["task.train_size=256"])
    space = build_task_and_space(config)[1]
    cost = load_cost_model(config.cost.spec)
    return (space, lambda arch: cost.latency_ms(space.blocks(arch)),
            lambda arch: complexity(space.blocks(arch))[0], lambda arch: complexity(space.blocks(arch))[1])


def test_the_largest_arch_within_limits_fits_them_and_keeps_the_most(hybrid):
    space, latency, params, macs = hybrid
    assert largest_within(space, params, [(latency, latency(space.largest()))]) == space.largest()
    limit = (latency(space.smallest()) + latency(space.largest())) / 2
    top = largest_within(space, params, [(latency, limit)])
    assert latency(top) <= limit
    rng = np.random.default_rng(0)
    fitting = [a for a in (space.sample(rng) for _ in range(200)) if latency(a) <= limit]
    # a greedy answer, not the optimum: yet larger than most archs that fit
    assert np.mean([params(a) < params(top) for a in fitting]) > 0.9
    capped = largest_within(space, params, [(latency, limit), (macs, macs(top) / 2)])
    assert latency(capped) <= limit and macs(capped) <= macs(top) / 2 and params(capped) < params(top)
    assert largest_within(space, params, [(latency, latency(space.smallest()) / 2)]) == space.smallest()


def test_size_spread_draws_reach_both_corners_that_uniform_draws_miss(hybrid):
    space, latency, _, _ = hybrid
    rng = np.random.default_rng(0)
    spread = [latency(size_spread_sample(space, rng)) for _ in range(300)]
    uniform = [latency(space.sample(rng)) for _ in range(300)]
    low, high = latency(space.smallest()), latency(space.largest())
    ends = lambda values: np.mean([(v - low) / (high - low) < 0.15 or (v - low) / (high - low) > 0.75  # noqa: E731
                                   for v in values])
    assert ends(spread) > 2 * ends(uniform)


def test_the_window_sandwich_trains_within_the_limit_spread_over_it(hybrid):
    space, latency, params, macs = hybrid
    low, high = latency(space.smallest()), latency(space.largest())
    limit = low + (high - low) * 0.6
    window = WindowSandwich(space, latency, params, macs, limit, seed=0, bins=4, pool=512)
    assert window.bottom == space.smallest() and low < latency(window.top) <= limit
    draws = [window.random(np.random.default_rng(step)) for step in range(400)]
    latencies = np.array([latency(a) for a in draws])
    assert latencies.max() <= limit
    quarters = np.digitize(latencies, np.linspace(low, limit, 5)[1:-1])
    assert np.bincount(quarters, minlength=4).min() > 400 / 4 / 3  # every quarter of the window is trained
    again = WindowSandwich(space, latency, params, macs, limit, seed=0, bins=4, pool=512)
    assert again.top == window.top and again.random(np.random.default_rng(7)) == window.random(
        np.random.default_rng(7))
    capped = WindowSandwich(space, latency, params, macs, limit, seed=0, top_macs=macs(window.top) / 2, pool=64)
    assert macs(capped.top) <= macs(window.top) / 2


def test_a_run_trains_its_window_only_with_a_latency_limit(hybrid):
    from nas.search_context import SearchContext
    from nas.strategies.sandwich import sandwich_archs

    space = hybrid[0]
    for overrides, expected in [(["search.evolution.latency_limit_ms=0.01"], SpaceSandwich),
                                (["train.sandwich_window=true", "search.evolution.latency_limit_ms=null"],
                                 SpaceSandwich),
                                (["train.sandwich_window=true", "search.evolution.latency_limit_ms=0.01"],
                                 WindowSandwich)]:
        config = load_config(CONFIGS / "fmnist_npu_smoke.yaml", overrides)
        ctx = SearchContext(config, None, None, space, load_cost_model(config.cost.spec), progress=False)
        assert type(sandwich_archs(ctx)) is expected


def test_without_its_fixed_archs_a_step_trains_only_window_draws(hybrid, tmp_path):
    from nas.training.supernet_training import SupernetTrainer

    space, latency, params, macs = hybrid
    limit = (latency(space.smallest()) + latency(space.largest())) / 2
    window = WindowSandwich(space, latency, params, macs, limit, seed=0, bins=4, pool=256)
    config = load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["task.train_size=256", "train.sandwich_random=3"])
    task = build_task_and_space(config)[0]

    def step_archs(overrides):
        train = load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_random=3", *overrides]).train
        trainer = SupernetTrainer(space, space.build_supernet(), task, train, 0, tmp_path / "absent.pt",
                                  sandwich=window)
        assert train.archs_per_step == len(trainer.step_archs(0, 5))
        return trainer.step_archs(0, 5)

    fixed = step_archs([])
    assert fixed[:2] == [window.top, window.bottom] and len(fixed) == 5
    drawn = step_archs(["train.sandwich_fixed=false", "train.distill=false"])
    assert drawn == fixed[2:]  # the same draws of (seed, epoch, step), without the fixed archs before them
    assert all(latency(arch) <= limit for arch in drawn)


def test_sandwich_settings_are_checked():
    with pytest.raises(Exception, match="distill: needs the top arch"):
        load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_fixed=false"])
    with pytest.raises(Exception, match="sandwich_random: must be >= 1 with sandwich_fixed: false"):
        load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_fixed=false", "train.distill=false",
                                                        "train.sandwich_random=0"])
    with pytest.raises(Exception, match="sandwich_top_mmacs: would be ignored"):
        load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_fixed=false", "train.distill=false",
                                                        "train.sandwich_top_mmacs=100"])
    with pytest.raises(Exception, match="sandwich_top_mmacs: must be > 0"):
        load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_top_mmacs=0"])
    with pytest.raises(Exception, match="sandwich_bins: must be >= 1"):
        load_config(CONFIGS / "fmnist_npu_smoke.yaml", ["train.sandwich_bins=0"])
