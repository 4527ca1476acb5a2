import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nas.cli import main
from nas.config import ConfigError, load_config
from conftest import CONFIGS, REPO


def write(tmp_path, data) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_shipped_configs_load():
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path)
        assert config.name and config.train.epochs >= 1


def test_relative_paths_resolve_against_the_config_folder(tmp_path):
    config = load_config(write(tmp_path, {"cost": {"model": "lut:tables/t.json"}, "task": {"root": "data"}}))
    assert config.cost.model == f"lut:{tmp_path / 'tables' / 't.json'}"
    assert config.task.root == str(tmp_path / "data")


def test_overrides_apply_and_are_typed(tmp_path):
    config = load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["train.epochs=2", "search.evolution.population=6",
                                                                    "cost.model=vpunn:VPU_2_0"])
    assert config.train.epochs == 2 and config.search.evolution.population == 6 and config.cost.model == "vpunn:VPU_2_0"


@pytest.mark.parametrize("data, message", [
    ({"train": {"epochz": 3}}, r"train: unknown key 'epochz' \(valid: epochs"),
    ({"train": {"epochs": "many"}}, r"train.epochs: Value 'many'"),
    ({"space": {"type": "mobilenet", "stages": [{"width": 8, "strid": 1}]}}, r"space: unknown key 'strid'"),
    ({"space": {"type": "transformer"}}, r"space.type: unknown 'transformer'; valid: .*mobilenet"),
    ({"search": {"strategy": "annealing"}}, r"search.strategy: unknown 'annealing'"),
    ({"search": {"population": 8}}, r"search: unknown key 'population' .*search.evolution.population"),
    ({"search": {"evolution": {"population": 2}}}, r"search.evolution.population: must be >= 4"),
    ({"search": {"finalize": {"init": "zeros"}}}, r"search.finalize.init: 'zeros' is not one of"),
    ({"task": {"type": "classification", "dataset": 3}}, r"task.dataset"),
    ({"colour": "blue"}, r"config: unknown key 'colour'"),
    ({"task": [1, 2]}, r"task: expected a mapping"),
    ({"baselines": [{"arch": "largest"}]}, r"baselines: .* each with a name"),
    ("a: [1, 2", r"not valid YAML"),
])
def test_malformed_configs_name_the_key(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, data))


def test_one_override_switches_the_strategy():
    """Every strategy's settings live in their own sub-section, so the other strategy's keys do not get in the way."""
    for config_file in ("fmnist_mobilenet_smoke.yaml", "fmnist_mobilenet_dnas.yaml"):
        for strategy in ("evolution", "differentiable"):
            config = load_config(CONFIGS / config_file, [f"search.strategy={strategy}"])
            assert config.search.strategy == strategy
            assert load_config(CONFIGS / config_file).search.finalize == config.search.finalize


def test_bad_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["train.epochs"])
    with pytest.raises(ConfigError, match="train: unknown key 'epochs2'"):
        load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["train.epochs2=1"])
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("args, message", [
    (["search", "missing.yaml"], "config file missing.yaml not found"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "train.lr=fast"], "train.lr"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "cost.model=lut:/nonexistent/t.json"],
     "latency table /nonexistent/t.json not found"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "task.root=/nonexistent"], "apt-get install"),
    (["report", "/nonexistent/run"], "not found"),
    (["cost", "mobilenet_v2", "--cost", f"lut:{CONFIGS / 'luts' / 'fmnist_mobilenet_openvino_cpu.json'}"],
     "a latency table holds the blocks of a search space"),
    # baseline mistakes fail before any training, not after the search
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "baselines=[{name: b, arch: {depth: [9, 9, 9]}}]"],
     "baselines[b].arch"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "baselines=[{name: b, type: bicubic}]"],
     "needs a super-resolution task"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "baselines=[{name: b, type: teacher}]"],
     "baselines[b].type: unknown 'teacher'"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "baselines=[{name: b, type: standalone, colour: 1}]"],
     "baselines[b]: unknown keys ['colour']"),
    (["search", str(CONFIGS / "fmnist_mobilenet_smoke.yaml"), "baselines=[{name: b}, {name: b, arch: smallest}]"],
     "names must be unique; repeated: b"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, capsys, tmp_path):
    code = main(args + ["--out", str(tmp_path / "run")] if args[0] == "search" else args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("vpunas: error:") and message in err[0]
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_cli_error_has_no_traceback_in_a_real_process(tmp_path):
    bad = write(tmp_path, {"train": {"epochs": -1, "optimiser": "sgd"}})
    proc = subprocess.run([sys.executable, "-m", "nas.cli", "search", str(bad)], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "vpunas: error: train: unknown key 'optimiser' (valid: epochs, opt, lr, momentum, " \
                                  "weight_decay, sched, warmup_epochs, min_lr, sandwich_random, distill, ema_decay, " \
                                  "grad_clip, channels_last, checkpoint_every)"
