"""Reference baselines (`type: reference`): torchvision's MobileNetV2 and ResNets adapted to the task's input,
trained with the run's recipe, scored, costed by VPUNN, and cached across runs.

The runs train a MobileNetV2-0.35 only: scoring a ResNet-18 on the 10000 test images takes about two minutes of
this project's 2-core CI machine; the ResNets are built, shaped, counted and costed here without training."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from conftest import EVOLVE_ONE_GENERATION, NO_FINALIZATION, REPO, SCORE_ON_200, SMOKE, TRAIN_ON_512
from nas.baselines.cache import CACHE_ENV, BaselineCache, cache_dir
from nas.baseline_entries import read_baselines
from nas.records import read_baseline_results
from nas.baselines import BASELINE_TYPES
from nas.cli import main
from nas.config import ConfigError, load_config
from hw_cost import complexity
from nas.baselines.reference_networks import reference_block, reference_network
from nas.reporting.report import reference_label
from nas.rundir import RunDir, read_csv
from nas.context import build_context

#: a smoke search cut to a sliver: a few supernet steps, one generation, no finalisation, VPUNN latencies
TINY = [*TRAIN_ON_512, *SCORE_ON_200, "train.epochs=0.5", *EVOLVE_ONE_GENERATION, *NO_FINALIZATION,
        "cost.model=vpunn:VPU_2_7"]
MNV2 = {"name": "mnv2", "type": "reference", "network": "mobilenet_v2", "width": 0.35, "train_steps": 6}
REFERENCES = "baselines=" + json.dumps([MNV2])


def _folded_params(net: nn.Module) -> int:
    """Parameters of the deployed network: torch's count less one of the two per-channel vectors of each batch
    norm (folded into its convolution's bias)."""
    return (sum(p.numel() for p in net.parameters())
            - sum(m.num_features for m in net.modules() if isinstance(m, nn.BatchNorm2d)))


def _last_map(net: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """Side of the last feature map before global pooling."""
    seen = []
    last = net.features if hasattr(net, "features") else net.layer4
    last.register_forward_hook(lambda m, i, out: seen.append(tuple(out.shape[-2:])))
    net(x)
    return seen[0]


@pytest.mark.parametrize("network, width", [("mobilenet_v2", 0.35), ("mobilenet_v2", 1.4), ("resnet18", None),
                                            ("resnet50", None)])
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_adapted_networks_end_on_a_4x4_map(network, width, shape):
    import torchvision

    torch.manual_seed(0)
    net = reference_network(network, shape, 10, width).eval()
    with torch.no_grad():
        assert net(torch.randn(2, *shape)).shape == (2, 10)
        assert _last_map(net, torch.randn(1, *shape)) == (4, 4)
    # torchvision's network but for the stem's input channels (and a 3x3 stem for the ResNets)
    plain = (torchvision.models.MobileNetV2(num_classes=10, width_mult=width) if width else
             getattr(torchvision.models, network)(num_classes=10))
    stem = plain.features[0][0] if width else plain.conv1
    adapted_stem = stem.out_channels * shape[0] * (9 if width or shape[1] <= 64 else 49)
    assert (sum(p.numel() for p in net.parameters()) ==
            sum(p.numel() for p in plain.parameters()) - stem.weight.numel() + adapted_stem)


def test_large_rgb_input_is_torchvisions_network():
    import torchvision

    net = reference_network("resnet18", (3, 224, 224), 10)
    plain = torchvision.models.resnet18(num_classes=10)
    assert [tuple(p.shape) for p in net.parameters()] == [tuple(p.shape) for p in plain.parameters()]
    assert net.conv1.stride == (2, 2) and isinstance(net.maxpool, nn.MaxPool2d)


@pytest.mark.parametrize("network, width", [("mobilenet_v2", 0.35), ("resnet18", None)])
def test_vpunn_costs_the_network_as_one_block(network, width):
    from hw_cost import load_cost_model

    block = reference_block(network, (1, 28, 28), 10, width)
    params, macs = complexity([block])
    assert params == _folded_params(reference_network(network, (1, 28, 28), 10, width)) and macs > params
    latency = load_cost_model("vpunn:VPU_2_7").latency_ms([block])
    assert 0 < latency < 100


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny runs with the same recipe sharing one cache folder: the first trains the references, the second
    reads them from the cache."""
    folder = tmp_path_factory.mktemp("reference")
    root, level = logging.getLogger(), logging.getLogger().level
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder / "cache"))
        root.setLevel(logging.INFO)  # the cache's log lines go to run.log
        try:
            for name in ("first", "second"):
                assert main(["search", SMOKE, *TINY, REFERENCES, "--out", str(folder / name), "--no-progress"]) == 0
        finally:
            root.setLevel(level)
    return RunDir(folder / "first"), RunDir(folder / "second"), folder / "cache"


def test_reference_rows_are_trained_scored_and_costed(runs):
    first, _, _ = runs
    rows = {r["name"]: r for r in read_csv(first.baselines)}
    assert list(rows) == ["mnv2"]
    row = rows["mnv2"]
    assert 0 < float(row["top1"]) <= 100 and 0 < float(row["test_top1"]) <= 100
    assert float(row["latency_ms"]) > 0 and row["cost_model"] == "vpunn:VPU_2_7"
    net = reference_network("mobilenet_v2", (1, 28, 28), 10, 0.35)
    assert int(row["params"]) == _folded_params(net) and int(row["macs"]) > 0
    assert "trained from scratch (6 steps" in row["note"] and "total stride 8" in row["note"]
    assert (first.checkpoint_dir / "baseline_mnv2.pt").exists()
    assert json.loads(row["arch"]) == {"network": "mobilenet_v2", "width": 0.35}
    assert [reference_label(b) for b in read_baseline_results(first.baselines)] == ["MobileNetV2-0.35"]


def test_a_second_run_reads_the_cache(runs):
    first, second, cache = runs
    assert len(list(cache.glob("mobilenet_v2-*.pt"))) == 1
    assert second.baselines.read_text() == first.baselines.read_text()
    assert not list(second.checkpoint_dir.glob("baseline_*.pt"))  # nothing trained
    log = second.log.read_text()
    assert "baselines[mnv2]: trained weights and scores from the cache" in log
    assert "baselines[mnv2]: trained 6 steps; cached in" in first.log.read_text() and "cached in" not in log


def test_report_and_paper_table_name_the_references(runs, capsys):
    first, _, _ = runs
    page = first.report_html.read_text()
    assert "Searched: " in page and "mnv2 (MobileNetV2-0.35)" in page
    spec = importlib.util.spec_from_file_location("paper_table", REPO / "scripts" / "paper_table.py")
    paper_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paper_table)
    assert paper_table.main([str(first.path)]) == 0
    out = capsys.readouterr().out
    assert "| mnv2 (MobileNetV2-0.35) |" in out
    sentence = next(line for line in out.splitlines() if line.startswith("Searched: "))
    assert re.fullmatch(r"Searched: (\d+\.\dx fps over MobileNetV2-0\.35 at equal accuracy|no searched arch reaches "
                        r"MobileNetV2-0\.35)\.", sentence), sentence


def test_a_damaged_cache_entry_is_trained_again(runs, tmp_path, monkeypatch, caplog):
    first, _, cache = runs
    monkeypatch.setenv(CACHE_ENV, str(cache))
    ctx = build_context(load_config(SMOKE, [*TINY, REFERENCES]), RunDir(tmp_path / "run"), torch.device("cpu"),
                        progress=False)
    key_path = next(p for p in cache.glob("mobilenet_v2-*.pt"))
    key_path.write_bytes(key_path.read_bytes()[:2000])
    with caplog.at_level(logging.INFO):
        result, _ = BASELINE_TYPES["reference"][1](ctx, None, ctx.config.baselines[0])
    assert "baseline cache" in caplog.text and "damaged" in caplog.text and "cached in" in caplog.text
    assert (tmp_path / "run" / "checkpoint" / "baseline_mnv2.pt").exists()
    before = next(r for r in read_csv(first.baselines) if r["name"] == "mnv2")
    assert (result.score, result.test_figure) == (float(before["top1"]), float(before["test_top1"]))  # same training
    assert torch.load(key_path, weights_only=True)["steps"] == 6  # the entry is whole again


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and BaselineCache().folder == tmp_path / "c"
    monkeypatch.setenv(CACHE_ENV, " ")  # blank: the default, under the HOME conftest made private to the session
    assert cache_dir() == Path(os.environ["HOME"]) / ".cache" / "vpunas" / "baselines"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return build_context(load_config(SMOKE, [*TINY, "baselines=[]"]), RunDir(tmp_path_factory.mktemp("ctx")),
                         torch.device("cpu"), progress=False)


@pytest.mark.parametrize("spec, message, on_its_own", [
    ({"network": "vgg16"}, r"baselines\[r\]\.network: unknown 'vgg16'; valid: mobilenet_v2, resnet18", False),
    ({}, r"baselines\[r\]\.network: a reference baseline names its network", True),
    ({"network": "mobilenet_v2", "width": 0}, r"baselines\[r\]\.width: expected a width multiplier in \(0, 4\]",
     False),
    ({"network": "mobilenet_v2", "width": "wide"}, r"baselines\[r\]\.width: expected a width multiplier", False),
    ({"network": "resnet50", "width": 0.5}, r"baselines\[r\]\.width: applies to mobilenet_v2 only", False),
    ({"network": "resnet18", "epochs": 1, "train_steps": 5}, r"baselines\[r\]: give epochs or train_steps", True),
    ({"network": "resnet18", "train_steps": 0}, r"baselines\[r\]\.train_steps: expected a whole number >= 1", True),
    ({"network": "resnet18", "epochs": -1}, r"baselines\[r\]\.epochs: expected a number > 0", True),
    ({"network": "resnet18", "arch": "largest"}, r"baselines\[r\]: unknown keys \['arch'\]", True),
])
def test_reference_config_errors_name_the_field(ctx, spec, message, on_its_own):
    """A mistake in the entry alone fails when the config loads (`read_baselines`); one that needs the network
    fails the check against the run, before any training."""
    raw = [{"name": "r", "type": "reference", **spec}]
    if on_its_own:
        with pytest.raises(ConfigError, match=message):
            read_baselines(raw)
        return
    with pytest.raises(ConfigError, match=message):
        BASELINE_TYPES["reference"][0](ctx, read_baselines(raw)[0])
