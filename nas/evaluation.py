"""Scoring an architecture: task metric with inherited weights, latency on the cost model, params and MACs."""
from __future__ import annotations

import logging
from typing import Callable

import torch.nn as nn

from hw_cost import Block, CostModel
from search_spaces import SearchSpace, Supernet, arch_key

from .supernet_training import recalibrate_batchnorm, to_channels_last

logger = logging.getLogger(__name__)

__all__ = ["ArchEvaluator", "CachedEvaluator", "complexity", "test_scores"]


def complexity(blocks: list[Block]) -> tuple[int, int]:
    """(params, MACs) of the deployed network (batch norm folded), from its blocks' layer descriptors."""
    layers = [layer for block in blocks for layer in block.layers()]
    return sum(layer.params for layer in layers), sum(layer.macs for layer in layers)


def test_scores(task, model: nn.Module) -> dict:
    """test_<metric> (and, for tasks that report more, e.g. test_ssim) of a model."""
    scores = task.scores(model, "test") if hasattr(task, "scores") else {task.metric: task.evaluate(model, "test")}
    return {f"test_{k}": round(float(v), 4) for k, v in scores.items()}


class ArchEvaluator:
    """Evaluates subnets of a trained supernet.

    The subnet is extracted as a standalone module (so what is scored is exactly what would be exported), its
    batch norms are recalibrated on the task's calibration images, then it is evaluated on a split.
    """

    def __init__(self, space: SearchSpace, supernet: Supernet, task, cost_model: CostModel,
                 channels_last: bool = True):
        self.space, self.supernet, self.task, self.cost_model = space, supernet, task, cost_model
        self.channels_last = channels_last

    def subnet(self, arch: dict) -> nn.Module:
        """The standalone subnet of `arch` with inherited weights and recalibrated batch norm."""
        sub = self.supernet.extract(arch)
        if self.channels_last:
            to_channels_last(sub)
        return recalibrate_batchnorm(sub, self.task.calibration_batches(), self.channels_last)

    def metric(self, arch: dict, split: str = "val") -> float:
        return float(self.task.evaluate(self.subnet(arch), split))

    def latency_ms(self, arch: dict) -> float:
        return self.cost_model.latency_ms(self.space.blocks(arch))

    def evaluate(self, arch: dict, subnet: nn.Module | None = None) -> dict:
        """The record of `arch`; `subnet` is its `self.subnet(arch)` when the caller already built it."""
        arch = self.space.validate(arch)
        subnet = subnet if subnet is not None else self.subnet(arch)
        params, macs = complexity(self.space.blocks(arch))
        metric = float(self.task.evaluate(subnet, "val"))
        return {"key": arch_key(arch), "arch": arch, self.task.metric: round(metric, 4),
                "latency_ms": round(self.latency_ms(arch), 6), "cost_model": self.cost_model.name,
                "params": params, "macs": macs}


class CachedEvaluator:
    """Wraps an evaluation function with the run's journal: finished evaluations are never repeated.

    `records` holds every evaluation in the order it was first made; an arch's `id` is its position there, so
    replaying a search after a restart assigns the same ids.
    """

    def __init__(self, evaluate: Callable[[dict], dict], journal, key: Callable[[dict], str] = arch_key):
        self._evaluate, self.journal, self._key = evaluate, journal, key
        self.records: list[dict] = journal.load()
        self._by_key = {r["key"]: r for r in self.records}
        self.new_evaluations = 0

    def __call__(self, arch: dict, **extra) -> dict:
        key = self._key(arch)
        if key not in self._by_key:
            record = dict(self._evaluate(arch), id=len(self.records), **extra)
            self.journal.append(record)
            self.records.append(record)
            self._by_key[key] = record
            self.new_evaluations += 1
        return self._by_key[key]

    def __contains__(self, arch: dict) -> bool:
        return self._key(arch) in self._by_key
