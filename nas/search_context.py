"""`SearchContext`: what every stage of a run works with (its config's task, search space and cost model on its
device, among its processes). It sits in the core, below the rooms, so that every room names the type it receives;
`nas.context.build_context` builds it from a config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from hw_cost import CostModel, complexity
from search_spaces import SearchSpace
from tasks import Task

from .distributed import Distributed
from .randomness import RunRandom
from .rundir import RunDir

if TYPE_CHECKING:  # the config reads its sections into the rooms' settings, so it sits above them (nas/config.py)
    from .config import RunConfig

__all__ = ["SearchContext"]


@dataclass
class SearchContext:
    """What a strategy works with: `device` is where models train and run (the CPU for a context built by hand,
    as tests do), `dist` the run's processes."""

    config: RunConfig
    run_dir: RunDir
    task: Task
    space: SearchSpace
    cost_model: CostModel
    progress: bool = True
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dist: Distributed = field(default_factory=Distributed)

    @property
    def random(self) -> RunRandom:
        """The run's random streams, derived from its seed (`nas.randomness`)."""
        return RunRandom(self.config.seed)

    def latency_ms(self, arch: dict) -> float:
        """The latency of `arch` of the run's space on the run's cost model."""
        return self.cost_model.latency_ms(self.space.blocks(arch))

    def params(self, arch: dict) -> int:
        """The parameters of `arch` of the run's space, deployed (batch norm folded)."""
        return complexity(self.space.blocks(arch))[0]

    def macs(self, arch: dict) -> int:
        """The multiply-accumulates of `arch` of the run's space, deployed."""
        return complexity(self.space.blocks(arch))[1]
