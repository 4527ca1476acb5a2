"""The report page of a run (front, toggles, tables, arch pictures, stage times), the comparison of runs and the
papers' table (scripts/paper_table.py), on the session's smoke run."""
import dataclasses
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import REPO, made_up_baseline, made_up_candidate
from nas.reporting.arch_picture import arch_summary, arch_svg
from nas.cli import main
from nas.rundir import RunDir, read_csv
from search_spaces.common import StageConfig
from search_spaces.edsr import EdsrSpaceConfig
from search_spaces.hybrid import HybridSpaceConfig, HybridStageConfig
from search_spaces.mobilenet import MobileNetSpaceConfig, MobileNetStageConfig
from search_spaces.resnet import ResNetSpaceConfig
from nas.run import StageClock


def _views(page: str) -> dict[str, str]:
    return dict(re.findall(r'<div class="view" data-view="([^"]+)"[^>]*>(.*?)</div>', page, re.S))


def _assert_self_contained(page: str) -> None:
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert all(ref.startswith("data:") for ref in re.findall(r'(?:src|href)="([^"]*)"', page))
    assert not re.search(r"https?://", page)


def test_report_page(smoke_run):
    page = smoke_run.report_html.read_text()
    _assert_self_contained(page)
    rows = read_csv(smoke_run.candidates)
    final = [r["id"] for r in rows if r["final_top1"] != ""]
    tested = [r["id"] for r in rows if r["test_top1"] != "" or r["final_test_top1"] != ""]
    views = _views(page)
    # every evaluated arch is a point on the run's own latency, the finalised ones twice (inherited, finalised)
    keys = re.findall(r'<circle data-key="(\d+)"', views["cost|val"])
    assert sorted(keys, key=int) == sorted([r["id"] for r in rows] + final, key=int)
    assert len(re.findall(r'<rect data-key="b0"', views["cost|val"])) == 1  # the baseline
    # VPUNN latency of each generation for the archs with a test figure; measured latency for the finalised
    for device in ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0"):
        assert f'name="source" value="{device}"' in page
        assert sorted(re.findall(r'<circle data-key="(\d+)"', views[f"{device}|test"]), key=int) == tested
    assert sorted(re.findall(r'<circle data-key="(\d+)"', views["measured|test"]), key=int) == sorted(final, key=int)
    data = json.loads(re.search(r'<script type="application/json" id="vpunas-data">(.*?)</script>', page,
                                re.S).group(1))
    hover = dict(data["points"][final[0]]["info"])
    assert {"arch", "top1 (val, finalised)", "top1 (test, finalised)", "latency, VPUNN VPU_2_7", "params",
            "MACs"} <= set(hover)
    assert data["initial"] in final
    # sortable tables, a picture of every arch, provenance, stage times, what was there before
    assert page.count('<table class="sortable">') == 4 and "VPU_2_7_ms" in page
    assert len(re.findall(r'<template id="pic-\d+"><svg class="arch"', page)) == len(rows)
    assert '<template id="pic-b0"><svg class="arch"' in page  # the baseline is an arch of the space
    assert "Latency table" in page and "AMD EPYC" in page
    assert "Run time per stage" in page and "supernet training and search" in page
    assert "Finalised archs" in page and "Config" in page and "data:image/png;base64," in page


def test_report_without_vpunn_when_the_config_no_longer_loads(smoke_run, tmp_path):
    run = tmp_path / "moved"
    shutil.copytree(smoke_run.path, run)
    config = RunDir(run).config
    config.write_text(config.read_text().replace("/usr/share/datasets/fashion-mnist", str(tmp_path / "gone")))
    assert main(["report", str(run)]) == 0
    page = RunDir(run).report_html.read_text()
    assert "VPUNN latency of VPU_2_0, VPU_2_7, VPU_4_0, NPU_5_0 left out" in page
    assert 'value="VPU_2_7"' not in page and 'value="cost"' in page


def test_a_gpu_run_reads_back_on_a_machine_without_one(smoke_run, tmp_path, monkeypatch, capsys):
    """A finished run's config names the device it ran on; its report, its archs' cost and export read it back on
    the CPU (they ask for it: nothing trains), where torch finds no CUDA device."""
    run = tmp_path / "gpu_run"
    shutil.copytree(smoke_run.path, run)
    config = RunDir(run).config
    config.write_text(config.read_text().replace("\ndevice: cpu\n", "\ndevice: cuda\n"))
    assert "device: cuda" in config.read_text()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    arch = next(r["id"] for r in read_csv(smoke_run.candidates) if r["final_top1"] != "")
    assert main(["report", str(run)]) == 0
    assert main(["cost", str(run), "--arch", arch]) == 0
    assert main(["export", str(run), "--arch", arch, "--format", "torch", "-o", str(tmp_path / "a.pt")]) == 0
    assert f"arch {arch} on lut:" in capsys.readouterr().out


def test_stage_times_add_up_over_sessions(tmp_path, monkeypatch):
    """An interrupted session counts its stage up to the interrupt; a resumed one adds its own time; a session
    that fails records nothing."""
    ticks = iter([1.0, 4.0, 10.0, 101.0, 103.0, 200.0])
    monkeypatch.setattr("nas.run.time.perf_counter", lambda: next(ticks))
    run_dir = RunDir(tmp_path)
    first = StageClock(run_dir)
    first.start("training")
    first.start("search")
    first.save()  # interrupted during the search
    again = StageClock(run_dir)
    again.start("search")
    again.save()
    StageClock(run_dir).start("search")  # a session that ends in an error never saves
    assert json.loads(run_dir.stage_times.read_text()) == {"seconds": {"training": 3.0, "search": 8.0},
                                                           "sessions": 2}


def test_compare_two_runs(smoke_run, tmp_path, capsys):
    second = tmp_path / "second"
    shutil.copytree(smoke_run.path, second)
    out = tmp_path / "cmp"
    assert main(["report", str(smoke_run.path), str(second), "-o", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out / "compare.png"), str(out / "compare.html")]
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "compare.html").read_text()
    _assert_self_contained(page)
    rows = read_csv(smoke_run.candidates)
    view = _views(page)["cost|val"]
    for run in ("r0", "r1"):
        assert len(re.findall(rf'<circle data-key="{run}-\d+"', view)) >= len(rows)
        assert f'<tr data-key="{run}-' in page
    assert f"<h2>{smoke_run.path.name}</h2>" in page and "<h2>second</h2>" in page and 'value="VPU_4_0"' in page


def test_compare_refuses_runs_of_different_metrics(smoke_run, tmp_path, capsys):
    sr_like = tmp_path / "psnr_run"
    shutil.copytree(smoke_run.path, sr_like)
    candidates = RunDir(sr_like).candidates
    candidates.write_text(candidates.read_text().replace("top1", "psnr"))
    assert main(["report", str(smoke_run.path), str(sr_like), "-o", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different metrics" in err and "has psnr" in err
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("argv, message", [(["-o", "DIR"], "two or more runs"), (["SECOND"], "needs -o DIR")])
def test_report_usage_mistakes(smoke_run, argv, message, capsys):
    argv = [str(smoke_run.path) if a == "SECOND" else a for a in argv]
    assert main(["report", str(smoke_run.path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_paper_table(smoke_run):
    proc = subprocess.run([sys.executable, "scripts/paper_table.py", str(smoke_run.path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    baseline = read_csv(smoke_run.baselines)[0]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| largest |")]
    assert len(table) == 1 and f"| {float(baseline['test_top1']):.2f} |" in table[0]
    float(table[0].split("|")[7].strip().rstrip("x"))
    # a subnet on inherited weights is not like with like: no sentence of the papers' form against it
    assert re.search(r"^Searched: no baseline trained as long as the finalised archs\.$", proc.stdout, re.M)


ARCHS = {"mobilenet": ({"depth": [1, 2], "kernel": [[3], [5, 7]], "expand": [[3], [4, 6]]},
                       MobileNetSpaceConfig(stages=[MobileNetStageConfig(width=16, stride=1, depths=[1, 2]),
                                                    MobileNetStageConfig(width=24, stride=2, depths=[1, 2])]),
                       3, "k7 e6"),
         "resnet": ({"depth": [2], "width": [0.8], "expand": [[0.25, 0.5]]},
                    ResNetSpaceConfig(stages=[StageConfig(width=40, stride=1, depths=[1, 2, 3])], channel_divisor=4),
                    2, "32 ch"),
         "edsr": ({"blocks": 2, "channels": 16, "kernel": [3, 5], "res_scale": 0.5, "global_skip": "bicubic",
                   "upsampler": "subpixel"}, EdsrSpaceConfig(depths=[1, 2, 3], channels=[8, 16], scale=2), 4, "x2"),
         "hybrid": ({"stem": 16, "depth": [1], "width": [32], "block": [["ib"]], "kernel": [[3]], "expand": [[4]],
                     "head": 256}, HybridSpaceConfig(stages=[HybridStageConfig(widths=[32, 48], depths=[1, 2])]), 1,
                    "ib k3 e4")}


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_arch_pictures(family):
    """Each family draws its archs from the run's space config, and sums them up in a line."""
    arch, space, boxes, text = ARCHS[family]
    svg = arch_svg(arch, space)
    assert svg.startswith('<svg class="arch"') and svg.count("<rect") == boxes + 1  # one box dashed: a depth left out
    assert svg.count('class="ghost"') == 1 and text in svg
    assert arch_summary(arch, space) != arch_summary(arch, None) == json.dumps(arch, sort_keys=True,
                                                                              separators=(",", ":"))
    assert arch_svg(arch, None) is None  # a run whose config no longer loads: no picture


def test_a_plain_edsr_body_is_named_without_residual_scaling():
    arch, space, *_ = ARCHS["edsr"]
    plain = dict(arch, block="plain", res_scale=1.0)
    assert "2 plain layers x 16 ch" in arch_svg(plain, space) and "res_scale" not in arch_svg(plain, space)
    assert arch_summary(plain, space).startswith("2 plain layers x 16 ch; kernel")
    assert "res_scale" not in arch_summary(plain, space)
    assert "2 residual blocks x 16 ch · res_scale 0.5" in arch_svg(arch, space)


def test_arch_picture_names_a_stage_s_squeeze_excite_and_activation():
    arch, space, *_ = ARCHS["mobilenet"]
    stages = [space.stages[0], dataclasses.replace(space.stages[1], se=True, activation="hardswish",
                                                   expand_ratios=[1, 8])]
    svg = arch_svg(arch, dataclasses.replace(space, stages=stages))
    assert "stage 2 · 24 ch · stride 2 · SE · hardswish · depth 2/2" in svg and "stage 1 · 16 ch · stride 1 · depth" in svg


def test_papers_sentence_names_reference_baselines_by_network():
    """Reference baselines are found by their network, whatever their names; the subnet baseline stays out of the
    sentence while references exist."""
    from nas.reporting.report import baseline_matches, paper_sentence, reference_label

    rows = [made_up_candidate(4, 1.0, test=92.0), made_up_candidate(7, 2.0, test=93)]
    base = [made_up_baseline("largest", 91, 3, arch={"depth": [1]}),
            made_up_baseline("a", 91.5, 1.3, "reference", {"network": "mobilenet_v2", "width": 1.4}),
            made_up_baseline("b", 92.5, 4.4, "reference", {"network": "resnet50"}),
            made_up_baseline("c", 95, 9, "reference", {"network": "mobilenet_v2", "width": 1.0})]
    assert [reference_label(b) for b in base] == [None, "MobileNetV2-1.4", "ResNet50-style", "MobileNetV2-1.0"]
    matches = baseline_matches(rows, base, "top1")
    assert [m.title for m in matches] == ["largest", "a (MobileNetV2-1.4)", "b (ResNet50-style)",
                                          "c (MobileNetV2-1.0)"]
    assert paper_sentence(matches, "top1") == ("1.3x fps over MobileNetV2-1.4 and 2.2x over ResNet50-style at "
                                               "equal accuracy; no searched arch reaches MobileNetV2-1.0")
    assert paper_sentence(matches[:1], "top1") == ""  # a subnet on inherited weights: not like with like
