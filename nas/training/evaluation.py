"""Scoring an architecture: task metric with inherited weights, latency on the cost model, params and MACs."""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch
import torch.nn as nn

from hw_cost import CostModel, complexity
from search_spaces import SearchSpace, Supernet, arch_key
from tasks import Task
from tasks.data import to_device

from ..distributed import Distributed
from ..records import Candidate
from .supernet_training import device_of, recalibrate_batchnorm, to_channels_last

logger = logging.getLogger(__name__)

__all__ = ["ArchEvaluator", "CachedEvaluator", "journaled_candidates", "scores_on_test", "test_scores",
           "fed_from_cpu"]


class _FedFromCpu(nn.Module):
    """A model on an accelerator as the tasks' CPU loops call it: inputs copied over, outputs copied back."""

    def __init__(self, model: nn.Module, device: torch.device):
        super().__init__()
        self.model, self.device = model, device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(to_device(x, self.device)).cpu()


def fed_from_cpu(model: nn.Module) -> nn.Module:
    """`model` callable with CPU batches (a task's evaluation loop) wherever its weights are; on the CPU the model
    itself."""
    device = device_of(model)
    return model if device.type == "cpu" else _FedFromCpu(model, device)


def scores_on_test(task: Task, model: nn.Module) -> dict[str, float]:
    """The task's scores of a model on the test split by name: its metric (and, for tasks that report more, e.g.
    ssim)."""
    return {k: round(float(v), 4) for k, v in task.scores(fed_from_cpu(model), "test").items()}


def test_scores(task: Task, model: nn.Module) -> dict:
    """test_<metric> (and, for tasks that report more, e.g. test_ssim) of a model."""
    return {f"test_{k}": v for k, v in scores_on_test(task, model).items()}


class ArchEvaluator:
    """Evaluates subnets of a trained supernet.

    The subnet is extracted as a standalone module (so what is scored is exactly what would be exported), its
    batch norms are recalibrated on the task's calibration images, then it is evaluated on a split. Subnets
    live on the supernet's device (`device`).
    """

    def __init__(self, space: SearchSpace, supernet: Supernet, task, cost_model: CostModel,
                 channels_last: bool = True):
        self.space, self.supernet, self.task, self.cost_model = space, supernet, task, cost_model
        self.channels_last = channels_last
        self.device = device_of(supernet)

    def subnet(self, arch: dict) -> nn.Module:
        """The standalone subnet of `arch` with inherited weights and recalibrated batch norm."""
        sub = self.supernet.extract(arch).to(self.device)
        if self.channels_last:
            to_channels_last(sub)
        return recalibrate_batchnorm(sub, self.task.calibration_batches(), self.channels_last)

    def metric(self, arch: dict, split: str = "val") -> float:
        return float(self.task.evaluate(fed_from_cpu(self.subnet(arch)), split))

    def latency_ms(self, arch: dict) -> float:
        return self.cost_model.latency_ms(self.space.blocks(arch))

    def evaluate(self, arch: dict, subnet: nn.Module | None = None) -> Candidate:
        """The candidate of `arch` (not yet numbered); `subnet` is its `self.subnet(arch)` when the caller already
        built it."""
        arch = self.space.validate(arch)
        subnet = subnet if subnet is not None else self.subnet(arch)
        params, macs = complexity(self.space.blocks(arch))
        metric = float(self.task.evaluate(fed_from_cpu(subnet), "val"))
        return Candidate(arch, arch_key(arch), self.task.metric, round(metric, 4), round(self.latency_ms(arch), 6),
                         self.cost_model.name, params, macs)


def _same(entry):
    return entry


class CachedEvaluator:
    """Wraps an evaluation function with the run's journal: finished evaluations are never repeated.

    `records` holds every evaluation in the order it was first made; an arch's `id` is its position there, so
    replaying a search after a restart assigns the same ids. With several processes (`dist`), `evaluate_all`
    spreads a list's new evaluations over them; every process keeps all records, and rank 0 writes the journal.
    A record is journaled as `encode(record)` (a dict with its `key`; the `id` and the `extra` fields of
    `evaluate_all` added) and read back with `decode` (default: records are those dicts; `journaled_candidates`:
    `Candidate`s).
    """

    def __init__(self, evaluate: Callable[[Any], Any], journal, key: Callable[[Any], str] = arch_key, *,
                 dist: Distributed | None = None, encode: Callable[[Any], dict] = _same,
                 decode: Callable[[dict], Any] = _same):
        self._evaluate, self.journal, self._key = evaluate, journal, key
        self._encode, self._decode = encode, decode
        self.dist = dist if dist is not None else Distributed()
        entries = journal.load()
        self.records: list = [decode(entry) for entry in entries]
        self._by_key = {entry["key"]: record for entry, record in zip(entries, self.records)}
        self.new_evaluations = 0

    def _add(self, key: str, result, extra: dict) -> None:
        entry = dict(self._encode(result), id=len(self.records), **extra)
        record = self._decode(entry)
        if self.dist.is_main:
            self.journal.append(entry)
        self.records.append(record)
        self._by_key[key] = record
        self.new_evaluations += 1

    def __call__(self, arch: dict, **extra):
        """The record of `arch`, evaluated in this process if it is new."""
        key = self._key(arch)
        if key not in self._by_key:
            self._add(key, self._evaluate(arch), extra)
        return self._by_key[key]

    def evaluate_all(self, archs: list[dict], on_record: Callable[[], None] | None = None, **extra) -> list:
        """The records of `archs`, in order. The new ones (each once) are evaluated spread over the processes,
        each arch whole in one process, and recorded in the order of `archs`: ids, journal and records do not
        depend on the number of processes. One process journals each arch as soon as it is scored.
        `on_record()` follows each record (one process: as it is made; several: once they are gathered)."""
        on_record = on_record or (lambda: None)
        if not self.dist.enabled:
            records = []
            for arch in archs:
                records.append(self(arch, **extra))
                on_record()
            return records
        new = {}
        for arch in archs:
            new.setdefault(self._key(arch), arch)
        todo = [(key, arch) for key, arch in new.items() if key not in self._by_key]
        for (key, _), result in zip(todo, self.dist.map(self._evaluate, [arch for _, arch in todo])):
            self._add(key, result, extra)
        for _ in archs:
            on_record()
        return [self._by_key[self._key(arch)] for arch in archs]

    def __contains__(self, arch: dict) -> bool:
        return self._key(arch) in self._by_key


def journaled_candidates(evaluate: Callable[[Any], Candidate], journal, metric: str,
                         key: Callable[[Any], str] = arch_key, *, dist: Distributed | None = None) -> CachedEvaluator:
    """`evaluate` journaled in `journal` as the run's candidates (of the task's `metric`)."""
    return CachedEvaluator(evaluate, journal, key, dist=dist, encode=Candidate.journal_entry,
                           decode=lambda entry: Candidate.from_journal(entry, metric))
