"""The smoke config end to end: search, report, resume, export (a run killed and resumed: test_interrupted_runs.py)."""
import json
import re
import shutil

import pytest

from conftest import CONFIGS, FINALIZE_TWO_BRIEFLY, SMOKE
from nas.cli import main
from nas.pareto import pareto_mask
from nas.rundir import RunDir, read_csv


def test_run_directory_contents(smoke_run):
    rows = read_csv(smoke_run.candidates)
    assert list(rows[0]) == ["id", "generation", "arch", "top1", "test_top1", "latency_ms", "cost_model", "params",
                             "macs", "is_pareto", "final_top1", "final_test_top1", "final_int8_test_top1",
                             "final_epochs", "is_final_pareto"]
    # the smoke config scores the finalised archs in INT8 too (search.finalize.int8)
    assert all((r["final_int8_test_top1"] != "") == (r["final_top1"] != "") for r in rows)
    assert all((r["final_epochs"] != "") == (r["final_top1"] != "") for r in rows)
    assert [int(r["id"]) for r in rows] == list(range(len(rows)))
    assert len({r["arch"] for r in rows}) == len(rows) >= 16  # every evaluated arch once
    mask = pareto_mask([float(r["top1"]) for r in rows], [float(r["latency_ms"]) for r in rows])
    assert [r["is_pareto"] == "True" for r in rows] == mask.tolist()
    assert all((r["test_top1"] != "") == (r["is_pareto"] == "True") for r in rows)
    assert all(r["cost_model"] == "lut:fmnist_mobilenet_openvino_cpu.json" for r in rows)
    archs = [json.loads(r["arch"]) for r in rows]
    assert {"depth", "kernel", "expand"} == set(archs[0])
    assert smoke_run.pareto_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = smoke_run.report_html.read_text()
    assert "Pareto front" in page and "data:image/png;base64," in page and "largest" in page
    baselines = read_csv(smoke_run.baselines)
    assert [b["name"] for b in baselines] == ["largest"]
    assert json.loads(baselines[0]["arch"]) == archs[0]  # the largest arch is evaluated first
    assert "threads: 1" in smoke_run.config.read_text()


def test_cpu_results_bit_identical(smoke_run):
    from conftest import assert_candidates_unchanged

    assert_candidates_unchanged(smoke_run, "fmnist_mobilenet_smoke")


def _copy_of(run: RunDir, folder) -> RunDir:
    """A copy of the shared run for a test that changes it (the other tests read the original)."""
    shutil.copytree(run.path, folder)
    return RunDir(folder)


def test_report_rebuilds(smoke_run, tmp_path):
    run = _copy_of(smoke_run, tmp_path / "run")
    run.report_html.unlink()
    assert main(["report", str(run.path)]) == 0
    assert run.report_html.exists()


def test_resume_of_a_finished_run_changes_nothing(smoke_run, tmp_path):
    """Not even when the last INT8 score was lost: it is redone, to the same value."""
    run = _copy_of(smoke_run, tmp_path / "run")
    before = run.candidates.read_text()
    journal = run.journal.path.read_text()
    int8_journal = run.checkpoint_dir / "finalized_int8.jsonl"
    int8_scores = int8_journal.read_text()
    int8_journal.write_text("".join(int8_scores.splitlines(keepends=True)[:-1]))
    assert main(["search", SMOKE, "--out", str(run.path), "--resume", "--no-progress"]) == 0
    assert run.candidates.read_text() == before and run.journal.path.read_text() == journal
    assert int8_journal.read_text() == int8_scores


def test_resume_with_another_config_is_refused(smoke_run, capsys):
    assert main(["search", SMOKE, "--out", str(smoke_run.path), "--resume", "train.lr=0.5"]) == 2
    assert "train.lr differs" in capsys.readouterr().err


def test_new_run_into_an_existing_directory_is_refused(smoke_run, capsys):
    assert main(["search", SMOKE, "--out", str(smoke_run.path)]) == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("fmt, suffix", [("torch", ".pt"), ("onnx", ".onnx"), ("openvino", ".xml")])
def test_export_front_arch(smoke_run, fmt, suffix, tmp_path):
    rows = read_csv(smoke_run.candidates)
    arch_id = next(r["id"] for r in rows if r["is_pareto"] == "True")
    target = tmp_path / f"model{suffix}"
    assert main(["export", str(smoke_run.path), "--arch", arch_id, "--format", fmt, "-o", str(target)]) == 0
    assert target.exists()
    info = json.loads(target.with_suffix(".json").read_text())
    assert info["id"] == int(arch_id) and info["format"] == fmt and info["max_abs_diff_vs_pytorch"] < 1e-3
    assert info["precision"] == "fp32"
    assert info["input_shape"] == [1, 1, 28, 28] and info["preprocessing"]["mean"]
    if fmt == "openvino":
        assert target.with_suffix(".bin").exists()


def test_int8_export_of_a_finalised_arch(smoke_run, tmp_path):
    """The INT8 model of a finalised arch that the run recorded within the default bound scores what the run
    recorded for it (the float model's top-1 is the run's float test top-1 of that arch). A smoke run's barely
    trained archs lose from under 0.1 to over 1 point in INT8, so the arch is one of those within the bound."""
    row = next(r for r in read_csv(smoke_run.candidates)
               if r["final_top1"] != "" and float(r["final_test_top1"]) - float(r["final_int8_test_top1"]) <= 1.0)
    target = tmp_path / "model.xml"
    assert main(["export", str(smoke_run.path), "--arch", row["id"], "--format", "openvino", "--precision", "int8",
                 "-o", str(target)]) == 0
    assert target.exists() and target.with_suffix(".bin").exists()
    info = json.loads(target.with_suffix(".json").read_text())
    assert info["precision"] == "int8" and info["max_drop"] == 1.0
    assert info["float_test_top1"] == float(row["final_test_top1"])
    assert info["int8_test_top1"] == float(row["final_int8_test_top1"])
    assert info["int8_drop"] == pytest.approx(info["float_test_top1"] - info["int8_test_top1"], abs=1e-3)
    assert info["int8_drop"] <= 1.0
    import openvino as ov

    assert any(op.get_type_name() == "FakeQuantize" for op in ov.Core().read_model(str(target)).get_ops())


@pytest.mark.parametrize("cost", ["vpunn:VPU_2_7", "lut", "the run's own"])
def test_cost_of_a_run_arch(smoke_run, cost, capsys):
    rows = read_csv(smoke_run.candidates)
    spec = {"lut": ["--cost", f"lut:{CONFIGS / 'luts' / 'fmnist_mobilenet_openvino_cpu.json'}"],
            "vpunn:VPU_2_7": ["--cost", cost]}.get(cost, [])
    assert main(["cost", str(smoke_run.path), "--arch", "0", *spec]) == 0
    out = capsys.readouterr().out
    ms = float(out.strip().splitlines()[-1].split(": ")[-1].split(" ms")[0])
    assert ms > 0
    if cost != "vpunn:VPU_2_7":  # the same table the run used: the same latency
        assert ms == pytest.approx(float(rows[0]["latency_ms"]), rel=1e-4)
    else:
        assert "conv" in out and "fps" in out


def test_search_for_npu5_and_compare_generations(tmp_path, capsys):
    """A search costed by VPUNN on NPU 5.0 (Panther Lake), then its front on every generation. (Its screening, 0.1
    of an epoch of 4 steps, takes no step: the archs kept start their schedule afresh.)"""
    out = tmp_path / "npu5"
    assert main(["search", SMOKE, "cost.model=vpunn:NPU_5_0", "task.train_size=256", "search.evolution.population=6",
                 "search.evolution.generations=2", *FINALIZE_TWO_BRIEFLY, "--out", str(out), "--no-progress"]) == 0
    rows = read_csv(RunDir(out).candidates)
    assert {r["cost_model"] for r in rows} == {"vpunn:NPU_5_0"}
    capsys.readouterr()
    assert main(["cost", str(out), "--devices", "VPU_2_7,VPU_4_0,NPU_5_0"]) == 0
    text = capsys.readouterr().out
    assert "VPU_2_7 vs NPU_5_0: " in text and "Fastest arch at each test top1 level" in text
    table = [line.split() for line in text.splitlines() if re.match(r"\s+\d+\s+\d+\.\d+\s", line)]
    front = {r["id"]: float(r["latency_ms"]) for r in rows if r["id"] in {t[0] for t in table}}
    assert len(front) == len(table) >= 2
    for t in table:  # the NPU_5_0 column is the run's own latency
        assert float(t[6]) == pytest.approx(front[t[0]] * 1e3, abs=0.006)
