import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.nn as nn

from hw_cost import Block, CostModelError, LayerSpec, load_cost_model
from hw_cost.lut import FORMAT_VERSION, LatencyTable, LutCostModel, collect_latency_table
from hw_cost.layers import module_for_layer
from hw_cost.profiler import MeasureSettings
from conftest import CONFIGS
from nas.config import load_config


def conv_block(channels):
    return Block(f"conv|c{channels}", (1, 8, 16, 16), lambda: nn.Sequential(nn.Conv2d(8, channels, 3, padding=1),
                                                                            nn.ReLU()))


def test_collect_measures_each_block_once_and_resumes(tmp_path):
    settings = MeasureSettings(threads=1, warmup=2, repeats=10)
    saved = []
    blocks = [conv_block(8), conv_block(64), conv_block(8)]
    table = collect_latency_table(blocks, (1, 8, 16, 16), settings, on_entry=lambda t: saved.append(len(t.entries)),
                                  progress=False)
    assert sorted(table.entries) == ["conv|c64", "conv|c8"] and saved == [1, 2]
    meta = table.metadata
    assert meta["runtime"] == "openvino" and meta["device"] == "CPU" and meta["threads"] == 1
    assert meta["repeats"] == 10 and meta["precision"] == "f32" and meta["date"] and meta["runtime_version"]
    assert meta["inference_overhead_ms"] > 0
    for entry in table.entries.values():
        # a block's entry is its own time less the fixed cost of an inference, measured beside it (6 decimals)
        assert entry["median_ms"] == pytest.approx(max(entry["raw_median_ms"] - entry["overhead_ms"], 0), abs=2e-6)
        assert entry["repeats"] == 10 and entry["p10_ms"] <= entry["raw_median_ms"] <= entry["p90_ms"]
        assert entry["overhead_ms"] > 0
    # resuming a complete table measures nothing more
    again = collect_latency_table(blocks, (1, 8, 16, 16), settings, table=table,
                                  on_entry=lambda t: pytest.fail("re-measured"), progress=False)
    assert again.entries == table.entries
    with pytest.raises(CostModelError, match="other settings.*'threads': 1"):
        collect_latency_table(blocks, (1, 8, 16, 16), MeasureSettings(threads=2, warmup=2, repeats=10), table=table)
    # nor does a table measured on another machine take entries from this one
    table.metadata["host"] = "another-host"
    with pytest.raises(CostModelError, match="measured elsewhere.*another-host"):
        collect_latency_table(blocks + [conv_block(16)], (1, 8, 16, 16), settings, table=table)
    assert "conv|c16" not in table.entries and table.metadata["host"] == "another-host"


def test_lut_cost_model_sums_blocks_plus_overhead(tmp_path):
    table = LatencyTable({"a": {"median_ms": 0.5}, "b": {"median_ms": 0.25}}, {"inference_overhead_ms": 0.1})
    path = tmp_path / "t.json"
    path.write_text(table.to_json())
    model = load_cost_model(f"lut:{path}")
    blocks = [Block("a", (1, 1, 1, 1), nn.Identity), Block("b", (1, 1, 1, 1), nn.Identity)]
    assert model.block_latencies_ms(blocks).tolist() == [0.5, 0.25]
    assert model.latency_ms(blocks) == pytest.approx(0.85)
    assert model.name == "lut:t.json"
    with pytest.raises(CostModelError, match="no entry 'c'.*vpunas lut collect"):
        model.latency_ms([Block("c", (1, 1, 1, 1), nn.Identity)])


def test_missing_entries_measured_on_demand_when_asked():
    table = LatencyTable({}, {"inference_overhead_ms": 0.0, "device": "CPU", "precision": "f32", "threads": 1,
                              "warmup": 2, "repeats": 10})
    model = LutCostModel(table, measure_missing=True)
    latency = model.latency_ms([conv_block(16)])
    entry = table.entries["conv|c16"]  # measured on demand, then kept
    assert entry["raw_median_ms"] > 0 and entry["repeats"] == 10
    assert latency == pytest.approx(entry["median_ms"])  # the block's entry plus the table's 0 ms overhead


@pytest.mark.parametrize("content, message", [
    (None, "not found"), ("{", "not valid JSON"), ('{"entries": {}}', "not a vpunas LUT"),
    (json.dumps({"format": FORMAT_VERSION, "entries": {"a": {"mean": 1}}}), "no numeric median_ms"),
])
def test_bad_tables_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CostModelError, match=message):
        LatencyTable.load(path)


def test_unknown_cost_model_kind():
    with pytest.raises(CostModelError, match="expected one of: lut:..., vpunn:..."):
        load_cost_model("nnmeter:cortexA76")


def test_shipped_table_covers_the_space_of_its_configs():
    from nas.context import build_task_and_space

    config = load_config(CONFIGS / "fmnist_mobilenet_dnas.yaml")
    table = LatencyTable.load(config.cost.spec.argument)
    _, space = build_task_and_space(config)
    assert {b.key for b in space.all_blocks()} == set(table.entries)
    meta = table.metadata
    for key in ("device", "device_name", "runtime", "runtime_version", "precision", "threads", "date", "repeats",
                "inference_overhead_ms", "validation"):
        assert key in meta, key
    model = LutCostModel(table)
    lat = [model.latency_ms(space.blocks(a)) for a in (space.smallest(), space.largest())]
    assert lat[1] > 2 * lat[0]


@pytest.mark.parametrize("spec", [
    LayerSpec("conv", (1, 8, 8, 8), (1, 16, 4, 4), kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1),
              activation="relu"),
    LayerSpec("dwconv", (1, 8, 8, 8), (1, 8, 8, 8), kernel=(5, 5), padding=(2, 2, 2, 2), groups=8),
    LayerSpec("linear", (1, 32, 1, 1), (1, 10, 1, 1)),
    LayerSpec("add", (1, 8, 4, 4), (1, 8, 4, 4)),
    LayerSpec("global_avgpool", (1, 8, 4, 4), (1, 8, 1, 1)),
    LayerSpec("pixel_shuffle", (1, 16, 4, 4), (1, 4, 8, 8)),
    LayerSpec("maxpool", (1, 8, 8, 8), (1, 8, 4, 4), kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1)),
])
def test_module_for_layer_reproduces_the_layer(spec):
    from hw_cost import extract_layers

    import torch

    module = module_for_layer(spec)
    out = module(torch.zeros(spec.in_shape))
    assert tuple(out.reshape(spec.out_shape).shape) == spec.out_shape
    (again,) = [l for l in extract_layers(module, spec.in_shape) if l.op == spec.op]
    assert again.out_shape == spec.out_shape and again.kernel == spec.kernel and again.stride == spec.stride


def test_openvino_conversion_sends_no_telemetry(tmp_path):
    """OpenVINO's converter would post a usage event (forking the process) and write a client id under ~/intel;
    vpunas declines its telemetry, as a user's opt-out would."""
    code = ("import torch; from hw_cost.openvino_runtime import openvino; "
            "openvino().convert_model(torch.nn.ReLU(), example_input=torch.zeros(1, 4))")
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # telemetry stays off in CI by itself
    subprocess.run([sys.executable, "-c", code], env={**env, "HOME": str(tmp_path)}, check=True,
                   cwd=Path(__file__).resolve().parents[1], capture_output=True)
    assert list(tmp_path.iterdir()) == []
