"""Random search (the baseline of scripts/bench_search.py), a run taking another run's trained supernet
(`supernet_from`), and the benchmark that compares the search with random sampling at equal budget."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, SEARCH_IN_SECONDS, SMOKE
from nas.cli import main
from nas.randomness import RunRandom
from nas.strategies.random_search import RandomConfig, sample_archs
from nas.rundir import RunDir
from search_spaces import arch_key



@pytest.fixture(scope="module")
def space():
    from nas.config import load_config
    from nas.context import build_task_and_space

    return build_task_and_space(load_config(SMOKE, ["task.train_size=256"]))[1]


def _macs(space):
    from hw_cost import complexity

    return lambda arch: float(complexity(space.blocks(arch))[1])


def _stream(seed: int) -> np.random.Generator:
    """The random strategy's stream of a run of `seed`."""
    return RunRandom(seed).numpy("random.archs")


def test_uniform_sampling_is_distinct_feasible_and_seeded(space):
    cost = _macs(space)
    limit = float(np.median([cost(space.sample(np.random.default_rng(i))) for i in range(40)]))
    config = RandomConfig(archs=12, latency_limit_ms=limit)
    draw = lambda seed: sample_archs(space, config, cost, _stream(seed))  # noqa: E731
    archs = draw(3)
    assert len(archs) == 12 and len({arch_key(a) for a in archs}) == 12
    assert all(cost(a) <= limit for a in archs)
    assert archs == draw(3) != draw(4)


def test_latency_bins_cover_the_range_evenly(space):
    """Uniform draws pile up in the middle of the cost range; binned draws give its ends equal shares."""
    cost = _macs(space)
    uniform = [cost(a) for a in sample_archs(space, RandomConfig(archs=60), cost, _stream(0))]
    binned = [cost(a) for a in sample_archs(space, RandomConfig(archs=60, sampling="latency_bins", bins=4, pool=10),
                                            cost, _stream(0))]
    low, high = np.quantile(uniform, [0.1, 0.9])
    ends = lambda costs: np.mean([(c < low) or (c > high) for c in costs])  # noqa: E731
    assert ends(binned) > 1.5 * ends(uniform)
    assert min(binned) <= min(uniform) and max(binned) >= max(uniform) * 0.95


def test_bad_random_settings_are_one_line(capsys):
    assert main(["search", SMOKE, "search.random.sampling=sobol"]) == 2
    assert "search.random.sampling: 'sobol' is not one of uniform, latency_bins" in capsys.readouterr().err


def test_supernet_from_refuses_another_recipe(tmp_path, capsys):
    source = tmp_path / "source"
    assert main(["search", SMOKE, *SEARCH_IN_SECONDS, "--out", str(source), "--no-progress"]) == 0
    capsys.readouterr()
    for override, message in (("train.lr=0.5", "its train.lr differs from this run's"),
                              ("seed=1", "its seed differs"),
                              ("search.strategy=differentiable", "trains a supernet of its own")):
        assert main(["search", SMOKE, *SEARCH_IN_SECONDS, override, f"supernet_from={source}", "--out",
                     str(tmp_path / "other")]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "other").exists()  # nothing written


def test_bench_search_compares_search_and_random_on_one_supernet(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "scripts/bench_search.py", SMOKE, *SEARCH_IN_SECONDS, "--seeds", "0",
                           "--bins", "3", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "search - uniform" in proc.stdout and "search - binned" in proc.stdout
    report = json.loads((out / "bench_search.json").read_text())["seeds"]["0"]
    assert report["archs_scored"]["uniform"] == report["archs_scored"]["binned"] == report["archs_scored"]["search"]
    for method in ("search", "uniform", "binned"):
        assert report["methods"][method]["hypervolume"] > 0
        run = RunDir(out / "seed0" / method)
        if method != "search":  # the search run's supernet, trained once: copied, not trained again
            assert "supernet: taken from" in run.log.read_text()
            assert (run.supernet_checkpoint.read_bytes()
                    == RunDir(out / "seed0" / "search").supernet_checkpoint.read_bytes())
    again = subprocess.run([sys.executable, "scripts/bench_search.py", SMOKE, *SEARCH_IN_SECONDS, "--seeds", "0",
                            "--bins", "3", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads((out / "bench_search.json").read_text())["seeds"]["0"] == {
        **report, "seconds_this_call": {"search": 0.0, "uniform": 0.0, "binned": 0.0}}  # finished runs reused


def test_bench_search_compares_a_search_strategy_not_random_sampling_itself(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/bench_search.py", "--strategy", "random", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--strategy" in proc.stderr.strip().splitlines()[-1]
    assert not any(tmp_path.iterdir())  # nothing run, nothing written
