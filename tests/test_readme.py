"""The README is a contract: every command it and its docs/ pages show runs, here on the smoke configs and small
inputs.

`README_COMMANDS` maps each command line of the README (code blocks and inline `vpunas ...` examples) to the
concrete invocations that stand for it. A command added to the README without an entry here fails
`test_every_readme_command_is_covered`; each entry must then succeed.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import (CONFIGS, EVOLVE_ONE_GENERATION, FINALIZE_TWO_BRIEFLY, NO_BASELINES, REPO, SCORE_ON_128, SMOKE,
                      TRAIN_ON_256, VPUNN_VECTORS)
from nas.cli import main
from nas.config import load_config
from nas.rundir import read_csv

DEFAULT = str(CONFIGS / "fmnist_mobilenet.yaml")
#: shrink a classification search to seconds: a sliver of the data, one short generation, two finalised archs (no
#: run budget: with time to spare, the default's would finalise every arch, each scored on the whole val split;
#: tests/test_finalize.py runs the budget)
SHORT = [*TRAIN_ON_256, *SCORE_ON_128, "task.test_images=1000", "train.epochs=1", *EVOLVE_ONE_GENERATION,
         *FINALIZE_TWO_BRIEFLY, "search.finalize.run_budget_minutes=0", "search.finalize.max_archs=0",
         "search.finalize.max_epochs=0", *NO_BASELINES]
#: the smallest space with four archs, enough for a table's validation (2 fit a correction, 2 check it)
FOUR_ARCH_SPACE = ["space.stages=[{width: 8, stride: 1, depths: [1]}]", "space.kernel_sizes=[3, 5]",
                   "space.expand_ratios=[3, 4]"]


def _readme_commands() -> set[str]:
    """Command lines of the README and the pages of docs/ it links: indented code lines that run something, and
    inline `vpunas ...` spans."""
    text = "\n".join(page.read_text() for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    commands = set()
    for line in text.splitlines():
        if re.match(r"    (vpunas |\.venv/bin/|scripts/)", line):
            commands.add(re.split(r"\s#", line)[0].strip())
    commands.update(re.findall(r"`(vpunas [^`]*)`", text))
    commands.update(o for o in re.findall(r"`([a-z_]+\.[a-z_.]+=[^`\s]+)`", text))
    return commands


def _front_id(run) -> str:
    return next(r["id"] for r in read_csv(run.candidates) if r["is_pareto"] == "True")


def _copy(run, tmp) -> str:
    """A second run to compare with: a copy of `run`."""
    shutil.copytree(run.path, tmp / "copy")
    return str(tmp / "copy")


def _vpunn(kind: str, model: str, tmp, table: str = "vpunn") -> list[str]:
    folder = VPUNN_VECTORS / "npu45" if table == "npu45" else VPUNN_VECTORS
    return ["vpunn", kind, model, str(folder / f"{table}_{kind}.csv"), "-o", str(tmp / f"{table}_{kind}.csv")]


#: MobileNetV4-Conv-S's layout in the hybrid space, the arch the results page trains alone
MNV4_LIKE = ('{"stem":32,"width":[32,48,96,128,224],"depth":[2,3,3,4,2],"block":[["fused","fused"],["extradw","ib"'
             ',"ib"],["ib","ib","convnext"],["extradw","extradw","ib","ib"],["ib","ib"]],"kernel":[[3,3],[5,3,3],['
             '3,3,3],[3,5,5,5],[3,3]],"expand":[[4,4],[4,2,2],[2,2,4],[6,4,4,4],[4,4]],"head":1280}')

#: the same with a fused block at 28x28 and a wider one at 14x14 (the results page)
MNV4_WITH_28 = ('{"stem":32,"width":[32,64,96,96,128,224],"depth":[1,1,3,3,4,2],"block":[["fused"],["fused"],["ext'
                'radw","ib","ib"],["ib","ib","convnext"],["extradw","extradw","ib","ib"],["ib","ib"]],"kernel":[[3],[3]'
                ',[5,3,3],[3,3,3],[3,5,5,5],[3,3]],"expand":[[1],[4],[4,2,2],[2,2,4],[6,4,4,4],[4,4]],"head":1280}')

#: a deeper and wider arch of that kind at 79 us on VPU 2.7 (the results page)
MNV4_WIDER_28 = ('{"stem":32,"width":[32,64,96,128,160,224],"depth":[2,2,3,3,4,2],"block":[["fused","fused"],["fused'
                 '","fused"],["extradw","ib","ib"],["ib","ib","convnext"],["extradw","extradw","ib","ib"],["ib","ib"'
                 ']],"kernel":[[3,3],[3,3],[5,3,3],[3,3,3],[3,5,5,5],[3,3]],"expand":[[1,2],[4,2],[4,4,4],[4,4,4],[6'
                 ',4,4,4],[4,4]],"head":1280}')

README_COMMANDS = {
    # the first command: install.sh runs in CI (the test command); the search is the default config, cut to seconds
    "scripts/install.sh && .venv/bin/vpunas search configs/fmnist_mobilenet.yaml":
        lambda tmp, smoke: [["search", DEFAULT, *SHORT, "--out", str(tmp / "default")]],
    "scripts/install.sh --tests && .venv/bin/python -m pytest": None,  # this suite
    "vpunas search CONFIG.yaml [key=value ...] [--out RUN_DIR] [--resume]":
        lambda tmp, smoke: [["search", SMOKE, *SHORT, "--out", str(tmp / "r")],
                            ["search", SMOKE, *SHORT, "--out", str(tmp / "r"), "--resume"]],
    "vpunas report RUN_DIR": lambda tmp, smoke: [["report", str(smoke.path)]],
    "vpunas report RUN_A RUN_B ... -o DIR":
        lambda tmp, smoke: [["report", str(smoke.path), _copy(smoke, tmp), "-o", str(tmp / "compare")]],
    # tests/test_search_e2e.py exports a front arch in each format, and a finalised one in INT8 (with the
    # default --max-drop; test_bad_inputs.py gives it one the model exceeds)
    "vpunas export RUN_DIR --arch ID --format torch|onnx|openvino [-o PATH]": None,
    "vpunas export RUN_DIR --arch ID --format openvino --precision int8 [--max-drop X]": None,
    "vpunas lut collect CONFIG.yaml [-o TABLE.json] [--device CPU|NPU]":
        lambda tmp, smoke: [["lut", "collect", SMOKE, *FOUR_ARCH_SPACE, "-o", str(tmp / "t.json"), "--device", "CPU",
                             "--warmup", "1", "--repeats", "5", "--validate", "4", "--no-progress"]],
    "vpunas lut collect CONFIG": None,  # the same command, quoted in prose
    "vpunas lut collect": None,  # prose
    "vpunas lut validate CONFIG.yaml|TABLE.json [--archs 50] [-o DIR]":
        lambda tmp, smoke: [["lut", "validate", SMOKE, "--archs", "5", "--calibration-archs", "2", "-o",
                             str(tmp / "v1")],
                            ["lut", "validate", str(CONFIGS / "luts" / "fmnist_mobilenet_openvino_cpu.json"),
                             "--archs", "4", "-o", str(tmp / "v2")]],
    "vpunas lut validate CONFIG|TABLE": None,  # prose
    "vpunas cost": None,  # prose
    "vpunas cost MODEL [--cost vpunn:VPU_2_7] [--input 1x3x224x224]":
        lambda tmp, smoke: [["cost", "resnet18", "--cost", "vpunn:VPU_2_7", "--input", "1x3x64x64"]],
    "vpunas cost mobilenet_v2 --cost vpunn:VPU_2_7": lambda tmp, smoke: [["cost", "mobilenet_v2", "--cost",
                                                                         "vpunn:VPU_2_7"]],
    "vpunas cost RUN_DIR --arch ID [--cost vpunn:...|lut:FILE]":
        lambda tmp, smoke: [["cost", str(smoke.path), "--arch", _front_id(smoke)],
                            ["cost", str(smoke.path), "--arch", _front_id(smoke), "--cost", "vpunn:VPU_2_0"]],
    "vpunas vpunn dpu|layer|dma MODEL_FILE INPUT.csv -o OUTPUT.csv":
        lambda tmp, smoke: [_vpunn("dpu", "vpu_2_7.vpunn", tmp) + ["--device", "VPU_2_7"],
                            _vpunn("layer", "vpu_2_7.vpunn", tmp) + ["--device", "VPU_2_7"],
                            _vpunn("dma", "dma_2_7.vpunn", tmp),
                            _vpunn("dpu", "vpu_5_1.vpunn", tmp, "npu45") + ["--device", "NPU_5_0"],
                            _vpunn("layer", "vpu_4_0.vpunn", tmp, "npu45") + ["--device", "VPU_4_0"],
                            _vpunn("dma", "dmann_5_0.vpunn", tmp, "npu45") + ["--device", "NPU_5_0"]],
    "vpunas vpunn dpu|layer|dma": None,  # prose
    "vpunas cost RUN_DIR --devices VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0":
        lambda tmp, smoke: [["cost", str(smoke.path), "--devices", "VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0"]],
    "vpunas cost CONFIG.yaml --arch JSON|@FILE|--baseline NAME [--devices ...]":
        lambda tmp, smoke: [["cost", str(CONFIGS / "fmnist_npu.yaml"), "--arch", MNV4_WIDER_28, "--devices",
                             "VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0"],
                            ["cost", str(CONFIGS / "fmnist_npu_zoo.yaml"), "--baseline", "MobileNetV2-1.4"]],
    "vpunas cost configs/fmnist_npu.yaml --arch JSON --devices VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0": None,  # as above
    "vpunas cost configs/fmnist_npu_zoo.yaml --baseline NAME --devices ...": None,  # as above
    "vpunas cost configs/fmnist_npu_zoo.yaml --baseline NAME --devices VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0": None,
    "vpunas cost CONFIG --arch JSON --devices ...": None,  # prose
    "vpunas cost CONFIG --baseline NAME --devices ...": None,  # prose
    "vpunas export": None,  # prose
    "vpunas search": None,  # prose
    "vpunas search CONFIG": None,  # prose
    "vpunas export runs/fmnist_mobilenet --arch ID --format openvino":
        lambda tmp, smoke: [["export", str(smoke.path), "--arch", _front_id(smoke), "--format", "openvino", "-o",
                             str(tmp / "tour.xml")]],
    "vpunas export RUN_DIR --arch ID --format openvino --precision int8": None,  # the same, quoted in results.md
    # the zoo run is made for a GPU: here on the CPU, cut to seconds, with one small zoo network in a worker
    "vpunas search configs/fmnist_zoo.yaml device=cuda baseline_workers=8":
        lambda tmp, smoke: [["search", str(CONFIGS / "fmnist_zoo.yaml"), *SHORT, "device=cpu", "baseline_workers=1",
                             "baselines=[{name: z, type: zoo, model: mobilenetv3_small_050, train_steps: 2}]",
                             "--out", str(tmp / "zoo")]],
    # overrides quoted in the README: each applies to the default config
    # (test_readme_overrides_apply_to_the_default_config); a short smoke search runs where no other test runs one
    "train.epochs=1": None,  # SHORT holds it: every search of this file runs with it
    "search.strategy=differentiable":
        lambda tmp, smoke: [["search", DEFAULT, *SHORT, "train.epochs=2", "search.strategy=differentiable", "--out",
                             str(tmp / "d")]],
    "cost.model=vpunn:VPU_2_0":
        lambda tmp, smoke: [["search", SMOKE, *SHORT, "cost.model=vpunn:VPU_2_0", "--out", str(tmp / "v")]],
    "cost.model=vpunn:VPU_4_0": None,  # tests/test_search_e2e.py searches on NPU 5.0, VPUNN's 4.0 / 5.0 path
    # benchmarks: their smallest settings
    ".venv/bin/python scripts/bench_supernet.py": ["scripts/bench_supernet.py", "--steps", "1", "--batch", "8"],
    ".venv/bin/python scripts/bench_vpunn.py": ["scripts/bench_vpunn.py", "--threads", "1", "--repeat", "1"],
    ".venv/bin/python scripts/bench_dnas.py": ["scripts/bench_dnas.py", "--steps", "1"],
    # tests/test_differentiable.py runs it on its differentiable run against the smoke run
    ".venv/bin/python scripts/bench_dnas.py --run DNAS_RUN --against RUN": None,
    ".venv/bin/python scripts/bench_quality.py RUN_DIR": ["scripts/bench_quality.py", "{run}", "--repeats", "10"],
    ".venv/bin/python scripts/bench_contention.py": ["scripts/bench_contention.py", SMOKE, "--steps", "4"],
    ".venv/bin/python scripts/bench_scale.py": ["scripts/bench_scale.py", SMOKE, "--steps", "1", "--archs", "2"],
    ".venv/bin/python scripts/paper_table.py RUN_DIR [SR_RUN_DIR]": ["scripts/paper_table.py", "{run}"],
    ".venv/bin/python scripts/bench_search.py": None,  # tests/test_random_search.py runs it on a tiny search
    ".venv/bin/python scripts/bench_ranking.py RUN_DIR": None,  # tests/test_probe.py runs it on a probed smoke run
    # tests/test_train_alone.py runs it on the hybrid smoke space; the results page's measured call
    ".venv/bin/python scripts/train_alone.py CONFIG --out DIR --within-us 54.7 88": None,
    ".venv/bin/python scripts/train_alone.py configs/fmnist_npu.yaml --out /root/runs/ceiling/run --within-us 88 54.7":
        None,
    # the results page's hand-picked arch (tests/test_train_alone.py runs --arch)
    f".venv/bin/python scripts/train_alone.py configs/fmnist_npu.yaml --out /root/runs/mnv4like --arch '{MNV4_LIKE}'":
        None,
    # the results page's hybrid run from a scratch run's supernet (tests/test_random_search.py runs supernet_from)
    "vpunas search configs/fmnist_npu.yaml --out /root/runs/npu2 supernet_from=/root/runs/v_window2_3ep": None,
    # the results page's run of the widened hybrid config and its probe set (hours on two cores; the hybrid smoke
    # config runs the same code path in tests/test_hybrid_space.py, tests/test_probe.py the probe)
    "vpunas search configs/fmnist_npu.yaml --out /root/runs/npu3": None,
    "vpunas probe /root/runs/npu3": None,
    # the results page's arch with a 28x28 block (the config's stages quoted on the page)
    ".venv/bin/python scripts/train_alone.py configs/fmnist_npu.yaml --out /root/runs/npu28/b2 --arch '"
    + MNV4_WITH_28 + "'": None,
    # the results page's arch at 79 us
    ".venv/bin/python scripts/train_alone.py configs/fmnist_npu.yaml --out /root/runs/npu28/a79 --arch '"
    + MNV4_WIDER_28 + "'": None,
    # tests/test_probe.py runs the probe set on a copy of the smoke run (a few archs, a private cache)
    "vpunas probe": None,
    "vpunas probe RUN_DIR": None,
    "vpunas probe RUN_DIR [probe.key=value ...]": None,
    "vpunas probe RUN_DIR [probe.archs=24] [probe.epochs=E]": None,
    "vpunas probe runs/bench_search_quick/seed0/search probe.epochs=1.5": None,  # the results page's measured run
    # the results page's check of the code's behaviour: the default search with SHORT's finalisation overrides (the
    # first entry runs it cut to seconds) and test_distributed.py's fixed thread count
    "vpunas search configs/fmnist_mobilenet.yaml threads=1 adapt_threads=false search.finalize.run_budget_minutes=0 \\":
        None,
    # the results page's two defaults run whole: the default search (the first entry runs it cut to seconds)
    ".venv/bin/vpunas search configs/fmnist_mobilenet.yaml search.strategy=evolution --out runs/fmnist_mobilenet_evolution":
        None,
    # the 224-px data path on generated JPEGs: tests/test_bench_gpu.py runs both, the folder small
    # the results page's check of the typed core on the smoke configs, which the suite runs (tests/conftest.py)
    "vpunas search configs/<config>.yaml --out RUN": None,
    ".venv/bin/python scripts/make_imagefolder.py /tmp/jpegs": None,
    ".venv/bin/python scripts/bench_gpu.py --imagenet /tmp/jpegs --loader-workers 12": None,
    ".venv/bin/python scripts/bench_quality.py runs/fmnist_mobilenet --anchors configs/fmnist_mobilenet_smoke.yaml \\":
        ["scripts/bench_quality.py", "{run}", "--repeats", "10", "--anchors", SMOKE, "--reference-anchors-ms",
         "0.056,0.184", "--reference", "NNI:91.39:0.125:22.8"],
}


def test_every_readme_command_is_covered():
    assert _readme_commands() == set(README_COMMANDS)


def test_readme_overrides_apply_to_the_default_config():
    for override in (c for c in README_COMMANDS if "=" in c and " " not in c):
        key, value = override.split("=", 1)
        section, name = key.split(".")
        config = load_config(DEFAULT, [override])
        assert getattr(getattr(config, section), name) == yaml.safe_load(value)


@pytest.mark.parametrize("command", [c for c, run in README_COMMANDS.items() if callable(run)])
def test_readme_command_runs(command, smoke_run, tmp_path, capsys):
    for argv in README_COMMANDS[command](tmp_path, smoke_run):
        argv = argv + ["--no-progress"] if argv[0] == "search" else argv
        assert main(argv) == 0, (argv, capsys.readouterr().err)


@pytest.mark.parametrize("command", [c for c, run in README_COMMANDS.items() if isinstance(run, list)])
def test_readme_benchmark_runs(command, smoke_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(smoke_run.path, run_dir)
    argv = [a.replace("{run}", str(run_dir)) for a in README_COMMANDS[command]]
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()  # it printed its figures


def test_the_hand_picked_archs_of_the_hybrid_config_are_archs_of_its_space_as_shipped():
    """The results page's commands that train hand-picked archs of configs/fmnist_npu.yaml run on it as it is."""
    from search_spaces import build_space

    space = build_space(load_config(CONFIGS / "fmnist_npu.yaml").space, input_shape=(1, 28, 28), num_outputs=10)
    for arch in (MNV4_WITH_28, MNV4_WIDER_28):
        assert space.validate(json.loads(arch)) == json.loads(arch)
