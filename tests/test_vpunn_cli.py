"""`vpunas vpunn dpu|layer|dma` on the reference tables and `vpunas cost`, through the CLI handlers."""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import pytest

import hw_cost.vpunn.paths as vpaths
from hw_cost import CostModelError
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from nas.cli import cost_cli
from conftest import VPUNN_VECTORS

MODELS, VECTORS = SHIPPED_MODEL_DIR, VPUNN_VECTORS


def run(*argv: str) -> int:
    """Parse like the `vpunas` dispatcher and call the handler (errors propagate as CostModelError)."""
    parser = argparse.ArgumentParser(prog="vpunas")
    sub = parser.add_subparsers(dest="command", required=True)
    cost_cli.add_cost_parser(sub)
    cost_cli.add_vpunn_parser(sub)
    args = parser.parse_args(list(argv))
    return args.handler(args)


def read(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("device, model", [("VPU_2_7", "vpu_2_7.vpunn"), ("VPU_2_0", "vpu_2_0.fast.vpunn")])
def test_vpunn_dpu(tmp_path, device, model):
    out = tmp_path / "out.csv"
    assert run("vpunn", "dpu", model, str(VECTORS / "vpunn_dpu.csv"), "-o", str(out), "--device", device) == 0
    ref = [r for r in read(VECTORS / "vpunn_dpu.csv") if r["device"] == device]
    got = read(out)
    assert list(got[0]) == ["id", "cycles", "error", "rule"]
    assert [g["id"] for g in got] == [r["id"] for r in ref]
    column = "cycles_fast" if ".fast" in model else "cycles"
    assert [g["error"] for g in got] == [r["error_fast" if ".fast" in model else "error"] for r in ref]
    # a rule where the runtime's validation refused the workload, none where it costed it
    refused = {"ERROR_INVALID_INPUT_CONFIGURATION", "ERROR_INVALID_INPUT_DEVICE", "ERROR_INVALID_INPUT_OPERATION",
               "ERROR_INPUT_TOO_BIG"}
    assert any(g["error"] in refused for g in got)
    assert all(bool(g["rule"]) == (g["error"] in refused) for g in got)
    diff = np.array([abs(int(g["cycles"]) - int(r[column])) for g, r in zip(got, ref)])
    extrapolated = np.array([r["linear_extrapolated"] == "1" for r in ref])
    assert (diff[~extrapolated] <= np.maximum(1, 1e-5 * np.array([int(r[column]) for r in ref]))[~extrapolated]).all()
    assert (diff[extrapolated] <= 5).all()


def test_vpunn_dpu_mixed_devices_needs_a_filter(tmp_path):
    with pytest.raises(CostModelError, match="id=\\d+ \\(VPU_2_0\\).*interface 11.*--device"):
        run("vpunn", "dpu", "vpu_2_7.vpunn", str(VECTORS / "vpunn_dpu.csv"), "-o", str(tmp_path / "o.csv"))
    assert not (tmp_path / "o.csv").exists()


def test_vpunn_layer(tmp_path):
    out = tmp_path / "layers.csv"
    assert run("vpunn", "layer", str(MODELS / "vpu_2_7.vpunn"), str(VECTORS / "vpunn_layer.csv"), "-o", str(out),
               "--device", "VPU_2_7", "--details") == 0
    ref = [r for r in read(VECTORS / "vpunn_layer.csv") if r["device"] == "VPU_2_7"]
    got = read(out)
    assert list(got[0])[:4] == ["layer_id", "strategy", "cycles", "error"]
    assert [(g["layer_id"], g["strategy"], g["error"]) for g in got] == \
           [(r["layer_id"], r["strategy"], r["error"]) for r in ref]
    assert all(abs(int(g["cycles"]) - int(r["cycles"])) <= 1 for g, r in zip(got, ref))
    assert all(g["tile_exec_modes"] == r["tile_exec_modes"] for g, r in zip(got, ref))


def test_vpunn_layer_with_dma(tmp_path):
    ref = [r for r in read(VECTORS / "vpunn_layer.csv") if r["device"] == "VPU_2_7"][:40]
    src = write(tmp_path / "in.csv", ref)
    out = tmp_path / "out.csv"
    run("vpunn", "layer", "vpu_2_7.vpunn", str(src), "-o", str(out), "--no-prefetch", "--input-in-ddr",
        "--output-in-ddr", "--dma-model", "dma_2_7.vpunn")
    for g, r in zip(read(out), ref):
        if r["cycles_ddr_nn"]:
            assert abs(int(g["cycles"]) - int(float(r["cycles_ddr_nn"]))) <= 2


def test_vpunn_dma(tmp_path):
    out = tmp_path / "dma.csv"
    assert run("vpunn", "dma", "dma_2_7.vpunn", str(VECTORS / "vpunn_dma.csv"), "-o", str(out)) == 0
    ref = read(VECTORS / "vpunn_dma.csv")
    assert [(g["id"], int(g["cycles"]), g["error"]) for g in read(out)] == \
           [(r["id"], int(r["cycles"]), r["error"]) for r in ref]


@pytest.mark.parametrize("device, model", [("VPU_4_0", "dma_4_0.vpunn"), ("NPU_5_0", "dmann_5_0.vpunn")])
def test_vpunn_dma_npu45(tmp_path, device, model):
    out, table = tmp_path / "dma.csv", VECTORS / "npu45" / "npu45_dma.csv"
    assert run("vpunn", "dma", model, str(table), "-o", str(out), "--device", device) == 0
    ref = [r for r in read(table) if r["device"] == device]
    assert [(g["id"], int(g["cycles"]), g["error"]) for g in read(out)] == \
           [(r["id"], int(r["cycles"]), r["error"]) for r in ref]


def test_bad_tables_name_the_problem(tmp_path):
    rows = read(VECTORS / "vpunn_dpu.csv")[:3]
    no_col = write(tmp_path / "nocol.csv", [{k: v for k, v in r.items() if k != "k_w"} for r in rows])
    with pytest.raises(CostModelError, match="missing column 'k_w'"):
        run("vpunn", "dpu", "vpu_2_0.vpunn", str(no_col), "-o", str(tmp_path / "o.csv"))
    bad = [dict(r) for r in rows]
    bad[1]["execution_mode"] = "TURBO"
    with pytest.raises(CostModelError, match=f"row 3 \\(id={bad[1]['id']}\\): column 'execution_mode': bad value "
                                             "'TURBO'"):
        run("vpunn", "dpu", "vpu_2_0.vpunn", str(write(tmp_path / "bad.csv", bad)), "-o", str(tmp_path / "o.csv"))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(CostModelError, match="empty file"):
        run("vpunn", "dma", "dma_2_7.vpunn", str(empty), "-o", str(tmp_path / "o.csv"))
    layers = read(VECTORS / "vpunn_layer.csv")[:2]
    layers[0]["strategy"] = "SOX"
    with pytest.raises(CostModelError, match="layer_id=.*column strategy: unknown strategy 'SOX'.*AUTO_MIN"):
        run("vpunn", "layer", "vpu_2_7.vpunn", str(write(tmp_path / "l.csv", layers)), "-o", str(tmp_path / "o.csv"))
    with pytest.raises(CostModelError, match="input table not found"):
        run("vpunn", "dma", "dma_2_7.vpunn", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "o.csv"))
    assert not (tmp_path / "o.csv").exists()


def test_missing_model_files_say_where_to_get_them(tmp_path, monkeypatch):
    monkeypatch.delenv(vpaths.ENV_VAR, raising=False)
    monkeypatch.setattr(vpaths, "default_model_dir", lambda: None)
    with pytest.raises(CostModelError, match="no VPUNN model directory.*intel/npu-nn-cost-model, folder models/"):
        run("vpunn", "dma", "dma_2_7.vpunn", str(VECTORS / "vpunn_dma.csv"), "-o", str(tmp_path / "o.csv"))
    with pytest.raises(CostModelError, match="dma_9.vpunn not found"):
        run("vpunn", "dma", "dma_9.vpunn", str(VECTORS / "vpunn_dma.csv"), "-o", str(tmp_path / "o.csv"),
            "--model-dir", str(MODELS))
    wrong = tmp_path / "wrong.vpunn"
    wrong.write_bytes(b"\x00" * 64)
    with pytest.raises(CostModelError, match="not a VPUNN model file"):
        run("vpunn", "dma", str(wrong), str(VECTORS / "vpunn_dma.csv"), "-o", str(tmp_path / "o.csv"))


def test_cost_command(capsys):
    assert run("cost", "mobilenet_v2", "--cost", "vpunn:VPU_2_7", "--input", "1x3x96x96") == 0
    out = capsys.readouterr().out
    assert "features.0.0" in out and "global_avgpool" in out
    assert "mobilenet_v2 on vpunn:VPU_2_7 (uint8, input 1x3x96x96):" in out and " fps" in out


def test_cost_command_errors():
    with pytest.raises(CostModelError, match="unknown model 'mobilenet_v9'"):
        run("cost", "mobilenet_v9")
    with pytest.raises(CostModelError, match="--input '224x224': expected NxCxHxW"):
        run("cost", "resnet18", "--input", "224x224")
    with pytest.raises(CostModelError, match="unknown cost model"):
        run("cost", "resnet18", "--cost", "nope")


def test_dispatcher_prints_one_line(capsys, tmp_path):
    from nas import cli

    assert cli.main(["vpunn", "dma", "dma_2_7.vpunn", str(tmp_path / "none.csv"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vpunas: error: input table not found")


def _latencies(out: str) -> dict[str, float]:
    """{cost model: us} of `vpunas cost CONFIG ...`'s lines."""
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if line.endswith(" fps")}


def test_cost_an_arch_or_a_baseline_of_a_config(capsys, tmp_path):
    """An arch of a config's space (JSON, @FILE, largest) and a config's zoo baseline, costed on each generation
    as a run of the config costs them (the zoo network at the task's 28x28 input, stride-8 form)."""
    import json

    from hw_cost import load_cost_model
    from nas.baselines.zoo import zoo_block
    from nas.config import ConfigError, load_config
    from nas.context import build_task_and_space
    from conftest import CONFIGS

    config = CONFIGS / "fmnist_npu_zoo.yaml"
    _, space = build_task_and_space(load_config(config))
    arch = space.sample(np.random.default_rng(3))
    tmp_path.joinpath("arch.json").write_text(json.dumps(arch))
    devices = "VPU_2_0,VPU_4_0"
    figures = []
    for given in (json.dumps(arch), f"@{tmp_path / 'arch.json'}"):
        assert run("cost", str(config), "--arch", given, "--devices", devices) == 0
        figures.append(_latencies(capsys.readouterr().out))
    blocks = space.blocks(arch)
    assert figures[0] == figures[1] == {f"vpunn:{d}": round(load_cost_model(f"vpunn:{d}").latency_ms(blocks) * 1e3, 1)
                                        for d in devices.split(",")}
    assert run("cost", str(config), "--arch", "largest") == 0  # on the config's own cost model
    largest = _latencies(capsys.readouterr().out)["vpunn:VPU_2_7"]
    assert largest == round(load_cost_model("vpunn:VPU_2_7").latency_ms(space.blocks(space.largest())) * 1e3, 1)

    assert run("cost", str(config), "--baseline", "MobileNetV2-1.4") == 0
    out = capsys.readouterr().out
    block = zoo_block("mobilenet_v2", (1, 28, 28), 10, source="torchvision", kwargs={"width_mult": 1.4})
    assert out.startswith("MobileNetV2-1.4 (input 1x1x28x28): 141.3 M MACs")
    assert _latencies(out)["vpunn:VPU_2_7"] == round(load_cost_model("vpunn:VPU_2_7").latency_ms([block]) * 1e3, 1)

    with pytest.raises(ConfigError, match=r"not a baseline of .* \(its baselines: largest, smallest, MobileNetV4"):
        run("cost", str(config), "--baseline", "MobileNetV9")
    with pytest.raises(ConfigError, match="--arch: not an arch as JSON"):
        run("cost", str(config), "--arch", "{stem: 3")
    with pytest.raises(ConfigError, match="--arch: arch keys must be"):
        run("cost", str(config), "--arch", '{"stem": 16}')
    with pytest.raises(ConfigError, match="name what to cost in the config, --arch or --baseline"):
        run("cost", str(config))
