"""Tables that travel: a latency table measured elsewhere is checked against whole networks measured here and
corrected, once per run (recorded, replayed on resume); `vpunas lut validate` says how far a table can be
trusted."""
from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import torch.nn as nn

from conftest import CONFIGS, EVOLVE_ONE_GENERATION, NO_BASELINES, SMOKE
from hw_cost import Block, CostModelError
from hw_cost.lut import LatencyCorrection, LatencyTable, LutCostModel
from hw_cost.profiler import OpenVinoProfiler
from nas.latency import lut_validation
from nas.cli import main
from nas.config import load_config
from nas.errors import RunDirError
from nas.latency.lut_validation import (CORRECTION_FILE, agreement, correct_for_this_machine, load_run_correction,
                                measured_latencies)
from nas.rundir import RunDir, read_csv
from nas.context import build_task_and_space
from search_spaces import arch_key

TABLE = CONFIGS / "luts" / "fmnist_mobilenet_openvino_cpu.json"


def _smoke_space():
    return build_task_and_space(load_config(SMOKE))[1]


def test_fit_recovers_scale_and_offset():
    predicted = np.array([0.2, 0.5, 0.9, 1.4])
    c = LatencyCorrection.fit(predicted, 0.15 * predicted + 0.04)
    assert (c.scale, c.offset_ms) == pytest.approx((0.15, 0.04))
    # measurements against the table's ordering: no negative scale, only the level is fitted
    c = LatencyCorrection.fit([1.0, 2.0], [0.3, 0.1])
    assert c.scale == pytest.approx(0.2 / 1.5, abs=1e-6) and c.offset_ms == 0
    with pytest.raises(CostModelError, match="at least two networks"):
        LatencyCorrection.fit([1.0, 1.0], [0.3, 0.4])


def test_corrected_model_scales_blocks_and_shifts_the_network():
    table = LatencyTable({"a": {"median_ms": 0.5}, "b": {"median_ms": 0.25}}, {"inference_overhead_ms": 0.1})
    blocks = [Block("a", (1, 1, 1, 1), nn.Identity), Block("b", (1, 1, 1, 1), nn.Identity)]
    model = LutCostModel(table, correction=LatencyCorrection(scale=0.5, offset_ms=0.02))
    assert model.block_latencies_ms(blocks).tolist() == [0.25, 0.125]
    assert model.latency_ms(blocks) == pytest.approx(0.5 * 0.85 + 0.02)


def test_agreement_figures():
    a = agreement([1.0, 2.1, 2.9, 4.5], [1.0, 2.0, 3.0, 4.0])
    assert a["mape_pct"] == pytest.approx((0 + 5 + 100 / 30 + 12.5) / 4, abs=0.01)
    assert a["within_10pct"] == 0.75 and a["spearman"] == 1.0 and a["archs"] == 4


def _foreign_table() -> LatencyTable:
    table = LatencyTable.load(TABLE)
    table.metadata.update(host="another-host", device_name="another CPU")
    return table


def _local_model_measured_here_as(factor: float, monkeypatch) -> LutCostModel:
    """The smoke table with this machine's metadata, as if measured here, while this machine measures `factor`
    times its latencies."""
    local = LatencyTable.load(TABLE)
    local.metadata.update(OpenVinoProfiler(local.settings()).metadata())
    monkeypatch.setattr(lut_validation, "measure_here", lambda space_, table, archs: factor * lut_validation._predicted(
        space_, LutCostModel(table), archs))
    return LutCostModel(local)


def test_a_foreign_table_is_corrected_once_per_run(tmp_path, monkeypatch):
    space = _smoke_space()
    model = LutCostModel(_foreign_table())
    run_dir = RunDir(tmp_path)
    correct_for_this_machine(space, model, "auto", 5, 0, run_dir)
    record = json.loads((tmp_path / CORRECTION_FILE).read_text())
    assert record["applied"] and record["measured_elsewhere"]["host"] == "another-host"
    assert model.correction == LatencyCorrection(**record["correction"])
    # the fitted line is the least-squares one: it cannot be further from the measurements than the table
    assert record["after"]["mape_pct"] < record["before"]["mape_pct"]
    assert len(record["measured_ms"]) == 5
    # a resumed run (or a report of it) reads the decision back and measures nothing
    monkeypatch.setattr(lut_validation, "measure_here", lambda *a: pytest.fail("measured again"))
    again = LutCostModel(_foreign_table())
    correct_for_this_machine(space, again, "auto", 5, 0, run_dir)
    assert again.correction == model.correction


def test_a_table_that_agrees_here_is_used_as_measured_and_never_is_unchecked(tmp_path, monkeypatch):
    """A table is always checked (host metadata cannot tell that it fits): within 10 % it stays as it is."""
    space = _smoke_space()
    model = _local_model_measured_here_as(1.05, monkeypatch)
    correct_for_this_machine(space, model, "auto", 5, 0, RunDir(tmp_path / "local"))
    record = json.loads((tmp_path / "local" / CORRECTION_FILE).read_text())
    assert model.correction is None and record["applied"] is False and record["measured_elsewhere"] == {}
    assert 4.7 < record["before"]["mape_pct"] < 4.8 and len(record["measured_ms"]) == 5
    monkeypatch.setattr(lut_validation, "measure_here", lambda *a: pytest.fail("measured"))
    model = LutCostModel(_foreign_table())
    correct_for_this_machine(space, model, "never", 5, 0, RunDir(tmp_path / "never"))
    assert model.correction is None
    assert json.loads((tmp_path / "never" / CORRECTION_FILE).read_text())["applied"] is False


def test_a_table_2x_off_on_this_machine_is_corrected_whatever_its_metadata(tmp_path, monkeypatch, caplog):
    """A table measured on this very host (its metadata matches) that reads half the latency measured here: the
    run's check finds it out and corrects it, and says so."""
    space = _smoke_space()
    model = _local_model_measured_here_as(2.0, monkeypatch)
    with caplog.at_level(logging.INFO):
        correct_for_this_machine(space, model, "auto", 5, 0, RunDir(tmp_path))
    record = json.loads((tmp_path / CORRECTION_FILE).read_text())
    assert record["applied"] and 49 < record["before"]["mape_pct"] < 51 and record["after"]["mape_pct"] < 1
    assert model.correction.scale == pytest.approx(2.0, rel=1e-6) and abs(model.correction.offset_ms) < 1e-6
    assert "measured on a machine like this one: on 5 networks measured here its error is 50.0% (MAPE); corrected " \
           "to 2 x table" in caplog.text


def test_a_table_of_a_device_this_machine_lacks_is_used_unchecked(tmp_path):
    table = _foreign_table()
    table.metadata["device"] = "NPU"
    model = LutCostModel(table)
    correct_for_this_machine(_smoke_space(), model, "auto", 5, 0, RunDir(tmp_path))
    record = json.loads((tmp_path / CORRECTION_FILE).read_text())
    assert model.correction is None and record["applied"] is False and record["measured_elsewhere"] == {"device": "NPU"}


def test_a_damaged_correction_record_is_a_clear_error(tmp_path):
    (tmp_path / CORRECTION_FILE).write_text('{"applied": true}')
    with pytest.raises(RunDirError, match="damaged.*delete it"):
        load_run_correction(LutCostModel(_foreign_table()), RunDir(tmp_path))


def test_lut_validate_command(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["lut", "validate", SMOKE, "--archs", "6", "--calibration-archs", "3", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "as measured: MAPE" in printed and "3 held out" in printed
    result = json.loads((out / "validation.json").read_text())
    assert result["archs"] == 6 and len(result["measured_ms"]) == 6 and result["after_held_out"]["archs"] == 3
    assert result["measured_on"]["runtime"] == "openvino" and result["table"].endswith(TABLE.name)
    assert (out / "validation.png").stat().st_size > 10_000


def test_a_run_on_a_foreign_table_uses_its_correction_throughout(tmp_path, capsys):
    """Every latency of the run (candidates.csv) comes from the corrected table, the run records it, and its
    finalised archs are measured here beside their predictions. (`always`: whether `auto` corrects depends on how
    far this machine is from the table's, which the tests of `auto` set up on purpose.)"""
    out, foreign = tmp_path / "run", tmp_path / "foreign.json"
    table = json.loads(TABLE.read_text())
    table["metadata"]["host"] = "another-machine"  # whatever machine runs the test, the table comes from elsewhere
    foreign.write_text(json.dumps(table))
    short = ["task.train_size=128", "task.batch_size=32", "task.eval_images=64", "task.calib_images=32",
             "train.epochs=1", *EVOLVE_ONE_GENERATION, "search.finalize.archs=1", "search.finalize.screen_archs=0",
             "search.finalize.epochs=0.1", *NO_BASELINES, f"cost.model=lut:{foreign}", "cost.correct=always",
             "cost.correction_archs=4"]
    assert main(["search", SMOKE, *short, "--out", str(out), "--no-progress"]) == 0
    record = json.loads((out / CORRECTION_FILE).read_text())
    assert record["applied"] and record["measured_elsewhere"]["host"] == "another-machine"
    config = load_config(out / "config.yaml")
    space = build_task_and_space(config)[1]
    model = LutCostModel.from_file(config.cost.spec.argument)
    load_run_correction(model, RunDir(out))
    rows = read_csv(RunDir(out).candidates)
    assert rows
    for row in rows:
        assert float(row["latency_ms"]) == pytest.approx(model.latency_ms(space.blocks(json.loads(row["arch"]))),
                                                         abs=2e-6)
    assert "latency table" in (out / "run.log").read_text()
    # the finalised arch is measured end to end beside its prediction, for the report (not in candidates.csv)
    final = [r for r in rows if r["final_top1"] != ""]
    measured = measured_latencies(RunDir(out))
    assert len(final) == 1 and "measured_ms" not in final[0]
    assert list(measured) == [arch_key(json.loads(final[0]["arch"]))] and list(measured.values())[0] > 0
    page = (out / "report.html").read_text()
    assert "measured_ms" in page and ("corrected to" in page) is record["applied"]
    # vpunas cost RUN_DIR --arch ID costs the arch as the run did
    capsys.readouterr()
    assert main(["cost", str(out), "--arch", rows[0]["id"]]) == 0
    printed = float(re.search(r": ([0-9.]+) ms", capsys.readouterr().out).group(1))
    assert printed == pytest.approx(float(rows[0]["latency_ms"]), abs=1e-4)
