"""scripts/train_alone.py: archs of a space trained alone at the run's recipe, cached with the probe set."""
import csv
import importlib.util
import json
import logging
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "fmnist_npu_smoke.yaml")


@pytest.fixture(scope="module")
def train_alone():
    spec = importlib.util.spec_from_file_location("train_alone", REPO / "scripts" / "train_alone.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_trains_the_largest_arch_within_a_latency_once_and_tables_it(train_alone, tmp_path, monkeypatch, capsys,
                                                                     caplog):
    monkeypatch.setenv("VPUNAS_CACHE", str(tmp_path / "cache"))
    smallest = {"stem": 16, "depth": [1, 1, 1], "width": [16, 32, 48], "block": [["ib"], ["ib"], ["ib"]],
                "kernel": [[3], [3], [3]], "expand": [[2], [2], [2]], "head": 64}
    args = [SMOKE, "--out", str(tmp_path / "out"), "--epochs", "0.02", "--within-us", "6",
            "--arch", json.dumps(smallest)]
    assert train_alone(args) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "train_alone.csv").open()))
    assert [r["arch_label"] for r in rows] == ["most parameters within 6 us", "--arch 1"]
    assert float(rows[0]["VPU_2_7_us"]) <= 6 and json.loads(rows[1]["arch"]) == smallest
    assert float(rows[0]["params"]) > float(rows[1]["params"])  # the limit leaves room above the smallest
    assert all(0 < float(r["test_top1"]) <= 100 and float(r["VPU_2_0_us"]) > 0 for r in rows)
    assert "| most parameters within 6 us |" in capsys.readouterr().out
    assert len(list((tmp_path / "cache").glob("probe-hybrid-*.pt"))) == 2

    caplog.set_level(logging.INFO, logger="nas.baselines.cached_networks")
    assert train_alone(args) == 0  # from the cache: the same scores, nothing trained
    assert sum("from the cache" in r.getMessage() for r in caplog.records) == 2
    assert list(csv.DictReader((tmp_path / "out" / "train_alone.csv").open())) == rows


@pytest.mark.parametrize("args, words", [
    (["--arch", "{\"stem\": 16}"], "--arch 1: arch keys must be"),
    (["--epochs", "0", "--within-us", "6"], "--epochs: 0 is not a positive"),
    ([], "no arch to train"),
])
def test_bad_input_gets_one_line(train_alone, tmp_path, capsys, args, words):
    assert train_alone([SMOKE, "--out", str(tmp_path / "out"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train_alone: ") and words in lines[0]


def test_an_interrupt_gets_one_line(train_alone, tmp_path, monkeypatch, capsys):
    """SIGTERM or Ctrl-C in training (which saves its checkpoint first): one line saying how to resume, exit 130."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(train_alone.__globals__, "train_cached_network", interrupted)
    assert train_alone([SMOKE, "--out", str(tmp_path / "out"), "--within-us", "6"]) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "most parameters within 6 us resumes from its checkpoint" in lines[0]
