"""What a run works with: its config's task, search space and cost model on its device, among its processes
(`SearchContext`, built by `build_context`); every room that runs archs of a run starts from one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hw_cost import CostModel, load_cost_model
from hw_cost.lut import LutCostModel
from search_spaces import SearchSpace, build_space
from tasks import build_task

from .config import ConfigError, RunConfig
from .distributed import Distributed, current
from .latency.lut_validation import load_run_correction
from .randomness import RunRandom
from .rundir import RunDir

__all__ = ["SearchContext", "build_context", "build_task_and_space", "resolve_device"]


@dataclass
class SearchContext:
    """What a strategy works with: `device` is where models train and run, `dist` the run's processes."""

    config: RunConfig
    run_dir: RunDir
    task: object
    space: SearchSpace
    cost_model: CostModel
    progress: bool = True
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dist: Distributed = field(default_factory=Distributed)

    @property
    def random(self) -> RunRandom:
        """The run's random streams, derived from its seed (`nas.randomness`)."""
        return RunRandom(self.config.seed)


def resolve_device(device: str) -> str:
    """The config's `device` as a run uses it: "auto" is "cuda" when torch finds a CUDA device, else "cpu"."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda, but torch finds no CUDA device here (set device: cpu or auto)")
    return device


def build_task_and_space(config: RunConfig):
    """The config's task, and its search space shaped by the task's data (input shape, outputs)."""
    task = build_task(config.task, seed=config.seed)
    return task, build_space(config.space, input_shape=task.input_shape, num_outputs=task.num_outputs)


def build_context(config: RunConfig, run_dir: RunDir, progress: bool = True) -> SearchContext:
    """The run's task, space and cost model, on the config's device (the CPU where CUDA is missing: a finished
    run's config read back elsewhere, e.g. to export), among the processes of `nas.distributed.current()`."""
    torch.set_num_threads(config.threads)
    task, space = build_task_and_space(config)
    cost_model = load_cost_model(config.cost.model, **config.cost.options())
    if isinstance(cost_model, LutCostModel):
        load_run_correction(cost_model, run_dir)  # the run's latencies came from the corrected table
    dist = current()
    cuda = config.device in ("cuda", "auto") and torch.cuda.is_available()
    device = torch.device("cuda", dist.local_rank) if cuda else torch.device("cpu")
    return SearchContext(config, run_dir, task, space, cost_model, progress and dist.is_main, device, dist)
