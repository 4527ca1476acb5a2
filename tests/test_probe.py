"""The probe set (`nas.ranking.probe`): archs spread over the space, trained alone once (cached), that rate how well a
run's supernet ranks archs; `vpunas probe`, and a run that writes probe.csv itself when the cache holds the set."""
import json
import logging
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, SMOKE
from nas.cli import main
from nas.ranking.probe import probe_archs, ranking_stats
from nas.rundir import RunDir
from search_spaces import arch_key


@pytest.fixture(scope="module")
def space():
    from nas.config import load_config
    from nas.context import build_task_and_space

    return build_task_and_space(load_config(SMOKE, ["task.train_size=256"]))[1]


def test_probe_archs_span_the_space_from_smallest_to_largest(space):
    from hw_cost import complexity

    macs = lambda arch: float(complexity(space.blocks(arch))[1])  # noqa: E731
    archs = probe_archs(space, macs, 9, seed=0)
    assert len({arch_key(a) for a in archs}) == 9
    assert archs[0] == space.smallest() and archs[-1] == space.largest()
    costs = [macs(a) for a in archs]
    assert costs == sorted(costs)
    # every third of the cost range holds probe archs, not only its crowded middle
    thirds = np.digitize(costs, np.linspace(costs[0], costs[-1], 4)[1:-1])
    assert set(thirds) == {0, 1, 2}
    assert archs == probe_archs(space, macs, 9, seed=0) != probe_archs(space, macs, 9, seed=1)


def test_probe_archs_within_a_limit_spread_over_the_search_window(space):
    from hw_cost import complexity

    macs = lambda arch: float(complexity(space.blocks(arch))[1])  # noqa: E731
    limit = (macs(space.smallest()) + macs(space.largest())) / 3
    archs = probe_archs(space, macs, 9, seed=0, limit_ms=limit)
    costs = [macs(a) for a in archs]
    assert len({arch_key(a) for a in archs}) == 9 and archs[0] == space.smallest()
    assert max(costs) <= limit and costs == sorted(costs)
    thirds = np.digitize(costs, np.linspace(costs[0], limit, 4)[1:-1])
    assert set(thirds) == {0, 1, 2}


def test_ranking_stats_and_their_intervals():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=40)
    perfect = ranking_stats(truth * 2 + 1, truth, resamples=200)
    assert perfect["kendall_tau"] == pytest.approx(1) and perfect["spearman"] == pytest.approx(1)
    assert perfect["kendall_tau_low"] == pytest.approx(1)
    assert ranking_stats(-truth, truth, resamples=200)["kendall_tau"] == pytest.approx(-1)
    noisy = ranking_stats(truth + rng.normal(size=40), truth, resamples=500)
    for name in ("kendall_tau", "spearman"):
        assert 0 < noisy[f"{name}_low"] < noisy[name] < noisy[f"{name}_high"] < 1
    assert noisy["kendall_tau_high"] - noisy["kendall_tau_low"] > 0.1  # 40 archs leave real doubt
    unknown = ranking_stats([1.0, 2.0], [3.0, 4.0])
    assert unknown["kendall_tau"] == pytest.approx(1) and np.isnan(unknown["kendall_tau_low"])


@pytest.fixture()
def probed_run(smoke_run, tmp_path, monkeypatch):
    """A copy of the smoke run, with a private probe cache."""
    monkeypatch.setenv("VPUNAS_CACHE", str(tmp_path / "cache"))
    shutil.copytree(smoke_run.path, tmp_path / "run")
    return RunDir(tmp_path / "run")


def _cache_files(run: RunDir) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in (run.path.parent / "cache").glob("probe-*.pt")}


def test_probe_trains_each_arch_once_and_reports(probed_run, capsys, caplog):
    run = probed_run
    assert main(["probe", str(run.path), "probe.archs=5", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "inherited (5 archs): Kendall tau" in printed and "predictor, held out (5 archs)" in printed
    assert str(run.probe) in printed
    rows = run.probe.read_text().splitlines()
    assert len(rows) == 6 and rows[0].split(",") == [
        "latency_ms", "within_limit", "params", "macs", "inherited_top1", "standalone_top1", "standalone_test_top1",
        "epochs", "arch", "held_out_predicted_top1"]
    page = run.report_html.read_text()
    assert "Probe set</h2><p>5 archs spread over the space" in page and "predictor, held out" in page
    trained = _cache_files(run)
    assert len(trained) == 5

    # a second call trains nothing; a lost entry is trained again, alone
    lost = sorted(trained)[1]
    (run.path.parent / "cache" / lost).unlink()
    caplog.set_level(logging.INFO, logger="nas.baselines.cached_networks")
    assert main(["probe", str(run.path), "probe.archs=5", "--no-progress"]) == 0
    again = _cache_files(run)
    assert set(again) == set(trained)
    assert [name for name in trained if again[name] != trained[name]] == [lost]
    assert sum("from the cache" in r.getMessage() for r in caplog.records) == 4
    assert run.probe.read_text().splitlines() == rows  # same archs, same scores

    # the benchmark of scoring settings re-scores the set on the run's supernet
    out = run.path / "bench.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "bench_ranking.py"), str(run.path), "--calib", "64",
                    "--eval-images", "100", "0", "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    settings = json.loads(out.read_text())
    assert [(s["calib_images"], s["eval_images"]) for s in settings] == [(64, 100), (64, 0)]
    assert {"inherited vs standalone val", "predictor, held out vs standalone test"} <= set(settings[0]["figures"])


def test_a_run_scores_its_probe_set_when_the_cache_holds_it(probed_run):
    """What a search run does at its end: probe.csv only when every probe arch is cached."""
    from nas.config import load_config
    from nas.training.evaluation import ArchEvaluator
    from nas.ranking.probe import score_probe
    from nas.context import build_context
    from nas.training.supernet_training import load_trained_supernet

    run = probed_run
    ctx = build_context(load_config(run.config, ["probe.archs=2"]), run, torch.device("cpu"), progress=False)
    supernet = load_trained_supernet(ctx.space, run.supernet_checkpoint, ctx.config.train)
    evaluator = ArchEvaluator(ctx.space, supernet, ctx.task, ctx.cost_model)
    assert score_probe(ctx, evaluator, train=False) is None and not run.probe.exists()
    assert main(["probe", str(run.path), "probe.archs=2", "--no-progress"]) == 0
    run.probe.unlink()
    figures = score_probe(ctx, evaluator, train=False)
    assert list(figures) == ["inherited", "standalone val (the val split's own noise)"] and run.probe.exists()
    assert figures["inherited"]["archs"] == 2


def test_probe_refuses_other_overrides_and_missing_runs(tmp_path, smoke_run, capsys, monkeypatch):
    assert main(["probe", str(smoke_run.path), "train.epochs=3"]) == 2
    assert main(["probe", str(tmp_path / "nothing")]) == 2
    assert main(["probe", str(smoke_run.path), "probe.archs=1"]) == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU run probed where there is none
    assert main(["probe", str(smoke_run.path), "device=cuda"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4 and all(line.startswith("vpunas: error: ") for line in errors)
    assert "changes only the probe set" in errors[0] and "no config.yaml" in errors[1] and "probe.archs" in errors[2]
    assert "device: cuda, but torch finds no CUDA device here" in errors[3]


def test_accuracy_predictor_ranks_held_out_archs_of_a_toy_set(space):
    """A toy set whose true metric is a smooth function of size and encoding, seen through a noisy 'inherited'
    score: the predictor's held-out ranking beats the noisy score's."""
    from nas.ranking.accuracy_predictor import AccuracyPredictor, arch_features, held_out_predictions

    rng = np.random.default_rng(0)
    archs = space.spread_sample(20, rng)
    size = np.array([arch_features(space, a, 0.0)[1] for a in archs])
    truth = 80 + 5 * (size - size.mean()) / size.std()
    inherited = truth + rng.normal(scale=4.0, size=len(truth))
    features = np.array([arch_features(space, a, s) for a, s in zip(archs, inherited)])
    assert features.shape == (20, 3 + len(space.choices)) and np.all((features[:, 3:] >= 0) & (features[:, 3:] <= 1))
    held_out = held_out_predictions(features, truth)
    tau = lambda x: ranking_stats(x, truth, resamples=100)["kendall_tau"]  # noqa: E731
    assert tau(held_out) > 0.7 and tau(held_out) > tau(inherited) + 0.15
    fitted = AccuracyPredictor().fit(features, truth)
    assert np.abs(fitted.predict(features) - truth).max() < 1.0
    with pytest.raises(ValueError, match="at least 3"):
        AccuracyPredictor().fit(features[:2], truth[:2])
    with pytest.raises(RuntimeError, match="before fit"):
        AccuracyPredictor().predict(features[0])

