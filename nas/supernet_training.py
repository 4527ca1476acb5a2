"""Supernet training with the sandwich rule, and batch-norm recalibration of subnets.

Each step trains the largest arch, the smallest arch and `sandwich_random` uniformly sampled archs on the same
batch, accumulating gradients before one optimizer step (Yu & Huang, "Universally Slimmable Networks", ICCV
2019; BigNAS, ECCV 2020). With `distill`, the smaller archs learn from the largest arch's outputs (in-place
distillation). Optimizer, schedule, EMA and augmentation are timm's.

Everything random in a step is drawn from (seed, epoch, step), so a run resumed from a mid-epoch checkpoint
continues bit for bit as if it had never stopped.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn as nn

from search_spaces import SearchSpace, Supernet
from tasks.data import DataError, batch_seed

from .rundir import atomic_torch_save, load_checkpoint
from .runtime import StopRequests, ThreadGovernor, check_finite

logger = logging.getLogger(__name__)

__all__ = ["TrainConfig", "SupernetTrainer", "load_trained_supernet", "recalibrate_batchnorm", "to_channels_last",
           "log_session_steps"]


@dataclass
class TrainConfig:
    """Supernet training recipe.

    Args:
        epochs: passes over the training split (fractions end the schedule inside an epoch).
        opt / lr / momentum / weight_decay: timm `create_optimizer_v2` arguments.
        sched / warmup_epochs / min_lr: timm `create_scheduler_v2`, stepped per update.
        sandwich_random: random archs per step besides the largest and the smallest.
        distill: smaller archs learn from the largest arch's outputs (in-place distillation).
        ema_decay: decay of timm's ModelEmaV3 of the supernet weights; 0 disables it. With EMA, subnets are
            evaluated with the averaged weights.
        grad_clip: clip the global gradient norm (0 = off).
        channels_last: run convolutions in NHWC, much faster for depthwise convs on CPU.
        checkpoint_every: steps between checkpoints (a checkpoint is also written at every epoch end).
    """

    epochs: float = 3
    opt: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 4e-5
    sched: str = "cosine"
    warmup_epochs: float = 0.2
    min_lr: float = 0.0
    sandwich_random: int = 1
    distill: bool = True
    ema_decay: float = 0.0
    grad_clip: float = 5.0
    channels_last: bool = True
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.epochs <= 0:
            raise ValueError("epochs: must be > 0")
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every: must be >= 1")
        for name in ("lr", "weight_decay", "warmup_epochs", "min_lr", "sandwich_random", "ema_decay", "grad_clip"):
            if not getattr(self, name) >= 0:  # NaN too
                raise ValueError(f"{name}: must be >= 0")


def to_channels_last(module: nn.Module) -> nn.Module:
    return module.to(memory_format=torch.channels_last)


class SupernetTrainer:
    """Trains a supernet on a task; checkpoints to `checkpoint_path` and resumes from it.

    Args:
        space / supernet: the search space and its supernet.
        task: gives `train_batches(epoch, start_step)`, `loss`, `distill_loss`.
        config: `TrainConfig`.
        seed: run seed (arch sampling, dropout).
        checkpoint_path: file of the training state; loaded when it exists.
    """

    def __init__(self, space: SearchSpace, supernet: Supernet, task, config: TrainConfig, seed: int,
                 checkpoint_path: Path):
        from timm.optim import create_optimizer_v2
        from timm.scheduler import create_scheduler_v2

        self.space, self.supernet, self.task, self.config, self.seed = space, supernet, task, config, seed
        self.checkpoint_path = Path(checkpoint_path)
        if config.channels_last:
            to_channels_last(supernet)
        self.steps_per_epoch = task.train_batches.steps_per_epoch()
        self.total_steps = max(1, round(config.epochs * self.steps_per_epoch))
        self.optimizer = create_optimizer_v2(supernet, opt=config.opt, lr=config.lr, weight_decay=config.weight_decay,
                                             momentum=config.momentum)
        self.scheduler, _ = create_scheduler_v2(
            self.optimizer, sched=config.sched, num_epochs=config.epochs, warmup_epochs=config.warmup_epochs,
            warmup_lr=config.lr * 0.01, min_lr=config.min_lr, step_on_epochs=False,
            updates_per_epoch=self.steps_per_epoch)
        self.ema = None
        if config.ema_decay > 0:
            from timm.utils import ModelEmaV3

            self.ema = ModelEmaV3(supernet, decay=config.ema_decay)
        self.global_step = 0
        self.largest, self.smallest = space.largest(), space.smallest()
        if self.checkpoint_path.exists():
            self._load()

    @property
    def done(self) -> bool:
        return self.global_step >= self.total_steps

    @property
    def trained_model(self) -> Supernet:
        """The weights to evaluate subnets with (the EMA when enabled)."""
        return self.ema.module if self.ema is not None else self.supernet

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"global_step": self.global_step, "model": self.supernet.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "ema": self.ema.module.state_dict() if self.ema is not None else None}

    def _load(self) -> None:
        state = load_checkpoint(self.checkpoint_path)
        self.supernet.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.ema is not None:
            self.ema.module.load_state_dict(state["ema"])
        self.global_step = state["global_step"]
        logger.info("resumed supernet training at step %d of %d", self.global_step, self.total_steps)

    def save(self) -> None:
        atomic_torch_save(self.state_dict(), self.checkpoint_path)

    # ------------------------------------------------------------------------------------------ training
    def step_archs(self, epoch: int, step: int) -> list[dict]:
        """Sandwich rule: largest, smallest, then random archs drawn from (seed, epoch, step)."""
        rng = np.random.default_rng([self.seed, epoch, step, 7])
        return [self.largest, self.smallest] + [self.space.sample(rng) for _ in range(self.config.sandwich_random)]

    def train_step(self, x: torch.Tensor, y: torch.Tensor, archs: list[dict]) -> float:
        """One optimizer step over `archs` on one batch; returns the largest arch's loss."""
        self.supernet.train()
        self.optimizer.zero_grad(set_to_none=True)
        teacher, losses = None, []
        for arch in archs:
            self.supernet.set_active(arch)
            out = self.supernet(x)
            if teacher is None or not self.config.distill:
                loss = self.task.loss(out, y)
            else:
                loss = self.task.distill_loss(out, teacher)
            if teacher is None:
                teacher = out.detach()
            losses.append(loss.item())
            loss.backward()
        check_finite(losses, "supernet training", self.global_step)
        if self.config.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.supernet.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return losses[0]

    def train(self, progress: bool = True, on_step: Callable[[int], None] | None = None) -> None:
        """Train to the end, checkpointing as configured. `on_step(global_step)` runs after each step."""
        from tqdm import tqdm

        if self.done:
            return
        bar = tqdm(total=self.total_steps, initial=self.global_step, desc="supernet", unit="step",
                   disable=not progress, dynamic_ncols=True)
        started, first = time.perf_counter(), self.global_step
        with (StopRequests() as stop, log_session_steps(self, "supernet training", first),
              ThreadGovernor() as governor):
            while not self.done:
                epoch, start = divmod(self.global_step, self.steps_per_epoch)
                for step, x, y in self.task.train_batches(epoch, start):
                    if self.config.channels_last:
                        x = x.contiguous(memory_format=torch.channels_last)
                    torch.manual_seed(batch_seed(self.seed, epoch, step))  # dropout and other torch-side noise
                    self.scheduler.step_update(self.global_step)
                    with governor.timed_step():
                        loss = self.train_step(x, y, self.step_archs(epoch, step))
                    if self.ema is not None:
                        self.ema.update(self.supernet, step=self.global_step)
                    self.global_step += 1
                    bar.update(1)
                    bar.set_postfix(epoch=epoch, loss=f"{loss:.3f}", lr=f"{self.optimizer.param_groups[0]['lr']:.4f}")
                    if (self.global_step % self.config.checkpoint_every == 0 or step == self.steps_per_epoch - 1
                            or self.done):
                        self.save()
                    stop.check(self.save)
                    if on_step is not None:
                        on_step(self.global_step)
                    if self.done:
                        break
        bar.close()
        logger.info("supernet training finished: %d steps in %.0f s", self.total_steps, time.perf_counter() - started)


@contextmanager
def log_session_steps(trainer, what: str, first: int):
    """Log how many steps this session trained, however it ends: summed over the sessions of a resumed run,
    they equal the total when no step was repeated."""
    try:
        yield
    finally:
        logger.info("%s: %d steps in this session, at step %d of %d", what, trainer.global_step - first,
                    trainer.global_step, trainer.total_steps)


def load_trained_supernet(space: SearchSpace, checkpoint_path: Path, config: TrainConfig) -> Supernet:
    """The supernet weights a finished run evaluates subnets with (the EMA when the run kept one)."""
    if not Path(checkpoint_path).exists():
        raise FileNotFoundError(f"{checkpoint_path} not found: the run has not trained its supernet")
    state = load_checkpoint(checkpoint_path)
    steps = state["global_step"]
    supernet = space.build_supernet()
    supernet.load_state_dict(state["ema"] if state.get("ema") is not None else state["model"])
    if config.channels_last:
        to_channels_last(supernet)
    logger.info("loaded supernet after %d training steps from %s", steps, checkpoint_path)
    return supernet


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, batches: Iterable[torch.Tensor], channels_last: bool = True) -> nn.Module:
    """Recompute every batch norm's running statistics as the exact average over `batches` (then eval mode).

    Subnets inherit statistics accumulated by other subnets during training; they must be re-estimated before
    a subnet is evaluated (Once-for-All, BigNAS).
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    model.eval()
    if not norms:  # e.g. EDSR-style networks: nothing to recalibrate
        return model
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
        bn.train()
    seen = 0
    for x in batches:
        model(x.contiguous(memory_format=torch.channels_last) if channels_last else x)
        seen += 1
    if not seen:
        raise DataError("no calibration images: batch norm cannot be recalibrated (task.calib_images must be > 0)")
    for bn in norms:
        bn.momentum = 0.1
    return model.eval()
