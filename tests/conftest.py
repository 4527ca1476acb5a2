"""Shared test settings: a private HOME (NNI, OpenVINO and ONNX Runtime write there), one torch thread, the
allocator setting of the CLI (`nas.runtime`) and, on x86, torch's CPU kernels held to AVX2."""
from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
#: reference outputs of the official VPUNN runtime that the VPUNN tests compare against (a copy, see its README)
VPUNN_VECTORS = REPO / "tests" / "data" / "vpunn-vectors"
SMOKE = str(CONFIGS / "fmnist_mobilenet_smoke.yaml")

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
def smoke_run(tmp_path_factory):
    """The classification smoke config run end to end once per session (search, finalisation, report)."""
    from nas.cli import main
    from nas.rundir import RunDir

    out = tmp_path_factory.mktemp("runs") / "smoke"
    assert main(["search", SMOKE, "--out", str(out), "--no-progress"]) == 0
    return RunDir(out)


def assert_candidates_unchanged(run, config_name: str) -> None:
    """The run's resolved config and candidates.csv against the golden files of `config_name`: the config exactly,
    the candidates byte for byte on a kind of machine that has its own, close elsewhere (tests/golden.py says what
    each check guards)."""
    import golden

    golden.assert_config_unchanged(run.config, config_name)
    golden.assert_candidates_unchanged(run.candidates, config_name)
