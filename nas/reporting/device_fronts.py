"""One search, several NPU generations: a run's front costed on each device, and where its ranking changes.

`vpunas cost RUN_DIR --devices VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0` costs every arch of a run that has a test figure
(its Pareto front and its finalised archs) on each device's VPUNN model and prints:

* each arch's test figure and latency per device (with the arch's rank on that device);
* the Kendall tau between the devices' latency rankings (1: the same order everywhere);
* per quality level (the front's own test figures, best first), the fastest arch reaching it on each device.

When the fastest arch at a level differs between devices, one search does not serve those chips alike: search
for each (`cost.model=vpunn:DEVICE`).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

import numpy as np

from ..config import RunConfig, load_config
from ..context import build_task_and_space, npu_generation_model
from ..records import Candidate, read_candidates
from ..rundir import RunDir

__all__ = ["DeviceTable", "cost_front_on_devices"]

@dataclass
class DeviceTable:
    """A run's front on several devices: `latency_ms[device][i]` is arch `ids[i]`'s latency there."""

    metric: str
    devices: list[str]
    ids: list[int]
    quality: list[float]
    latency_ms: dict[str, np.ndarray]

    def tau(self, a: str, b: str) -> float | None:
        """Kendall tau between the latency rankings of devices a and b (None without spread)."""
        from scipy.stats import kendalltau

        value = kendalltau(self.latency_ms[a], self.latency_ms[b]).statistic
        return None if np.isnan(value) else float(value)

    def fastest_reaching(self, level: float) -> dict[str, int]:
        """Per device, the id of the fastest arch whose test figure is at least `level`."""
        ok = np.array(self.quality) >= level
        return {d: self.ids[int(np.flatnonzero(ok)[np.argmin(self.latency_ms[d][ok])])] for d in self.devices}

    def levels(self) -> list[tuple[float, dict[str, int]]]:
        """(level, fastest arch per device) for each distinct test figure of the front, best first."""
        return [(level, self.fastest_reaching(level)) for level in sorted(set(self.quality), reverse=True)]

    def lines(self) -> list[str]:
        """The printed report (see the module docstring)."""
        ranks = {d: np.argsort(np.argsort(self.latency_ms[d])) + 1 for d in self.devices}
        head = f"{'id':>6} {'test ' + self.metric:>12}" + "".join(f" {d + ' us':>13} {'rank':>4}" for d in self.devices)
        out = [head]
        for i in np.argsort(self.latency_ms[self.devices[0]]):
            out.append(f"{self.ids[i]:>6} {self.quality[i]:>12.2f}" + "".join(
                f" {self.latency_ms[d][i] * 1e3:>13.2f} {ranks[d][i]:>4}" for d in self.devices))
        out.append("")
        out.append("Kendall tau between the devices' latency rankings:")
        for a, b in combinations(self.devices, 2):
            tau = self.tau(a, b)
            out.append(f"  {a} vs {b}: {'n/a' if tau is None else f'{tau:.3f}'}")
        out.append("")
        out.append(f"Fastest arch at each test {self.metric} level:")
        levels = self.levels()
        for level, best in levels:
            out.append(f"  >= {level:.2f}: " + ", ".join(f"{d} arch {best[d]}" for d in self.devices))
        differ = sum(len(set(best.values())) > 1 for _, best in levels)
        out.append(f"The fastest arch differs between devices at {differ} of {len(levels)} levels: "
                   + ("one search serves all these devices." if differ == 0 else
                      "search for each device (cost.model=vpunn:DEVICE) where it matters."))
        return out


def cost_front_on_devices(run_dir: RunDir, devices: Sequence[str], *, dtype: str | None = None,
                          model_dir: str | None = None, candidates: Sequence[Candidate] | None = None,
                          config: RunConfig | None = None, space=None) -> DeviceTable:
    """Cost the archs of a run that have a test figure on each device's VPUNN model (`vpunn:DEVICE`), with the
    run's precision and model folder unless `dtype` / `model_dir` are given.

    `candidates` (the run's), `config` (its config) and `space` (its search space) spare reading and rebuilding
    them when the caller has them; rebuilding the space loads the task's data."""
    candidates = read_candidates(run_dir.candidates) if candidates is None else candidates
    front = [c for c in candidates if c.test_figure is not None]
    config = load_config(run_dir.config) if config is None else config
    if space is None:
        _, space = build_task_and_space(config)
    blocks = [space.blocks(c.arch) for c in front]
    latency = {}
    for device in devices:
        model = npu_generation_model(config.cost, device, dtype=dtype, model_dir=model_dir)
        flat = model.block_latencies_ms([b for arch in blocks for b in arch])
        bounds = np.cumsum([0] + [len(arch) for arch in blocks])
        latency[device] = np.array([flat[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
    return DeviceTable(candidates[0].metric, list(devices), [c.id for c in front], [c.test_figure for c in front],
                       latency)
