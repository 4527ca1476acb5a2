"""Shared test settings: a private HOME (NNI, OpenVINO and ONNX Runtime write there), one torch thread, the
allocator setting of the CLI (`nas.runtime`) and, on x86, torch's CPU kernels held to AVX2. And what several test
files share: the overrides that shrink a smoke run, small spaces, the strategies' toy problem, the smoke run."""
from __future__ import annotations

import csv
import fcntl
import functools
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
#: reference outputs of the official VPUNN runtime that the VPUNN tests compare against (a copy, see its README)
VPUNN_VECTORS = REPO / "tests" / "data" / "vpunn-vectors"
SMOKE = str(CONFIGS / "fmnist_mobilenet_smoke.yaml")

# Overrides that shrink a smoke config's run to seconds, each named for what it shrinks; tests combine them.
#: the training split cut to 256 images in batches of 32 (8 supernet steps an epoch)
TRAIN_ON_256 = ["task.train_size=256", "task.batch_size=32"]
#: the training split cut to 512 images in batches of 32 (16 steps an epoch)
TRAIN_ON_512 = ["task.train_size=512", "task.batch_size=32"]
#: batch norm recalibrated on 64 images, each arch scored on 128 val images
SCORE_ON_128 = ["task.calib_images=64", "task.eval_images=128"]
#: batch norm recalibrated on 64 images, each arch scored on 200 val images (one image: 0.5 points of top-1)
SCORE_ON_200 = ["task.calib_images=64", "task.eval_images=200"]
#: the evolution cut to one generation of four archs
EVOLVE_ONE_GENERATION = ["search.evolution.population=4", "search.evolution.generations=1"]
#: the evolution cut to two generations of four archs
EVOLVE_TWO_GENERATIONS = ["search.evolution.population=4", "search.evolution.generations=2"]
#: two archs finalised for a quarter of an epoch (screened for a tenth), without INT8 scores
FINALIZE_TWO_BRIEFLY = ["search.finalize.archs=2", "search.finalize.epochs=0.25", "search.finalize.screen_epochs=0.1",
                        "search.finalize.int8=false"]
#: no finalisation at all
NO_FINALIZATION = ["search.finalize.archs=0"]
#: no baselines scored
NO_BASELINES = ["baselines=[]"]
#: a classification smoke search in seconds: a sliver of the data, one epoch, two generations of four, two archs
#: finalised briefly, no baselines
SEARCH_IN_SECONDS = [*TRAIN_ON_256, *SCORE_ON_128, "train.epochs=1", *EVOLVE_TWO_GENERATIONS, *FINALIZE_TWO_BRIEFLY,
                     *NO_BASELINES]

_home = tempfile.mkdtemp(prefix="vpunas-test-home-")
os.environ["HOME"] = _home
os.environ.setdefault("NNI_EXPERIMENT_DIR", os.path.join(_home, "nni-experiments"))
if platform.machine() in ("x86_64", "AMD64"):
    # Float sums differ between torch's AVX2 and AVX-512 kernels (ATen's and oneDNN's): held to AVX2, more kinds
    # of x86 CPU round alike and share golden files (tests/golden.py). Read when torch first dispatches, so set
    # before any test imports it; subprocesses inherit them.
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
    os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX2")


@pytest.fixture(autouse=True, scope="session")
def _process_settings():
    import torch

    from nas.runtime import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()


def vector_rows(name: str) -> list[dict]:
    """The rows of the reference-vector CSV `name` (a path below `VPUNN_VECTORS`)."""
    with open(VPUNN_VECTORS / name, newline="") as fh:
        return list(csv.DictReader(fh))


def vector_rows_by_device(name: str, devices) -> dict[str, list[dict]]:
    """The rows of the reference-vector CSV `name` of each of `devices`."""
    rows = vector_rows(name)
    return {d: [r for r in rows if r["device"] == d] for d in devices}


def nn_tolerance(ref):
    """How far NN cycles may lie from the library's: max(1 cycle, 1e-5 relative), since a plain float32 matrix
    product does not reproduce its dot-product order (docs/vpunn.md §10)."""
    import numpy as np

    return np.maximum(1, 1e-5 * ref)


@pytest.fixture(scope="module")
def matrix(rows):
    """The workload matrix of a DPU test module's `rows`."""
    from hw_cost.vpunn import workload_from_row
    from hw_cost.vpunn.workload import workloads_to_matrix

    return workloads_to_matrix([workload_from_row(r) for r in rows])


def assert_descriptors_bit_exact(rows: list[dict], matrix, desc: list[dict], version: int, size: int) -> None:
    """The descriptors of interface `version` of the sanitized workloads equal the reference rows `desc`
    (`id`, `d0`...) bit for bit; `rows` / `matrix` are the reference workloads the ids point into."""
    import numpy as np

    from hw_cost.vpunn.descriptors import encode
    from hw_cost.vpunn.sanitizer import sanitize

    by_id = {r["id"]: i for i, r in enumerate(rows)}
    idx = [by_id[d["id"]] for d in desc]
    ref = np.array([[float(v) for k, v in d.items() if k != "id"] for d in desc], dtype=np.float32)
    got = encode(sanitize(matrix[idx]), version)
    assert got.shape == (len(desc), size)
    mismatch = np.nonzero((got != ref).any(axis=1))[0]
    assert len(mismatch) == 0, [desc[i]["id"] for i in mismatch[:5]]


def small_mobilenet_space(**overrides):
    """A two-stage MobileNet space of 1x28x28 inputs (`MobileNetSpaceConfig` fields in `overrides`)."""
    from search_spaces import build_space
    from search_spaces.mobilenet import MobileNetSpaceConfig, MobileNetStageConfig

    overrides.setdefault("stages", [MobileNetStageConfig(16, 1, [1, 2]), MobileNetStageConfig(24, 2, [2, 3])])
    cfg = MobileNetSpaceConfig(stem_width=8, stem_stride=2, first_width=8, head_width=32, **overrides)
    return build_space(cfg, input_shape=(1, 28, 28), num_outputs=10)


@functools.cache
def toy_problem() -> tuple:
    """(space, target arch) of the search strategies' toy problem: `small_mobilenet_space`, whose optimum is one
    sampled arch (`toy_record`)."""
    import numpy as np

    space = small_mobilenet_space()
    return space, space.sample(np.random.default_rng(42))


def toy_record(arch: dict):
    """The toy problem's candidate of `arch`: score = closeness to the target (optimum 0 there); latency: the
    arch's total gene value."""
    import numpy as np

    from nas.records import Candidate
    from search_spaces import arch_key

    space, target = toy_problem()
    genes, target_genes = space.encode(arch), space.encode(target)
    active = space.encode(space.decode(genes))  # canonical genes
    return Candidate(arch, arch_key(arch), "score", -float(np.abs(active - target_genes).sum()),
                     float(genes.sum()) + 1.0, "toy", params=0, macs=0)


def made_up_candidate(id: int, latency_ms: float, *, score: float = 0.0, test: float | None = None,
                      final_test: float | None = None, metric: str = "top1"):
    """A candidate of a made-up arch (`{"a": id}`) with the figures a report's test gives: `test` its inherited
    test score, `final_test` its finalised one (None: not finalised)."""
    from nas.records import Candidate, FinalScores
    from search_spaces import arch_key

    arch = {"a": id}
    final = None if final_test is None else FinalScores(final_test, {metric: final_test}, epochs=1)
    return Candidate(arch, arch_key(arch), metric, score, latency_ms, "toy", params=0, macs=0, id=id,
                     test_score=test, final=final)


def made_up_baseline(name: str, test: float, latency_ms: float, type: str = "subnet", arch: dict | None = None,
                     device_ms: dict | None = None):
    """A baseline result with the figures a report's test gives (top-1 on the test split)."""
    from nas.records import BaselineResult

    return BaselineResult(name, type, arch or {}, "top1", None, {"top1": test}, latency_ms, "toy", params=0, macs=0,
                          note="", device_ms=device_ms or {})


def vpunn_layer_of_row(r: dict):
    """The `dpu_layer` of a row of the VPUNN layer vectors (vpunn_layer.csv, npu45_layer.csv)."""
    from hw_cost.vpunn import ActivationFunction, DataType, Operation, VPUDevice, dpu_layer

    g = lambda k: int(r[k])  # noqa: E731
    return dpu_layer(VPUDevice[r["device"]], Operation[r["operation"]], (g("in_w"), g("in_h"), g("in_c")),
                     (g("out_w"), g("out_h"), g("out_c")), kernel=(g("k_w"), g("k_h")), stride=(g("s_w"), g("s_h")),
                     padding=(g("pad_top"), g("pad_bottom"), g("pad_left"), g("pad_right")),
                     dtype=DataType[r["in_dtype"]], out_dtype=DataType[r["out_dtype"]],
                     activation=ActivationFunction[r["activation"]])


def int_list(text: str) -> str:
    """A vector file's ";"-separated numbers as integers ("" stays "")."""
    return ";".join(str(int(float(v))) for v in text.split(";")) if text else ""


def sampled_archs(space, count: int = 20, seed: int = 0) -> list[dict]:
    """`count` random archs of `space`, each checked to be plain JSON and to round-trip through its genes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    archs = [space.sample(rng) for _ in range(count)]
    for arch in archs:
        assert json.loads(json.dumps(arch)) == arch
        assert space.decode(space.encode(arch)) == arch
    return archs


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, worker_id):
    """The classification smoke config run end to end once per test session (search, finalisation, report): the
    suite's processes share it, the first to need it runs it while the others wait. Tests read it, or copy it to
    change it."""
    from nas.cli import main
    from nas.rundir import RunDir

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out, done = shared / "smoke_run", shared / "smoke_run.done"
    with open(shared / "smoke_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # a run left half-written by a process that failed
            assert main(["search", SMOKE, "--out", str(out), "--no-progress"]) == 0
            done.touch()
    return RunDir(out)


def assert_candidates_unchanged(run, config_name: str) -> None:
    """The run's resolved config and candidates.csv against the golden files of `config_name`: the config exactly,
    the candidates byte for byte on a kind of machine that has its own, close elsewhere (tests/golden.py says what
    each check guards)."""
    import golden

    golden.assert_config_unchanged(run.config, config_name)
    golden.assert_candidates_unchanged(run.candidates, config_name)
