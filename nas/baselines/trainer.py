"""Baselines trained from scratch: one network under the supernet trainer's recipe (`train` section), for
`matched_epochs` or the entry's own budget, checkpointed so that an interrupted run resumes it."""
from __future__ import annotations

import copy
import dataclasses
import logging
import re

import torch
import torch.nn as nn

from search_spaces import Supernet
from tasks.data import to_device

from ..baseline_entries import TrainedBaseline, matched_epochs
from ..runtime import check_finite
from ..search_context import SearchContext
from ..training.captured_step import CapturedTrainStep, capture_refusal
from ..training.supernet_training import SupernetTrainer, TrainConfig

logger = logging.getLogger(__name__)

__all__ = ["FixedNetwork", "StandaloneTrainer", "matched_epochs", "baseline_recipe", "train_from_scratch"]


class FixedNetwork(Supernet):
    """A standalone network as a one-arch supernet, so that the supernet trainer's recipe trains it."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def set_active(self, arch: dict) -> None:
        """There is one arch only."""

    def extract(self, arch: dict) -> nn.Module:
        return copy.deepcopy(self.net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class StandaloneTrainer(SupernetTrainer):
    """The supernet recipe (optimizer, schedule, EMA, steps, checkpoints) applied to one network: no sandwich. On
    CUDA its step is replayed as a CUDA graph where `capture_refusal` allows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        refusal = ("several processes" if self.dist.enabled
                   else capture_refusal(self.device, self.optimizer, self.config.cuda_graphs))
        if refusal and self.device.type == "cuda":
            logger.info("%s trains eagerly on the GPU: %s", self.progress_label, refusal)
        self.captured = None if refusal else CapturedTrainStep(self.supernet, self.optimizer, self._loss,
                                                               self.config.grad_clip)

    def _loss(self, out: torch.Tensor, y: torch.Tensor, _teacher_out: None) -> torch.Tensor:
        return self.task.loss(out, y)

    def step_archs(self, epoch: int, step: int) -> list[dict]:
        return [{}]

    def train_step(self, x: torch.Tensor, y: torch.Tensor, archs: list[dict]) -> float:
        if self.captured is None:
            return super().train_step(x, y, archs)
        self.supernet.train()
        loss = self.captured(to_device(x, self.device), to_device(y, self.device)).item()
        check_finite([loss], f"{self.progress_label} training", self.global_step, "train.lr", self.config.lr, len(x))
        return loss


def baseline_recipe(ctx: SearchContext, baseline: TrainedBaseline) -> tuple[TrainConfig, str]:
    """The run's recipe for `matched_epochs`, or for the entry's own `epochs` / `train_steps`; with its budget in
    words."""
    if baseline.train_steps is not None:
        epochs = baseline.train_steps / ctx.task.train_batches.steps_per_epoch()
        return dataclasses.replace(ctx.config.train, epochs=epochs), "the run's recipe, the entry's own train_steps"
    if baseline.epochs is not None:
        epochs = float(baseline.epochs)
        return (dataclasses.replace(ctx.config.train, epochs=epochs),
                f"the run's recipe for the entry's own {epochs:g} epochs")
    epochs, words = matched_epochs(ctx.config)
    return dataclasses.replace(ctx.config.train, epochs=epochs), f"the run's recipe for {epochs:g} epochs, {words}"


def train_from_scratch(ctx: SearchContext, name: str, net: nn.Module, recipe: TrainConfig,
                        label: str | None = None) -> tuple[nn.Module, int]:
    """`net` trained with `recipe` on the run's batches, checkpointed under checkpoint/ as `name` (an interrupted
    run resumes it); returns the weights to evaluate (the EMA when the recipe keeps one) and the steps trained.
    `label`: what the progress bar calls it (default: the baseline's name)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    trainer = StandaloneTrainer(ctx.space, FixedNetwork(net), ctx.task, recipe, ctx.config.seed,
                                ctx.run_dir.checkpoint_dir / f"baseline_{slug}.pt", device=ctx.device)
    trainer.progress_label = label or f"baseline {name}"
    trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
    return trainer.trained_model.net.eval(), trainer.total_steps
