"""`LockstepTrainer`: several standalone networks trained on the same batches, each with its own optimizer and
schedule, side by side on the CPU's threads (see the package docstring)."""
from __future__ import annotations

import copy
import itertools
import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn

from search_spaces import arch_key
from tasks.data import EpochBatches, to_device

from ...errors import ConfigError
from ...randomness import RunRandom
from ...records import Candidate
from ...rundir import atomic_torch_save
from ...runtime import check_finite
from ...search_context import SearchContext
from ..captured_step import WARMUP_STEPS, capture_refusal
from ..evaluation import ArchEvaluator
from ..session import TrainingSession
from ..supernet_training import TrainConfig, in_layout, to_channels_last
from .graph_steps import GraphSteps
from .lockstep_state import continued_state, lockstep_state, resumed_state
from .net_threads import NetThreads
from .net_timing import NetClock
from .replan import Replanner
from .schedules import cosine_schedulers, epochs_to_steps, net_optimizer
from .settings import FinalizeConfig

logger = logging.getLogger(__name__)


class LockstepTrainer:
    """Trains several standalone networks on the same batches, each with its own optimizer.

    Its collaborators: `schedules` (optimizers and learning rates), `lockstep_state` (the checkpoint),
    `NetThreads` (the nets side by side on threads, their dropout seeds), `GraphSteps` (CUDA graphs), `NetClock`
    (each net's time, for `time_steps`).

    Args:
        nets: the students (trained in place).
        teacher: a frozen network whose outputs the students distil (None = no distillation).
        task: gives `train_batches` (the split and seed of the batches), `loss`, `distill_loss`.
        train: the supernet recipe (optimizer, weight decay, momentum, clipping, channels-last, checkpointing).
        config: `FinalizeConfig` (epochs, lr, warm-up, kd_ratio).
        seed: run seed (dropout and other torch-side noise per step).
        checkpoint_path: file of the training state; loaded when it exists.
        names: one per net (checked on resume: a checkpoint of other archs is refused).
        device: where the nets (and the teacher) train; they are moved there.
        epochs: each net's schedule in epochs (a run budget's plan: its cosine ends there, and a net whose schedule
            has ended trains no more while the others go on); None = `config.epochs` for every net.
        stop_epochs: train only this far into the schedule (screening); None = to its end.
    """

    def __init__(self, nets: list[nn.Module], teacher: nn.Module | None, task, train: TrainConfig,
                 config: FinalizeConfig, seed: int, checkpoint_path: Path, names: list[str], *,
                 device: torch.device | str = "cpu", epochs: Sequence[float] | None = None,
                 stop_epochs: float | None = None):
        self.nets, self.teacher, self.task, self.train_config, self.config = nets, teacher, task, train, config
        self.seed, self.checkpoint_path, self.names = seed, Path(checkpoint_path), list(names)
        self.device = torch.device(device)
        for net in [*nets, *([teacher] if teacher is not None else [])]:
            net.to(self.device)
        if train.channels_last:
            for net in nets:
                to_channels_last(net)
        self.peak_lr = config.lr if config.lr is not None else train.lr
        self.lr_key = "search.finalize.lr" if config.lr is not None else "train.lr"  # the setting of peak_lr
        self.optimizers = [net_optimizer(net, train, self.peak_lr) for net in nets]
        refusal = capture_refusal(self.device, self.optimizers[0], train.cuda_graphs)
        if refusal and self.device.type == "cuda":
            logger.info("finalisation trains eagerly on the GPU: %s", refusal)
        self.clock = NetClock()
        #: the nets' steps replayed as CUDA graphs; None = eager steps
        self.captured = None if refusal else GraphSteps(nets, self.optimizers, self._loss, train.grad_clip, self.clock)
        self.threads = NetThreads(self.device, self.captured is not None, self.clock)
        task_batches = task.train_batches
        own_size = config.batch_size and config.batch_size != task_batches.batch_size
        self.batches = (EpochBatches(task_batches.source, config.batch_size, task_batches.seed, task_batches.drop_last,
                                     task_batches.workers) if own_size else task_batches)
        self.steps_per_epoch = self.batches.steps_per_epoch()
        if self.steps_per_epoch < 1:
            raise ConfigError(f"search.finalize.batch_size: {self.batches.batch_size} is more than the "
                              f"{len(task_batches.source)} training samples")
        epochs = [config.epochs] * len(nets) if epochs is None else list(epochs)
        if len(epochs) != len(nets):
            raise ValueError(f"LockstepTrainer: {len(epochs)} schedules for {len(nets)} nets")
        self.net_steps = epochs_to_steps(epochs, self.steps_per_epoch)  # each net's schedule
        self.stop_step = self.total_steps if stop_epochs is None else round(stop_epochs * self.steps_per_epoch)
        self.warmup_steps = round(config.warmup_epochs * self.steps_per_epoch)
        self.schedulers = self._schedulers()
        self.global_step = 0
        if self.checkpoint_path.exists():
            self._load()

    @property
    def total_steps(self) -> int:
        """Steps of the longest schedule: the nets train in lockstep until it ends."""
        return max(self.net_steps)

    @property
    def done(self) -> bool:
        return self.global_step >= self.stop_step

    @property
    def net_epochs(self) -> list[float]:
        return [steps / self.steps_per_epoch for steps in self.net_steps]

    def _schedulers(self) -> list:
        return cosine_schedulers(self.optimizers, self.peak_lr, self.net_steps, self.warmup_steps)

    def time_steps(self, steps: int = 10) -> tuple[float, list[float]]:
        """(mean wall time of one lockstep step, loading its batch included; each net's mean time of its own
        work in it), timed as `train` runs it on copies of the nets (fresh optimizers, the first batches of the
        schedule) after two untimed steps: the training itself is left untouched."""
        probe = copy.copy(self)
        probe.nets = copy.deepcopy(self.nets)
        probe.optimizers = [net_optimizer(net, self.train_config, self.peak_lr) for net in probe.nets]
        probe.clock = NetClock()
        probe.captured = (None if self.captured is None else
                          GraphSteps(probe.nets, probe.optimizers, probe._loss, self.train_config.grad_clip,
                                     probe.clock))
        probe.threads = NetThreads(self.device, self.captured is not None, probe.clock)
        untimed = 2 if self.captured is None else WARMUP_STEPS + 1  # captured: the eager steps and the capture
        probe.net_steps = [steps + untimed] * len(self.nets)  # every net takes every timed step
        probe.schedulers = probe._schedulers()
        batches = itertools.chain.from_iterable(self.batches(epoch, 0) for epoch in itertools.count())  # tiny splits
        with probe.threads.side_by_side(probe.nets):
            for _, x, y in itertools.islice(batches, untimed):
                probe.train_step(*self._prepared(x, y))
            started = time.perf_counter()
            probe.clock.start(len(self.nets))
            for _, x, y in itertools.islice(batches, steps):
                probe.train_step(*self._prepared(x, y))
        return (time.perf_counter() - started) / steps, [seconds / steps for seconds in probe.clock.seconds]

    def continue_from(self, checkpoint_path: Path) -> None:
        """Start where another trainer of these nets among others stopped (the screening: the archs it keeps
        continue its schedule), from its checkpoint; only before this trainer's first step."""
        if self.global_step:
            raise RuntimeError("LockstepTrainer.continue_from: the schedule has started")
        weights, optimizer_states, self.global_step = continued_state(checkpoint_path, self.names)
        for net, optimizer, net_weights, optimizer_state in zip(self.nets, self.optimizers, weights, optimizer_states):
            net.load_state_dict(net_weights)
            optimizer.load_state_dict(optimizer_state)

    def state_dict(self) -> dict:
        return lockstep_state(self.global_step, self.total_steps, self.net_steps, self.names, self.nets,
                              self.optimizers)

    def _load(self) -> None:
        state = resumed_state(self.checkpoint_path, self.names)
        for net, weights in zip(self.nets, state["nets"]):
            net.load_state_dict(weights)
        for optimizer, opt_state in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(opt_state)
        self.global_step = state["global_step"]
        planned = state.get("total_steps", self.total_steps)  # the schedule the checkpoint follows is kept
        if self.stop_step == self.total_steps:
            self.stop_step = planned
        net_steps = state.get("net_steps", [planned] * len(self.nets))
        if net_steps != self.net_steps:
            self.net_steps = net_steps
            self.schedulers = self._schedulers()
        logger.info("resumed finalisation at step %d of %d", self.global_step, self.stop_step)

    def save(self) -> None:
        atomic_torch_save(self.state_dict(), self.checkpoint_path)

    def _prepared(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return to_device(in_layout(x, self.train_config.channels_last), self.device), to_device(y, self.device)

    def _teacher_outputs(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.teacher(x)

    def _loss(self, out: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None) -> torch.Tensor:
        loss = self.task.loss(out, y)
        if teacher_out is not None:
            loss = loss + self.config.kd_ratio * self.task.distill_loss(out, teacher_out)
        return loss

    def _set_lr(self, i: int) -> None:
        self.schedulers[i].step_update(self.global_step)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> list[float]:
        """One optimizer step of every net whose schedule has not ended on one batch; returns their losses.

        With distillation the teacher's forward is queued first: side by side it runs beside the students'
        forwards, which wait for its outputs only at their loss. On CUDA (`captured`) each net's whole step is
        one graph replay, and a non-finite loss is caught after the nets' updates, before any checkpoint."""
        teacher_out = self.threads.started(self._teacher_outputs, x) if self.teacher is not None else None
        training = [i for i, steps in enumerate(self.net_steps) if self.global_step < steps]
        if self.captured is not None:
            losses = self.captured(x, y, None if teacher_out is None else teacher_out.result(), training,
                                   self._set_lr)
            check_finite(losses, "finalisation training", self.global_step, self.lr_key, self.peak_lr, len(x))
            return losses

        def forward_backward(i: int) -> float:
            net, optimizer = self.nets[i], self.optimizers[i]
            net.train()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                loss = self._loss(net(x), y, None if teacher_out is None else teacher_out.result())
            loss.backward()
            return loss.item()

        def update(i: int) -> None:
            self._set_lr(i)
            if self.train_config.grad_clip > 0:
                nn.utils.clip_grad_norm_(self.nets[i].parameters(), self.train_config.grad_clip)
            self.optimizers[i].step()

        losses = self.threads.each_net(forward_backward, training)
        check_finite(losses, "finalisation training", self.global_step, self.lr_key, self.peak_lr,
                     len(x))  # before any net's update
        self.threads.each_net(update, training)
        return losses

    def reschedule(self, net_steps: Sequence[int]) -> None:
        """Shorten the nets' schedules to `net_steps` (none under `global_step`): each net's learning rate follows
        from here the warm-up and cosine of its shorter schedule, which ends at its new last step."""
        if any(new < min(old, self.global_step) or new > old for new, old in zip(net_steps, self.net_steps)):
            raise ValueError(f"LockstepTrainer.reschedule: {list(net_steps)} at step {self.global_step} of "
                             f"{self.net_steps}")
        stops_early = self.stop_step == self.total_steps
        self.net_steps = list(net_steps)
        self.schedulers = self._schedulers()
        self.stop_step = self.total_steps if stops_early else min(self.stop_step, self.total_steps)

    def train(self, progress: bool = True, adapt_threads: bool = True, replanner: Replanner | None = None) -> None:
        """Train to `stop_step` (see `SupernetTrainer.train`); with a `replanner`, the schedules shrink where it
        says (checkpointed at once, then recorded by it)."""
        if self.done:
            return
        started = time.perf_counter()
        with (TrainingSession(self, "finalisation training", checkpoint_every=self.train_config.checkpoint_every,
                              progress=progress, progress_label=f"finalise {len(self.nets)} archs",
                              progress_total=self.stop_step, set_threads=self.threads.use_workers,
                              adapt_threads=adapt_threads) as session,
              self.threads.side_by_side(self.nets)):
            if replanner is not None:
                replanner.start(self.global_step)
            while not self.done:
                epoch, start = divmod(self.global_step, self.steps_per_epoch)
                for step, x, y in self.batches(epoch, start):
                    if self.done:
                        break
                    x, y = self._prepared(x, y)
                    self.threads.seed_dropouts(RunRandom(self.seed), epoch, step)
                    with session.timed_step():
                        losses = self.train_step(x, y)
                    self.global_step += 1
                    shortened = replanner.shortened(self.net_steps, self.global_step) if replanner else None
                    if shortened is not None:
                        logger.info("finalisation is late for the run budget at step %d: its nets end at steps %s "
                                    "instead of %s", self.global_step, shortened, self.net_steps)
                        self.reschedule(shortened)
                        self.save()
                        replanner.record(self.net_steps)
                        session.set_total(self.stop_step)
                    if self.global_step in self.net_steps:  # nets leave the lockstep: steps of another pace
                        session.new_phase()
                    session.step_done(checkpoint=self.done or step == self.steps_per_epoch - 1, epoch=epoch,
                                      loss=f"{np.mean(losses):.3f}")
        logger.info("finalisation training: %d archs at step %d of %d after %.0f s", len(self.nets), self.stop_step,
                    self.total_steps, time.perf_counter() - started)


def lockstep_trainer(ctx: SearchContext, records: Sequence[Candidate], evaluator: ArchEvaluator, checkpoint: Path, *,
                     epochs: Sequence[float] | None = None, stop_epochs: float | None = None) -> LockstepTrainer:
    """A lockstep trainer of `records`' archs, initialised as `search.finalize.init` says, with the teacher
    `kd_ratio` asks for (resumed from `checkpoint` if it exists; see `LockstepTrainer` for the rest)."""
    config: FinalizeConfig = ctx.config.search.finalize
    torch.manual_seed(ctx.config.seed)  # fresh weights of the `scratch` init
    if config.init == "inherited":
        nets = [evaluator.subnet(c.arch) for c in records]
    else:
        nets = [ctx.space.fresh_network(c.arch) for c in records]
    teacher = evaluator.subnet(ctx.space.largest()).eval() if config.kd_ratio > 0 else None
    if teacher is not None:
        teacher.requires_grad_(False)
    return LockstepTrainer(nets, teacher, ctx.task, ctx.config.train, config, ctx.config.seed, checkpoint,
                           [arch_key(c.arch) for c in records], device=ctx.device, epochs=epochs,
                           stop_epochs=stop_epochs)
