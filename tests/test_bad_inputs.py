"""Every user mistake ends in one line `vpunas: error: ...` naming it, exit status 2, and nothing lost.

Each case builds its bad input in a scratch folder (or damages a copy of the smoke run), runs the command line
in-process and checks the message, the exit status, that a search left no run directory behind, and that no
file of an existing run directory changed.
"""
from __future__ import annotations

import html
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import yaml

from conftest import CONFIGS, SMOKE, TRAIN_ON_256, VPUNN_VECTORS
from nas.cli import main
from nas.rundir import RunDir

TABLE = CONFIGS / "luts" / "fmnist_mobilenet_openvino_cpu.json"
SR_SMOKE = str(CONFIGS / "sr_edsr_x2_smoke.yaml")
RESNET_SMOKE = str(CONFIGS / "fmnist_resnet_smoke.yaml")
#: a smoke search cut to a few steps, for cases that fail only once training runs
TINY = [*TRAIN_ON_256, "train.epochs=1"]


@dataclass
class Case:
    """`args(scratch, run)` gives the command line; `run` is a copy of the smoke run when `needs_run`."""

    args: Callable[[Path, RunDir | None], list[str]]
    message: str
    needs_run: bool = False


def _yaml(folder: Path, data, name: str = "c.yaml") -> str:
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def _search(config: str, *overrides: str) -> Callable[[Path, RunDir | None], list[str]]:
    return lambda d, run: ["search", config, *overrides]


def _baselines(entries: str, expected: str, config: str = SMOKE) -> Case:
    """A search whose `baselines` list is `entries`, refused with `expected` before any training."""
    return Case(_search(config, f"baselines=[{entries}]"), expected)


def _image_folder(d: Path) -> list[str]:
    for split in ("train", "val"):
        for cls in ("a", "b"):
            (d / "images" / split / cls).mkdir(parents=True)
            (d / "images" / split / cls / "x.jpg").write_text("not a picture")
    return ["search", SMOKE, "task.dataset=image_folder", f"task.root={d / 'images'}", "task.image_size=32"]


def _tiny_sr_images(d: Path) -> list[str]:
    from PIL import Image

    for split in ("train", "val", "test"):
        (d / split).mkdir()
        Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(d / split / "small.png")
    return ["search", SR_SMOKE, "task.dataset=folders", f"task.root={d}", "task.train_dir=train", "task.val_dir=val",
            "task.test_dir=test"]


def _model_file(d: Path, content: bytes) -> list[str]:
    path = d / "model.vpunn"
    path.write_bytes(content)
    return ["vpunn", "dma", str(path), str(VPUNN_VECTORS / "vpunn_dma.csv"), "-o", str(d / "out.csv")]


def _table_without_space(d) -> str:
    data = json.loads(TABLE.read_text())
    del data["metadata"]["space"]
    (d / "t.json").write_text(json.dumps(data))
    return str(d / "t.json")


def _shipped_model_bytes() -> bytes:
    from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR

    return (SHIPPED_MODEL_DIR / "dma_2_7.vpunn").read_bytes()


def _damage(what: str) -> Callable[[Path, RunDir | None], list[str]]:
    def args(d: Path, run: RunDir) -> list[str]:
        if what == "checkpoint":
            run.supernet_checkpoint.write_bytes(run.supernet_checkpoint.read_bytes()[:1000])
            return ["search", SMOKE, "--out", str(run.path), "--resume"]
        if what == "candidates":
            run.candidates.write_text("name,value\nx,1\n")
            return ["report", str(run.path)]
        if what == "strategy state":  # the archs of the last generation in another order
            state = json.loads(run.strategy_state.read_text())
            run.strategy_state.write_text(json.dumps(dict(state, population=state["population"][::-1])))
            return ["search", SMOKE, "--out", str(run.path), "--resume"]
        if what == "strategy.json":
            run.strategy_state.write_text('{"generation": 3, "popul')
            return ["search", SMOKE, "--out", str(run.path), "--resume"]
        lines = run.journal.path.read_text().splitlines(keepends=True)
        run.journal.path.write_text(lines[0][:20] + "\n" + "".join(lines[1:]))
        return ["search", SMOKE, "--out", str(run.path), "--resume"]
    return args


def _int8_beyond_bound(d: Path, run: RunDir) -> list[str]:
    """INT8 export of the finalised arch that loses most top-1 in INT8, allowed half of that loss."""
    from nas.rundir import read_csv

    drop, arch_id = max((float(r["final_test_top1"]) - float(r["final_int8_test_top1"]), r["id"])
                        for r in read_csv(run.candidates) if r["final_top1"] != "")
    if drop <= 0:
        pytest.skip("no finalised arch of the smoke run loses top-1 in INT8 on this machine")
    return ["export", str(run.path), "--arch", arch_id, "--format", "openvino", "--precision", "int8", "--max-drop",
            f"{drop / 2:.4f}"]


CASES = {
    # configs and overrides
    "malformed YAML": Case(lambda d, r: ["search", _yaml(d, "a: [1, 2")], "not valid YAML"),
    "missing config": Case(_search("missing.yaml"), "config file missing.yaml not found"),
    "unknown key": Case(lambda d, r: ["search", _yaml(d, {"colour": "blue"})], "config: unknown key 'colour'"),
    "unknown nested key": Case(_search(SMOKE, "train.epochz=3"), "train: unknown key 'epochz'"),
    "wrong type": Case(_search(SMOKE, "train.lr=fast"), "train.lr"),
    "not a number": Case(_search(SMOKE, "train.lr=nan"), "lr: must be >= 0"),
    "override without =": Case(_search(SMOKE, "train.epochs"), "override 'train.epochs' is not key=value"),
    "unknown space type": Case(_search(SMOKE, "space.type=transformer"), "space.type: unknown 'transformer'"),
    "unknown strategy": Case(_search(SMOKE, "search.strategy=annealing"), "search.strategy: unknown 'annealing'"),
    "strategy key in the wrong place": Case(_search(SMOKE, "search.population=8"),
                                            "search.evolution.population"),
    "population too small": Case(_search(SMOKE, "search.evolution.population=2"),
                                 "search.evolution.population: must be >= 4"),
    "a setting that would be ignored": Case(_search(SMOKE, "task.auto_augment=rand-m9-mstd0.5"),
                                            "auto_augment: applies to image_folder data"),
    "a sandwich setting the strategy ignores": Case(_search(SMOKE, "search.strategy=differentiable",
                                                            "train.sandwich_random=3"),
                                                    "train.sandwich_random: 3 would be ignored"),
    # data
    "no data": Case(_search(SMOKE, "task.root=/nonexistent"), "apt-get install"),
    "image folder of non-images": Case(lambda d, r: _image_folder(d), "cannot read image"),
    "SR images smaller than a patch": Case(lambda d, r: _tiny_sr_images(d), "no usable image"),
    # cost models
    "missing latency table": Case(_search(SMOKE, "cost.model=lut:/nonexistent/t.json"),
                                  "latency table /nonexistent/t.json not found"),
    "table of another space": Case(_search(RESNET_SMOKE, f"cost.model=lut:{TABLE}"),
                                   "collected for another space"),
    "unknown VPUNN device": Case(_search(SMOKE, "cost.model=vpunn:VPU_9_9"), "VPU_9_9"),
    "a VPUNN setting for a table": Case(_search(SMOKE, "cost.dtype=fp16"),
                                        "a latency table carries its own precision"),
    "unknown cost model kind": Case(_search(SMOKE, "cost.model=oracle"), "unknown cost model"),
    "a table for a whole network": Case(lambda d, r: ["cost", "mobilenet_v2", "--cost", f"lut:{TABLE}"],
                                        "a latency table holds the blocks of a search space"),
    "unknown network": Case(lambda d, r: ["cost", "mobilenet_v9"], "unknown model 'mobilenet_v9'"),
    "one device to compare": Case(lambda d, r: ["cost", str(r.path), "--devices", "VPU_2_7"],
                                  "expected at least two of VPU_2_0", needs_run=True),
    "unknown device to compare": Case(lambda d, r: ["cost", str(r.path), "--devices", "VPU_2_7,NPU_9"],
                                      "NPU_9 unknown", needs_run=True),
    "devices of a folder that is no run": Case(lambda d, r: ["cost", str(d), "--devices", "VPU_2_7,VPU_2_0"],
                                               "has no candidates.csv"),
    "missing model file": Case(lambda d, r: ["vpunn", "dma", "dma_9.vpunn", str(VPUNN_VECTORS / "vpunn_dma.csv"),
                                             "-o", str(d / "o.csv")], "dma_9.vpunn not found"),
    "truncated model file": Case(lambda d, r: _model_file(d, _shipped_model_bytes()[:500]), "model.vpunn"),
    "foreign model file": Case(lambda d, r: _model_file(d, b"\x89PNG\r\n\x1a\n" + bytes(200)),
                               "not a VPUNN model file"),
    "measurement on a device this machine lacks": Case(lambda d, r: ["lut", "collect", SMOKE, "-o", str(d / "t.json"),
                                                                     "--device", "NPU"], "'NPU' is not available"),
    "validation of a table that does not record its space": Case(
        lambda d, r: ["lut", "validate", _table_without_space(d)], "does not record its search space"),
    "validation on too few archs": Case(lambda d, r: ["lut", "validate", SMOKE, "--archs", "2"], "--archs"),
    "validation of a VPUNN config": Case(lambda d, r: ["lut", "validate", str(CONFIGS / "fmnist_mobilenet.yaml")],
                                         "not a latency table"),
    "unknown table correction": Case(_search(SMOKE, "cost.correct=sometimes"), "cost.correct"),
    "table correction for VPUNN": Case(_search(SMOKE, "cost.model=vpunn:VPU_2_7", "cost.correct=always"),
                                       "applies to latency tables"),
    "unknown extra objective": Case(_search(SMOKE, "search.evolution.extra_objectives=[flops]"),
                                    "extra_objectives"),
    # baselines: refused before any training
    "baseline arch outside the space": _baselines("{name: b, arch: {depth: [9, 9, 9]}}", "baselines[b].arch"),
    "baseline of another task": _baselines("{name: b, type: bicubic}", "needs a super-resolution task"),
    "unknown baseline type": _baselines("{name: b, type: teacher}", "baselines[b].type: unknown 'teacher'"),
    "unknown baseline key": _baselines("{name: b, type: standalone, colour: 1}",
                                       "baselines[b]: unknown keys ['colour']"),
    "unknown reference network": _baselines("{name: r, type: reference, network: vgg16}",
                                            "baselines[r].network: unknown 'vgg16'"),
    "bad reference width": _baselines("{name: r, type: reference, network: mobilenet_v2, width: -1}",
                                      "baselines[r].width: expected a width multiplier"),
    "reference costed by a latency table": _baselines("{name: r, type: reference, network: resnet18}",
                                                      "cannot cost a whole resnet18"),
    "reference network for super-resolution": _baselines("{name: r, type: reference, network: resnet18}",
                                                         "baselines[r]: type reference needs a classification task",
                                                         config=SR_SMOKE),
    "repeated baseline name": _baselines("{name: b}, {name: b, arch: smallest}", "names must be unique; repeated: b"),
    # training that diverges stops before the bad step's update
    "diverging loss": Case(_search(SMOKE, *TINY, "train.opt=sgd", "train.lr=1e30", "train.grad_clip=0",
                                   "train.checkpoint_every=1"), "supernet training diverged at step"),
    # run directories
    "missing run directory": Case(lambda d, r: ["report", "/nonexistent/run"], "not found"),
    "damaged checkpoint": Case(_damage("checkpoint"), "supernet.pt is damaged", needs_run=True),
    "damaged candidates.csv": Case(_damage("candidates"), "neither a top1 nor a psnr column", needs_run=True),
    "damaged journal": Case(_damage("journal"), "line 1 is corrupt", needs_run=True),
    "a search state the journal does not replay": Case(_damage("strategy state"),
                                                       "the journal does not replay the recorded search",
                                                       needs_run=True),
    "damaged search state": Case(_damage("strategy.json"), "strategy.json is damaged", needs_run=True),
    "export of an unknown arch": Case(lambda d, r: ["export", str(r.path), "--arch", "99999", "--format", "torch"],
                                      "--arch 99999: no such id", needs_run=True),
    "export in an unknown format": Case(lambda d, r: ["export", str(r.path), "--arch", "0", "--format", "tflite"],
                                        "invalid choice: 'tflite'", needs_run=True),
    "int8 export in a format NNCF does not quantize":
        Case(lambda d, r: ["export", str(r.path), "--arch", "0", "--format", "onnx", "--precision", "int8"],
             "int8 needs --format openvino", needs_run=True),
    "int8 export that loses more than allowed": Case(_int8_beyond_bound, "below the float model's", needs_run=True),
}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "run.log"}


def _run(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:  # argparse's own errors (unknown option, invalid choice)
        return exc.code


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_mistake_is_one_line_exit_2_and_nothing_lost(case, tmp_path, capsys, request):
    run = None
    if case.needs_run:
        run = RunDir(tmp_path / "run")
        shutil.copytree(request.getfixturevalue("smoke_run").path, run.path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = case.args(scratch, run)
    out = tmp_path / "new-run"
    if args[0] == "search":
        args += ["--no-progress"] + ([] if "--out" in args else ["--out", str(out)])
    before = _files(run.path) if run else None
    code = _run(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("vpunas: error:") and case.message in err[0], err
    if run is not None:
        assert _files(run.path) == before  # the run directory is as it was
    elif case is not CASES["diverging loss"]:  # that one keeps its last good checkpoint (below)
        assert not out.exists()  # nothing half-written


def test_library_errors_name_parameters_which_the_cli_shows_as_flags(tmp_path):
    """The export library names its own parameters; `vpunas export` says the same with its flags (CASES)."""
    from nas.cli.flags import as_flags
    from nas.errors import ConfigError, ParameterError
    from nas.export.models import export_arch

    with pytest.raises(ParameterError, match=r"^`precision` int8 needs `fmt` openvino"):
        export_arch(RunDir(tmp_path), "0", "onnx", precision="int8")
    with pytest.raises(ConfigError, match=r"^--precision int8 needs --format openvino"):
        with as_flags(fmt="--format", precision="--precision"):
            export_arch(RunDir(tmp_path), "0", "onnx", precision="int8")
    with pytest.raises(ParameterError, match=r"^`max_drop` -1: must be >= 0"):
        export_arch(RunDir(tmp_path), "0", "openvino", precision="int8", max_drop=-1)


def test_a_diverging_run_keeps_its_last_good_checkpoint(tmp_path, capsys):
    """The checkpoint left behind is the last finite state, and the message names the step that diverged."""
    import torch

    out = tmp_path / "run"
    assert main(["search", SMOKE, *TINY, "train.opt=sgd", "train.lr=1e30", "train.grad_clip=0",
                 "train.checkpoint_every=1", "--out", str(out), "--no-progress"]) == 2
    message = capsys.readouterr().err.strip()
    assert "lower train.lr (now 1e+30)" in message and "task.batch_size" in message  # the settings to look at
    step = int(message.split("diverged at step ")[1].split()[0])
    state = torch.load(RunDir(out).supernet_checkpoint, weights_only=False)
    assert state["global_step"] == step - 1
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())


def test_a_run_that_learns_nothing_says_so(tmp_path, capsys, smoke_run):
    """A learning rate far off that never turns the loss NaN (clipped gradients) leaves every arch at chance: the
    run finishes, and its log, stderr and report say that its results are no results."""
    out = tmp_path / "run"
    code = main(["search", SMOKE, *TINY, "train.lr=1e4", "search.evolution.generations=1", "search.finalize.archs=1",
                 "search.finalize.screen_archs=0", "search.finalize.int8=false", "task.test_images=500",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    run = RunDir(out)
    assert code == 0 and "vpunas: warning: the search learned nothing" in err and "train.lr (now 10000)" in err
    assert "WARNING nas.run: the search learned nothing" in run.log.read_text()
    warnings = json.loads(run.warnings.read_text())
    assert warnings and all(html.escape(line) in run.report_html.read_text() for line in warnings)
    assert not smoke_run.warnings.exists()  # the same config at its own lr learns
