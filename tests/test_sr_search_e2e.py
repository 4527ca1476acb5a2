"""The super-resolution smoke config end to end (search, baselines, report, resume), and standalone training resume."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import CONFIGS
from nas.baseline_entries import BicubicBaseline, StandaloneBaseline
from nas.baselines.scoring import BASELINE_TYPES
from nas.baselines.trainer import FixedNetwork, StandaloneTrainer
from nas.cli import main
from nas.config import ConfigError, load_config
from nas.pareto import pareto_mask
from nas.rundir import RunDir, read_csv
from nas.context import build_context, build_task_and_space

SMOKE = str(CONFIGS / "sr_edsr_x2_smoke.yaml")


@pytest.fixture(scope="module")
def sr_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "sr_smoke"
    assert main(["search", SMOKE, "--out", str(out), "--no-progress"]) == 0
    return RunDir(out)


def test_cpu_results_bit_identical(sr_run):
    from conftest import assert_candidates_unchanged

    assert_candidates_unchanged(sr_run, "sr_edsr_x2_smoke")


def test_candidates_have_psnr_and_a_front(sr_run):
    rows = read_csv(sr_run.candidates)
    assert list(rows[0])[:10] == ["id", "generation", "arch", "psnr", "test_psnr", "latency_ms", "cost_model",
                                  "params", "macs", "is_pareto"]
    assert len({r["arch"] for r in rows}) == len(rows) >= 12
    psnr, latency = [float(r["psnr"]) for r in rows], [float(r["latency_ms"]) for r in rows]
    assert [r["is_pareto"] == "True" for r in rows] == pareto_mask(psnr, latency).tolist()
    front = [r for r in rows if r["is_pareto"] == "True"]
    assert len(front) >= 2 and all(10 < float(r["test_psnr"]) < 60 for r in front)
    assert all(r["cost_model"] == "vpunn:VPU_2_7" for r in rows)
    assert max(latency) > 2 * min(latency)  # even the smoke space spans a range of latencies
    assert {"blocks", "channels", "kernel", "res_scale", "global_skip", "upsampler",
            "block"} == set(json.loads(rows[0]["arch"]))
    final = [r for r in rows if r["final_psnr"] != ""]  # scored in INT8 too, within 0.3 dB of float
    assert final and all(abs(float(r["final_int8_test_psnr"]) - float(r["final_test_psnr"])) < 0.3 for r in final)


def test_baselines_bicubic_and_edsr_beside_the_front(sr_run):
    baselines = {b["name"]: b for b in read_csv(sr_run.baselines)}
    assert list(baselines) == ["bicubic", "EDSR-baseline", "ESPCN", "smallest-standalone", "largest"]
    assert list(baselines["bicubic"])[:5] == ["name", "type", "psnr", "test_psnr", "test_ssim"]
    bicubic, edsr = baselines["bicubic"], baselines["EDSR-baseline"]
    assert bicubic["params"] == "0" and 20 < float(bicubic["test_psnr"]) < 45 and 0 < float(bicubic["test_ssim"]) < 1
    assert int(edsr["params"]) == 1_369_859 and json.loads(edsr["arch"])["channels"] == 64
    assert float(edsr["latency_ms"]) > float(bicubic["latency_ms"]) > 0
    assert "trained from scratch" in edsr["note"] and "outside the space" in edsr["note"]
    assert "arch of the space" in baselines["smallest-standalone"]["note"]
    assert "(20 steps" in edsr["note"] and "(30 steps" in baselines["smallest-standalone"]["note"]  # its own budget
    espcn = baselines["ESPCN"]  # a zoo network, trained as long as the finalised archs: 1 epoch of 20 steps
    assert espcn["type"] == "zoo" and "ESPCN" in espcn["note"] and "(20 steps" in espcn["note"]
    assert float(espcn["epochs"]) == 1 and float(espcn["test_psnr"]) > 20 and float(espcn["VPU_4_0_ms"]) > 0
    assert baselines["largest"]["note"] == "subnet with inherited weights" and baselines["largest"]["test_ssim"]
    assert (sr_run.checkpoint_dir / "baseline_EDSR-baseline.pt").exists()
    page = sr_run.report_html.read_text()
    assert "EDSR-baseline" in page and "bicubic" in page and "psnr" in page


def test_resume_of_a_finished_run_changes_nothing(sr_run):
    before = sr_run.candidates.read_text(), sr_run.baselines.read_text(), sr_run.baseline_journal.path.read_text()
    assert main(["search", SMOKE, "--out", str(sr_run.path), "--resume", "--no-progress"]) == 0
    assert (sr_run.candidates.read_text(), sr_run.baselines.read_text(),
            sr_run.baseline_journal.path.read_text()) == before


def test_scale_mismatch_is_one_clear_error(tmp_path, capsys):
    assert main(["search", SMOKE, "--out", str(tmp_path / "x"), "--no-progress", "space.scale=3"]) == 2
    assert "scale" in capsys.readouterr().err


def test_standalone_training_resumes_bit_exactly(tmp_path):
    config = load_config(SMOKE, ["train.checkpoint_every=3"])
    task, space = build_task_and_space(config)
    arch = space.smallest()

    def trainer(path):
        torch.manual_seed(0)
        return StandaloneTrainer(space, FixedNetwork(space.build_supernet().extract(arch)), task, config.train,
                                 seed=0, checkpoint_path=path)

    full = trainer(tmp_path / "full.pt")
    full.train(progress=False)

    class Stop(Exception):
        pass

    def stop_at(step):
        if step == 7:
            raise Stop

    interrupted = trainer(tmp_path / "cut.pt")
    with pytest.raises(Stop):
        interrupted.train(progress=False, on_step=stop_at)
    resumed = trainer(tmp_path / "cut.pt")
    assert resumed.global_step == 6  # the last checkpoint before the interruption
    resumed.train(progress=False)
    for a, b in zip(full.supernet.state_dict().values(), resumed.supernet.state_dict().values()):
        assert torch.equal(a, b)
    assert resumed.global_step == full.total_steps == config.task.epoch_patches // config.task.batch_size


@pytest.mark.parametrize("entry, message", [
    ({"name": "bad", "type": "standalone"}, r"baselines\[bad\]\.arch: .*needs an arch"),
    ({"name": "bad", "type": "standalone", "arch": "smallest", "train_steps": 0},
     r"baselines\[bad\]\.train_steps: expected a whole number"),
    ({"name": "b", "type": "bicubic", "arch": "largest"}, r"baselines\[b\]: unknown keys \['arch'\]"),
])
def test_a_baseline_entry_fails_the_config_load(entry, message):
    """What an entry says on its own is checked when the config loads."""
    with pytest.raises(ConfigError, match=message):
        load_config(SMOKE, ["baselines=" + json.dumps([entry])])


def test_baseline_config_errors_name_the_baseline(tmp_path):
    """What an entry means for the run's space and task is checked when the run starts."""
    ctx = build_context(load_config(SMOKE), RunDir(tmp_path), torch.device("cpu"), progress=False)
    standalone, bicubic = BASELINE_TYPES["standalone"][0], BASELINE_TYPES["bicubic"][0]  # their checks
    with pytest.raises(ConfigError, match=r"baselines\[bad\]\.arch: .*keys"):
        standalone(ctx, StandaloneBaseline(name="bad", arch={"blocks": 2}))
    bicubic(ctx, BicubicBaseline(name="b"))
    ctx.task = SimpleNamespace(metric="top1", scale=None)
    with pytest.raises(ConfigError, match="needs a super-resolution task"):
        bicubic(ctx, BicubicBaseline(name="b"))


def test_default_config_switches_to_div2k_style_folders(tmp_path):
    """The documented switch: task.dataset=folders with train / val / test folders of HR images."""
    from skimage import io

    rng = np.random.default_rng(0)
    for folder, n in (("DIV2K/DIV2K_train_HR", 2), ("DIV2K/DIV2K_valid_HR", 1), ("benchmark/Set14/HR", 2)):
        (tmp_path / folder).mkdir(parents=True)
        for i in range(n):
            io.imsave(str(tmp_path / folder / f"{i:04d}.png"), rng.integers(0, 256, (61, 83, 3)).astype(np.uint8),
                      check_contrast=False)
    config = load_config(CONFIGS / "sr_edsr_x2.yaml", [
        "task.dataset=folders", f"task.root={tmp_path}", "task.train_dir=DIV2K/DIV2K_train_HR",
        "task.val_dir=DIV2K/DIV2K_valid_HR", "task.test_dir=benchmark/Set14/HR"])
    task, space = build_task_and_space(config)
    assert (len(task.train.images), len(task.val), len(task.test)) == (2, 1, 2)
    assert task.test[0].hr.shape == (60, 82, 3) and task.test[0].lr.shape == (30, 41, 3)
    _, lr, hr = next(task.train_batches(0))
    net = space.build_supernet().extract(space.smallest())
    assert net(lr).shape == hr.shape
