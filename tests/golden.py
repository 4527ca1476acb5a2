"""Regression checks of the smoke runs' candidates.csv that hold on any CPU.

Float sums differ between CPUs (the BLAS and oneDNN kernels torch picks for AVX2, AVX-512, AMX, ARM ...), and a
smoke run's few training steps amplify a last-bit difference into a point of top-1. So one golden file cannot
pin a run on every machine. Two checks instead:

* **Exact, per kind of machine.** `numerics_fingerprint()` hashes a few training steps of the smoke spaces' own
  layers to the bit: machines with the same fingerprint compute the same floats. `golden/<fingerprint>/` holds the
  candidates.csv each smoke config wrote on such a machine, and a run there must equal it byte for byte: any change
  of behaviour (an lr, a sampling order, a reorganisation that moves one float) fails.
* **Exact, everywhere: the resolved config.** The run's config.yaml (every setting the run used, defaults
  included; paths made portable) equals `golden/<config>.config.yaml`: a changed default (an lr, an epoch count,
  a population) fails on any machine, whatever its floats.
* **Close, anywhere else.** On a machine of another fingerprint, what no float rounding touches must still be
  equal (the columns, the rows, the first generation's archs and every arch's latency, params and MACs, the
  number of finalised archs and their epochs) and the scores of the archs both runs evaluated within
  `SCORE_TOLERANCE` of the golden run (a broken pipeline lands far outside it). The same-machine determinism is
  held by tests/test_interrupted_runs.py (killed and resumed runs equal the uninterrupted one, byte for byte).

A new kind of machine records its own files with `VPUNAS_RECORD_GOLDEN=1 .venv/bin/python -m pytest` (after the
close check passed); commit them. A change of results on purpose: delete this machine's file of that config,
record (the close check against another machine's file must pass: recording needs one to compare with), delete the
other machines' files of that config, and say why in the commit.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import platform
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"

#: how far a score of the same arch may lie from the golden run's on another kind of CPU: top-1 points, PSNR dB.
#: Measured (2026-12-05): an Intel Xeon with AMX against an AMD EPYC with AVX-512, both held to AVX2, differed by up
#: to 3.75 points of smoke top-1 (500 val images after a third of an epoch; the ResNet smoke) and not at all in
#: smoke PSNR.
SCORE_TOLERANCE = {"top1": 6.0, "psnr": 0.3}
#: columns that no float rounding of training touches
EXACT_COLUMNS = ("latency_ms", "cost_model", "params", "macs")


def _probe_steps(space, input_shape: tuple[int, int, int], batch: int, digest) -> None:
    """Two SGD steps of `space`'s largest and smallest subnets on fixed random data, every weight and output
    hashed into `digest`."""
    import torch

    for name in ("largest", "smallest"):
        torch.manual_seed(0)
        net = space.fresh_network(getattr(space, name)())
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        x = torch.randn(batch, *input_shape)
        for _ in range(2):
            out = net(x)
            loss = out.float().square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            digest.update(net(x).numpy().tobytes())
        for tensor in net.state_dict().values():
            digest.update(tensor.detach().numpy().tobytes())


def numerics_fingerprint() -> str:
    """12 hex digits naming how this machine (CPU, BLAS, torch build, the suite's thread and ISA settings)
    rounds the smoke runs' floats."""
    import torch

    from nas.config import load_config
    from search_spaces import build_space

    digest = hashlib.sha256(f"{platform.machine()} torch {torch.__version__}".encode())
    shapes = {"classification": ((1, 28, 28), 10, 16), "super_resolution": ((3, 12, 12), 3, 4)}
    for config_name in ("fmnist_mobilenet_smoke", "fmnist_resnet_smoke", "sr_edsr_x2_smoke"):
        config = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{config_name}.yaml")
        input_shape, outputs, batch = shapes[config.task.type]
        space = build_space(config.space, input_shape=input_shape, num_outputs=outputs)
        _probe_steps(space, input_shape, batch, digest)
    return digest.hexdigest()[:12]


@functools.cache
def fingerprint() -> str:
    """`numerics_fingerprint()`, computed once per process."""
    return numerics_fingerprint()


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _first_difference(got: list[str], want: list[str]) -> str:
    diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if diff is None:
        return f"{len(got)} lines, golden {len(want)}"
    return f"line {diff}: {got[diff]!r} instead of {want[diff]!r}"


def assert_close_to(got_text: str, want_text: str, what: str) -> None:
    """The float-rounding-free parts of two candidates.csv equal, the scores of their shared archs close."""
    got, want = _rows(got_text), _rows(want_text)
    assert got and want and list(got[0]) == list(want[0]), f"{what}: columns differ"
    assert len(got) == len(want), f"{what}: {len(got)} archs evaluated, golden {len(want)}"
    first = [r["arch"] for r in want if r["generation"] == "0"]
    assert [r["arch"] for r in got if r["generation"] == "0"] == first, f"{what}: first generation differs"
    metric = next(m for m in SCORE_TOLERANCE if m in got[0])
    by_arch = {r["arch"]: r for r in want}
    shared = [(r, by_arch[r["arch"]]) for r in got if r["arch"] in by_arch]
    for mine, theirs in shared:
        for column in EXACT_COLUMNS:
            assert mine[column] == theirs[column], f"{what}: {column} of {mine['arch']} differs"
        for column in (metric, f"test_{metric}", f"final_{metric}", f"final_test_{metric}"):
            if mine[column] and theirs[column]:
                off = abs(float(mine[column]) - float(theirs[column]))
                assert off <= SCORE_TOLERANCE[metric], (
                    f"{what}: {column} of {mine['arch']} is {mine[column]}, golden {theirs[column]}")
    finalised = sorted(r["final_epochs"] for r in got if r["final_epochs"])
    assert finalised == sorted(r["final_epochs"] for r in want if r["final_epochs"]), (
        f"{what}: finalised archs or their epochs differ")


def _portable_config(config_yaml: Path) -> str:
    """A run's resolved config.yaml without what depends on the machine: the data folder, the checkout's path."""
    from omegaconf import OmegaConf

    config = OmegaConf.load(config_yaml)
    config.task.root = "<data>"
    text = OmegaConf.to_yaml(config)
    return text.replace(str(Path(__file__).resolve().parents[1]), "<repo>")


def assert_config_unchanged(config_yaml: Path, config_name: str) -> None:
    """The resolved config of a smoke run equals the golden one, on any machine."""
    got = _portable_config(Path(config_yaml))
    golden = GOLDEN / f"{config_name}.config.yaml"
    if not golden.exists() and os.environ.get("VPUNAS_RECORD_GOLDEN") == "1":
        golden.write_text(got)
    assert golden.exists(), f"no golden {golden.name}: record one with VPUNAS_RECORD_GOLDEN=1"
    want = golden.read_text()
    assert got == want, (f"the resolved config of {config_name} changed: "
                         f"{_first_difference(got.splitlines(), want.splitlines())}")


def assert_candidates_unchanged(candidates: Path, config_name: str) -> None:
    """`candidates` (a smoke run's candidates.csv) against the golden files: byte for byte where this machine's
    fingerprint has its own, close to the golden run elsewhere (then recorded under this machine's fingerprint
    when VPUNAS_RECORD_GOLDEN=1)."""
    got = Path(candidates).read_text()
    name = f"{config_name}.candidates.csv"
    own = GOLDEN / fingerprint() / name
    if own.exists():
        want = own.read_text()
        assert got == want, (f"candidates.csv of {config_name} changed on this machine (fingerprint "
                             f"{fingerprint()}): {_first_difference(got.splitlines(), want.splitlines())}")
        return
    others = sorted(GOLDEN.glob(f"*/{name}"))
    assert others, f"no golden {name}: record one with VPUNAS_RECORD_GOLDEN=1"
    assert_close_to(got, others[0].read_text(), f"{config_name} against {others[0].parent.name}")
    if os.environ.get("VPUNAS_RECORD_GOLDEN") == "1":
        own.parent.mkdir(parents=True, exist_ok=True)
        own.write_text(got)
        (own.parent / "machine.json").write_text(json.dumps(_machine(), indent=1) + "\n")


def _machine() -> dict:
    """What the golden files of a fingerprint were recorded on, for the people who read them."""
    import torch

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": model, "machine": platform.machine(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
