import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hw_cost import CostModelError, CostModelSpec
from nas.baseline_entries import ZooBaseline
from nas.config import ConfigError, load_config
from conftest import CONFIGS, REPO


def write(tmp_path, data) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_shipped_configs_load():
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path)
        assert config.name and config.train.epochs > 0


def test_relative_paths_resolve_against_the_config_folder(tmp_path):
    config = load_config(write(tmp_path, {"cost": {"model": "lut:tables/t.json"}, "task": {"root": "data"}}))
    assert config.cost.model == f"lut:{tmp_path / 'tables' / 't.json'}"
    assert config.cost.spec == CostModelSpec("lut", str(tmp_path / "tables" / "t.json"))
    assert config.task.root == str(tmp_path / "data")


def test_a_cost_model_spec_is_read_once_into_kind_and_argument():
    spec = CostModelSpec.parse("vpunn:VPU_2_7.fast")
    assert (spec.kind, spec.argument, str(spec)) == ("vpunn", "VPU_2_7.fast", "vpunn:VPU_2_7.fast")
    assert CostModelSpec.parse("lut:C:/tables/t.json").argument == "C:/tables/t.json"  # split at the first colon
    assert load_config(CONFIGS / "fmnist_mobilenet.yaml").cost.spec == CostModelSpec("vpunn", "VPU_2_7")
    for text in ("oracle:x", "vpunn", "vpunn:", ":VPU_2_7", ""):
        with pytest.raises(CostModelError, match=r"^unknown cost model .*; expected one of: lut:\.\.\., vpunn:"):
            CostModelSpec.parse(text)


@pytest.mark.parametrize("model", ["oracle", "vpunn:", "nnmeter:cortexA76"])
def test_a_bad_cost_model_spec_is_one_line_naming_the_key(tmp_path, model):
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, {"cost": {"model": model}}))
    assert str(error.value).startswith(f"cost.model: unknown cost model {model!r}; expected one of: lut:..., vpunn:")
    assert "\n" not in str(error.value)


def test_overrides_apply_and_are_typed(tmp_path):
    config = load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["train.epochs=2", "search.evolution.population=6",
                                                                    "cost.model=vpunn:VPU_2_0"])
    assert config.train.epochs == 2 and config.search.settings("evolution").population == 6
    assert config.cost.model == "vpunn:VPU_2_0"
    config = load_config(CONFIGS / "fmnist_mobilenet.yaml", ["space.stages.0.expand_ratios=[1, 3]",
                                                             "space.stages.3.depths=[2]"])
    assert config.space.stages[0].expand_ratios == [1, 3] and config.space.stages[3].depths == [2]
    default = load_config(CONFIGS / "fmnist_mobilenet.yaml")
    assert config.space.stages[1].expand_ratios == default.space.stages[1].expand_ratios
    for item, message in [("space.stages.9.depths=[1]", "9 is not an index of a list of 4"),
                          ("space.stages.x.depths=[1]", "x is not an index"),
                          ("space.stem_width.a=1", "stem_width is not a section")]:
        with pytest.raises(ConfigError, match=message):
            load_config(CONFIGS / "fmnist_mobilenet.yaml", [item])


@pytest.mark.parametrize("data, message", [
    ({"train": {"epochz": 3}}, r"train: unknown key 'epochz' \(valid: epochs"),
    ({"train": {"epochs": "many"}}, r"train.epochs: Value 'many'"),
    ({"space": {"type": "mobilenet", "stages": [{"width": 8, "strid": 1}]}}, r"space: unknown key 'strid'"),
    ({"space": {"type": "transformer"}}, r"space.type: unknown 'transformer'; valid: .*mobilenet"),
    ({"search": {"strategy": "annealing"}}, r"search.strategy: unknown 'annealing'"),
    ({"search": {"population": 8}}, r"search: unknown key 'population' .*search.evolution.population"),
    ({"search": {"evolution": {"population": 2}}}, r"search.evolution.population: must be >= 4"),
    ({"search": {"finalize": {"init": "zeros"}}}, r"search.finalize.init: 'zeros' is not one of"),
    ({"train": {"grad_clip": -1.0}}, r"train.grad_clip: must be >= 0$"),
    ({"train": {"epochs": 0}}, r"train.epochs: must be > 0$"),
    ({"search": {"finalize": {"kd_ratio": -0.5}}}, r"search.finalize.kd_ratio: must be >= 0$"),
    ({"search": {"finalize": {"screen_archs": -1}}}, r"search.finalize.screen_archs: must be >= 0$"),
    ({"search": {"differentiable": {"tau_end": 0.0}}}, r"search.differentiable.tau_end: must be > 0$"),
    ({"search": {"differentiable": {"beta": float("nan")}}}, r"search.differentiable.beta: must be >= 0$"),
    ({"search": {"random": {"pool": 0}}}, r"search.random.pool: must be >= 1$"),
    ({"train": {"checkpoint_every": 0}}, r"train.checkpoint_every: must be >= 1$"),
    ({"probe": {"resamples": 50}}, r"probe.resamples: must be >= 100$"),
    ({"cost": {"correction_archs": 2}}, r"cost.correction_archs: must be >= 3$"),
    ({"task": {"type": "classification", "dataset": 3}}, r"task.dataset"),
    ({"colour": "blue"}, r"config: unknown key 'colour'"),
    ({"task": [1, 2]}, r"task: expected a mapping"),
    ({"baselines": [{"arch": "largest"}]}, r"baselines: .* each with a name"),
    ("a: [1, 2", r"not valid YAML"),
])
def test_malformed_configs_name_the_key(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, data))


@pytest.mark.parametrize("entry, message", [
    ({"name": "b", "type": "teacher"},
     r"baselines\[b\]\.type: unknown 'teacher'; valid: subnet, standalone, bicubic, reference, zoo$"),
    ({"name": "b", "type": "standalone", "arch": "largest", "colour": 1},
     r"baselines\[b\]: unknown keys \['colour'\] \(valid: arch, epochs, name, train_steps, type\)$"),
    ({"name": "b", "type": "standalone"}, r"baselines\[b\]\.arch: a standalone baseline needs an arch"),
    ({"name": "z", "type": "zoo", "model": "resnet18", "kwargs": [1]}, r"baselines\[z\]\.kwargs: expected a mapping"),
    ({"name": "z", "type": "zoo"}, r"baselines\[z\]\.model: a zoo baseline names its model"),
    ({"name": "r", "type": "reference", "network": "resnet18", "epochs": 1, "train_steps": 5},
     r"baselines\[r\]: give epochs or train_steps, not both$"),
    ({"name": "r", "type": "reference", "network": "resnet18", "epochs": True},
     r"baselines\[r\]\.epochs: expected a number > 0, got True$"),
])
def test_a_bad_baseline_entry_fails_the_load_in_one_line(entry, message):
    """What an entry says on its own is checked when the config loads, not when the run starts."""
    with pytest.raises(ConfigError, match=message) as failure:
        load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["baselines=" + json.dumps([entry])])
    assert "\n" not in str(failure.value)


def test_baseline_names_are_unique_when_the_config_loads():
    with pytest.raises(ConfigError, match="baselines: names must be unique; repeated: b$"):
        load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml", ["baselines=[{name: b}, {name: b, arch: smallest}]"])


def test_baselines_are_typed_entries_written_back_as_given():
    """Each entry is the dataclass of its type; the run's config.yaml records it as the config wrote it (a `type`
    left out stays out, the keys keep their order)."""
    path = CONFIGS / "sr_edsr_x2_smoke.yaml"
    config = load_config(path)
    assert [(type(b).__name__, b.name) for b in config.baselines] == [
        ("BicubicBaseline", "bicubic"), ("StandaloneBaseline", "EDSR-baseline"), ("ZooBaseline", "ESPCN"),
        ("StandaloneBaseline", "smallest-standalone"), ("SubnetBaseline", "largest")]
    assert config.baselines[3].train_steps == 30 and config.baselines[3].epochs is None
    assert config.baselines[4].arch == "largest" and config.baselines[2].source is None
    written = yaml.safe_load(path.read_text())["baselines"]
    assert config.to_dict()["baselines"] == written
    assert [list(b) for b in config.to_dict()["baselines"]] == [list(b) for b in written]
    # an entry made in code writes its name, its type and what is not a default
    assert ZooBaseline(name="z", model="espcn").to_dict() == {"name": "z", "type": "zoo", "model": "espcn"}


def test_run_config_sections_are_typed():
    """The resolved sections are instances of the types RunConfig names (the task's config satisfies the
    `TaskConfig` protocol)."""
    from nas.strategies import SearchConfig
    from nas.training.supernet_training import TrainConfig
    from tasks import TaskConfig

    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path)
        assert isinstance(config.task, TaskConfig) and isinstance(config.train, TrainConfig)
        assert isinstance(config.search, SearchConfig) and isinstance(config.space.type, str)


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


def test_cli_error_has_no_traceback_in_a_real_process(tmp_path):
    bad = write(tmp_path, {"train": {"epochs": -1, "optimiser": "sgd"}})
    proc = subprocess.run([sys.executable, "-m", "nas.cli", "search", str(bad)], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "vpunas: error: train: unknown key 'optimiser' (valid: epochs, opt, lr, momentum, " \
                                  "weight_decay, sched, warmup_epochs, min_lr, sandwich_random, sandwich_fixed, " \
                                  "sandwich_window, sandwich_top_mmacs, sandwich_bins, distill, ema_decay, " \
                                  "grad_clip, channels_last, cuda_graphs, checkpoint_every)"
