"""Zoo baselines (`type: zoo`): timm / torchvision networks by name and the fast published SR networks, adapted to
the task's input, trained as long as the finalised archs, cached, costed on every NPU generation, and compared in
the report's table per generation."""
from __future__ import annotations

import json
import logging

import pytest
import torch
import torch.nn as nn

from conftest import (CONFIGS, EVOLVE_ONE_GENERATION, SCORE_ON_200, SMOKE, TRAIN_ON_512, made_up_baseline,
                      made_up_candidate)
from nas.baselines.cache import CACHE_ENV
from nas.baseline_entries import ZooBaseline
from nas.baselines import BASELINE_TYPES, matched_epochs
from nas.cli import main
from nas.config import ConfigError, load_config
from nas.baselines.reference_networks import reference_network
from nas.reporting.report import generation_matches
from nas.rundir import RunDir, read_csv
from nas.context import build_context
from nas.baselines.zoo import ZooError, describe_zoo, zoo_block, zoo_network

#: a smoke search cut to a sliver (see test_reference_baselines), the finalisation included
TINY = [*TRAIN_ON_512, *SCORE_ON_200, "train.epochs=0.25", *EVOLVE_ONE_GENERATION, "search.finalize.archs=1",
        "search.finalize.screen_archs=0", "search.finalize.epochs=0.25", "search.finalize.int8=false",
        "cost.model=vpunn:VPU_2_7"]
ZOO = "baselines=" + json.dumps([{"name": "mnv3", "type": "zoo", "model": "mobilenetv3_small_050"}])


def _last_map_side(net: nn.Module, shape) -> int:
    """Side of the smallest feature map a network's convolutions compute on an input of `shape` before global
    pooling (a head convolution after it works on 1x1)."""
    sides = []
    hooks = [m.register_forward_hook(lambda m, i, out: sides.append(out.shape[-1]))
             for m in net.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        net.eval()(torch.zeros(1, *shape))
    for hook in hooks:
        hook.remove()
    return min(side for side in sides if side > 1)


@pytest.mark.parametrize("model, source", [("mobilenetv4_conv_small", "auto"), ("efficientnet_lite0", "auto"),
                                           ("mobilenet_v2", "torchvision"), ("resnet50", "torchvision")])
def test_zoo_networks_adapt_to_small_grayscale_inputs(model, source):
    torch.manual_seed(0)
    net = zoo_network(model, (1, 28, 28), 10, source=source)
    with torch.no_grad():
        assert net.eval()(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert _last_map_side(net, (1, 28, 28)) == 4  # total stride 8, as the reference networks have
    assert "its first 2 downsampling steps at stride 1 (total stride 8)" in describe_zoo(model, (1, 28, 28),
                                                                                          source=source)
    large = zoo_network(model, (3, 224, 224), 10, source=source)  # large inputs: the library's network as is
    assert _last_map_side(large, (3, 224, 224)) == 7


def test_torchvision_mobilenet_v2_gets_the_reference_networks_adaptation():
    """The generic stride policy lands where the hand-made reference network's did: stem and first 24-channel
    stage at stride 1, every other layer as torchvision builds it."""
    zoo = zoo_network("mobilenet_v2", (1, 28, 28), 10, source="torchvision", kwargs={"width_mult": 1.4})
    reference = reference_network("mobilenet_v2", (1, 28, 28), 10, 1.4)
    strides = lambda net: [(tuple(m.weight.shape), m.stride) for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert strides(zoo) == strides(reference)


def test_the_cost_block_is_the_deployed_network():
    """MobileOne's training-time branches are fused before costing (timm's reparameterisation)."""
    block = zoo_block("mobileone_s0", (1, 28, 28), 10)
    trained = zoo_network("mobileone_s0", (1, 28, 28), 10)
    from hw_cost import extract_layers

    assert len(block.layers()) < len(extract_layers(trained, (1, 1, 28, 28)))


@pytest.mark.parametrize("model", ["fsrcnn", "espcn"])
def test_super_resolution_networks(model):
    net = zoo_network(model, (3, 24, 40), 3, scale=2)
    assert net(torch.randn(1, 3, 24, 40)).shape == (1, 3, 48, 80)
    layers = zoo_block(model, (3, 24, 40), 3, scale=2).layers()
    assert {layer.op for layer in layers} == {"conv", "pixel_shuffle"}  # PReLU / tanh fused into the convs
    assert zoo_network("fsrcnn", (3, 8, 8), 3, scale=3, kwargs={"d": 32, "m": 2})(torch.zeros(1, 3, 8, 8)).shape \
        == (1, 3, 24, 24)


@pytest.mark.parametrize("model, source, kwargs, message", [
    ("mobilenetv4_conv_smal", "auto", {}, r"model: neither timm nor torchvision has a model 'mobilenetv4_conv_smal' "
                                          r"\(did you mean mobilenetv4_conv_small"),
    ("resnet18", "torchvision", {"depth": 3}, r"kwargs: torchvision cannot build resnet18 with \{\"depth\": 3\}"),
    ("resnet18", "caffe", {}, r"source: unknown 'caffe'"),
    ("mobilenetv4_conv_small", "torchvision", {}, r"model: torchvision has no model 'mobilenetv4_conv_small'"),
])
def test_zoo_errors_name_the_field(model, source, kwargs, message):
    with pytest.raises(ZooError, match=message):
        zoo_network(model, (1, 28, 28), 10, source=source, kwargs=kwargs)
    with pytest.raises(ZooError, match="unknown super-resolution network 'srcnn'; valid: fsrcnn, espcn"):
        zoo_network("srcnn", (3, 8, 8), 3, scale=2)


@pytest.mark.parametrize("entry, message", [
    ({"model": "no_such_net"}, r"baselines\[z\]\.model: neither timm nor torchvision has a model 'no_such_net'"),
    ({"model": "resnet18", "kwargs": {"bogus": 1}}, r"baselines\[z\]\.kwargs: timm cannot build resnet18 .*bogus"),
    ({}, r"baselines\[z\]\.model: a zoo baseline names its model"),
    ({"model": "resnet18", "width": 2}, r"baselines\[z\]: unknown keys \['width'\]"),
    ({"model": "resnet18", "measured": {"test": 90.0, "machine": "a GPU box", "date": "2026-12-04",
                                        "recipe": {"epochs": 0.5}}},
     r"baselines\[z\]\.measured\.recipe: missing batch_size, opt, lr, weight_decay, seed"),
    ({"model": "resnet18", "measured": {"test": 90.0, "machine": "a GPU box", "date": "2026-12-04",
                                        "recipe": {"epochs": 0.5, "batch_size": 32, "opt": "adamw", "lr": 0.003,
                                                   "weight_decay": 0.05, "seed": 0}}},
     r"baselines\[z\]\.measured\.recipe\.opt: the figures were measured at 'adamw', this run's recipe has 'sgd'; "
     "a figure is used only at the run's recipe"),
])
def test_a_bad_zoo_entry_is_one_line_and_exit_2_before_training(entry, message, tmp_path, capsys):
    spec = json.dumps([{"name": "z", "type": "zoo", **entry}])
    out = tmp_path / "run"
    assert main(["search", SMOKE, *TINY, f"baselines={spec}", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vpunas: error: ")
    import re

    assert re.search(message, err[0]), err[0]
    assert not out.exists()  # nothing trained, nothing written


def test_matched_epochs_follow_the_finalisation():
    default = load_config(CONFIGS / "fmnist_mobilenet.yaml")
    assert matched_epochs(default) == (6.5, "as long as the longest-trained finalised arch: 1.5 supernet + 5 "
                                            "finalisation epochs")
    assert matched_epochs(load_config(CONFIGS / "fmnist_mobilenet.yaml",
                                      ["search.finalize.run_budget_minutes=0", "search.finalize.max_archs=0",
                                       "search.finalize.max_epochs=0"]))[0] == 4.5  # no budget: `epochs`
    assert matched_epochs(load_config(CONFIGS / "sr_edsr_x2.yaml"))[0] == 6  # finalised from scratch
    assert matched_epochs(load_config(SMOKE, ["search.finalize.archs=0"]))[0] == 1  # the supernet's alone


def test_the_zoo_config_is_the_default_search_plus_the_zoo():
    zoo, default = load_config(CONFIGS / "fmnist_zoo.yaml"), load_config(CONFIGS / "fmnist_mobilenet.yaml")
    assert zoo.train == default.train and zoo.space == default.space and zoo.task == default.task
    assert zoo.search.finalize == default.search.finalize and zoo.search.settings("evolution").latency_limit_ms is None
    models = {b.model for b in zoo.baselines if isinstance(b, ZooBaseline)}
    assert {"mobilenetv4_conv_small", "mobilenetv3_small_100", "mobilenetv3_large_100", "efficientnet_lite0",
            "mobilenet_v2", "resnet18", "resnet50"} <= models


def test_generation_matches_per_device():
    rows = [made_up_candidate(1, 1, final_test=90), made_up_candidate(2, 2, final_test=93),
            made_up_candidate(3, 3, test=95)]  # inherited only: not counted
    base = [made_up_baseline("z", 92, 5, "zoo", device_ms={"A": 5, "B": 1.5}),
            made_up_baseline("s", 80, 5, "subnet", device_ms={"A": 5, "B": 5})]
    latency = {"A": {1: 1.0, 2: 2.0, 3: 0.1}, "B": {1: 1.0, 2: 4.0}}
    a, b = generation_matches(rows, base, "top1", latency, ["A", "B"])
    assert (a.device, a.fastest, a.fps_ratio, a.best, a.gain) == ("A", (2, 93.0, 2.0), 2.5, (2, 93.0, 2.0), 1.0)
    assert (b.fastest, b.best, b.gain) == ((2, 93.0, 4.0), (1, 90.0, 1.0), -2.0)  # slower there: no fps win


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory):
    """Two tiny runs sharing one cache: the first trains the zoo network in a worker process, the second reads
    it from the cache."""
    folder = tmp_path_factory.mktemp("zoo")
    root, level = logging.getLogger(), logging.getLogger().level
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder / "cache"))
        root.setLevel(logging.INFO)
        try:
            assert main(["search", SMOKE, *TINY, ZOO, "baseline_workers=1", "--out", str(folder / "first"),
                         "--no-progress"]) == 0
            assert main(["search", SMOKE, *TINY, ZOO, "--out", str(folder / "second"), "--no-progress"]) == 0
        finally:
            root.setLevel(level)
    return RunDir(folder / "first"), RunDir(folder / "second"), folder / "cache"


def test_a_zoo_baseline_trains_as_long_as_the_finalised_archs(zoo_runs):
    first, _, _ = zoo_runs
    row = read_csv(first.baselines)[0]
    config = load_config(first.config)
    epochs = matched_epochs(config)[0]
    steps = round(epochs * 512 // 32)
    assert row["type"] == "zoo" and float(row["epochs"]) == epochs == 0.5
    assert f"trained from scratch ({steps} steps, the run's recipe for 0.5 epochs, as long as the longest-trained " \
           "finalised arch: 0.25 supernet + 0.25 finalisation epochs)" in row["note"]
    assert "timm mobilenetv3_small_050, 1 input channels" in row["note"]
    assert all(float(row[f"{d}_ms"]) > 0 for d in ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0"))
    assert row["VPU_2_7_ms"] == row["latency_ms"]  # the run's own cost model is VPU 2.7's
    assert "baseline-worker-0" in first.log.read_text() and "baselines[mnv3]: trained" in first.log.read_text()


def test_a_second_run_trains_no_zoo_network(zoo_runs):
    first, second, cache = zoo_runs
    assert len(list(cache.glob("zoo-mobilenetv3_small_050-*.pt"))) == 1
    assert second.baselines.read_text() == first.baselines.read_text()
    assert not list(second.checkpoint_dir.glob("baseline_*.pt"))
    assert "baselines[mnv3]: trained weights and scores from the cache" in second.log.read_text()


def test_the_report_compares_the_zoo_per_npu_generation(zoo_runs):
    first, _, _ = zoo_runs
    page = first.report_html.read_text()
    assert "Against the trained baselines, per NPU generation" in page
    for device in ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0"):
        assert f"<td>mnv3</td><td>{device}</td>" in page
    assert "trained baselines 0.5 epochs from scratch" in page
    log = first.log.read_text()
    assert "finalised archs against the trained baselines, per NPU generation" in log and "| mnv3 | NPU_5_0 |" in log


def _measured(config, **changes) -> dict:
    """A `measured:` mapping of the zoo's figures at `config`'s recipe for its zoo baselines (`changes` over it)."""
    recipe = {"epochs": matched_epochs(config)[0], "batch_size": config.task.batch_size, "opt": config.train.opt,
              "lr": config.train.lr, "weight_decay": config.train.weight_decay, "seed": config.seed}
    return {"test": 88.5, "val": 87.25, "machine": "1x NVIDIA H200 (a user's box)", "date": "2026-12-04",
            "recipe": {**recipe, **changes}}


def test_figures_measured_at_another_recipe_are_refused_at_config_load():
    config = load_config(SMOKE, TINY)
    measured = _measured(config, lr=config.train.lr * 2, warmup_epochs=config.train.warmup_epochs)
    entry = "baselines=" + json.dumps([{"name": "mnv3", "type": "zoo", "model": "mobilenetv3_small_050",
                                        "measured": measured}])
    with pytest.raises(ConfigError, match=rf"^baselines\[mnv3\]\.measured\.recipe\.lr: the figures were measured at "
                                          rf"{config.train.lr * 2}, this run's recipe has {config.train.lr}; "):
        load_config(SMOKE, [*TINY, entry])
    for changes, message in [({"bogus": 1}, r"recipe\.bogus: not a setting of the run's recipe"),
                             ({"label_smoothing": 0.3}, r"recipe\.label_smoothing: the figures were measured at 0\.3"),
                             ({"seed": 7}, r"recipe\.seed: the figures were measured at 7, this run's recipe has 0")]:
        entry = "baselines=" + json.dumps([{"name": "z", "type": "zoo", "model": "resnet18",
                                            "measured": _measured(config, **changes)}])
        with pytest.raises(ConfigError, match=message):
            load_config(SMOKE, [*TINY, entry])
    train_steps = "baselines=" + json.dumps([{"name": "z", "type": "zoo", "model": "resnet18", "train_steps": 5,
                                              "measured": _measured(config)}])
    with pytest.raises(ConfigError, match=r"baselines\[z\]\.train_steps: a measured network trains nothing here"):
        load_config(SMOKE, [*TINY, train_steps])
    assert load_config(CONFIGS / "fmnist_zoo_measured.yaml").baselines[2].measured["test"] == 93.22


def test_a_zoo_network_measured_elsewhere_is_costed_not_trained(tmp_path, monkeypatch):
    """A tiny run with a zoo entry measured elsewhere at its recipe: nothing trains it (no checkpoint, nothing
    cached), baselines.csv holds its figures, its latency on every NPU generation and where the figures come from,
    and the report's headline and baseline table say so."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    measured = _measured(load_config(SMOKE, TINY))
    entry = "baselines=" + json.dumps([{"name": "mnv3", "type": "zoo", "model": "mobilenetv3_small_050",
                                        "measured": measured}])
    assert main(["search", SMOKE, *TINY, entry, "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    run = RunDir(tmp_path / "run")
    [row] = read_csv(run.baselines)
    assert (row["type"], row["top1"], row["test_top1"], float(row["epochs"])) == ("zoo", "87.25", "88.5", 0.5)
    assert all(float(row[f"{d}_ms"]) > 0 for d in ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0"))
    provenance = (f"measured on 1x NVIDIA H200 (a user's box), 2026-12-04 (epochs 0.5, batch_size 32, opt "
                  f"{measured['recipe']['opt']}, lr {measured['recipe']['lr']}")
    assert row["scores_from"].startswith(provenance) and "not trained in this run" in row["note"]
    assert not list(run.checkpoint_dir.glob("baseline_*.pt")) and not (tmp_path / "cache").exists()
    page = run.report_html.read_text()
    assert f"<i>(figures {provenance}".replace("'", "&#x27;") in page  # the headline's line for it
    assert '<th title="sort">scores_from</th>' in page and "(mnv3: figures measured elsewhere, see scores_from)" in page


def test_zoo_check_needs_a_task_it_fits(tmp_path):
    ctx = build_context(load_config(CONFIGS / "sr_edsr_x2_smoke.yaml", ["baselines=[]"]), RunDir(tmp_path / "r"),
                        torch.device("cpu"), progress=False)
    check = BASELINE_TYPES["zoo"][0]
    with pytest.raises(ConfigError, match=r"baselines\[z\]\.model: unknown super-resolution network 'resnet18'"):
        check(ctx, ZooBaseline(name="z", model="resnet18"))
    with pytest.raises(ConfigError, match=r"baselines\[z\]\.source: super-resolution networks are built in vpunas"):
        check(ctx, ZooBaseline(name="z", model="espcn", source="timm"))
