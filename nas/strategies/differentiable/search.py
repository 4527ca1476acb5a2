"""The differentiable search: alternating weight and architecture steps with a latency-aware loss.

The training split is cut in two (`arch_fraction`): weight steps train the supernet on one part under sampled
gates, architecture steps update the logits on the other part with the task loss plus a latency term
(DARTS-style alternation: Liu et al., ICLR 2019, https://arxiv.org/abs/1806.09055). The latency term uses the
exact expected latency on the run's cost model (`ExpectedLatency`), in one of two forms:

* `additive`: task + lambda * E[lat] / lat(largest arch) (ProxylessNAS; lambda is per latency of the largest
  arch, so one value suits every cost model);
* `multiplicative`: task * (E[lat] / T)^beta above the target T, task * (T / E[lat])^beta_below below it
  (MnasNet's two exponents, Tan et al., CVPR 2019, https://arxiv.org/abs/1807.11626; beta_below = 0 is its hard
  constraint, beta_below > 0 also pulls a too-fast arch up to the target).

The weights train for `train.epochs` passes over their split (the first `warmup_epochs` without architecture
steps), with the `train` section's optimizer and schedule. At the end of each search epoch the most probable
arch is derived; the last one is fine-tuned alone on the whole training split. Every step's randomness is drawn
from the run's random streams at that step (`nas.randomness`), and the state (weights, logits, both optimizers,
trajectory) is checkpointed by step, so a resumed run continues bit for bit.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn

from hw_cost import CostModel
from search_spaces import SearchSpace
from tasks.data import DataError, EpochBatches

from ...errors import ConfigError, check_bounds
from ...randomness import RunRandom
from ...rundir import atomic_torch_save, load_checkpoint
from ...runtime import check_finite
from ...training.session import TrainingSession
from ...training.supernet_training import TrainConfig, in_layout, to_channels_last
from .relaxation import RELAXATIONS, ArchParameters, ExpectedLatency, build_relaxed

logger = logging.getLogger(__name__)

__all__ = ["DifferentiableConfig", "DifferentiableTrainer", "LOSS_FORMS", "latency_loss"]

LOSS_FORMS = ("additive", "multiplicative")


@dataclass
class DifferentiableConfig:
    """Args:
        relaxation: `gumbel` (FBNet Gumbel-softmax) or `proxyless` (sampled binary gates, straight-through).
        loss: `additive` (latency_lambda) or `multiplicative` (a target, beta, beta_below); see the module doc.
        latency_lambda: weight of E[latency] / latency of the largest arch in the additive form.
        target_ms: the latency target T of the multiplicative form (ms on the run's cost model).
        target_vs_smallest: the target as a multiple of the smallest arch's latency on the run's cost model (a
            table corrected to this machine), instead of `target_ms`: the same point of the space on a machine
            several times faster or slower. The run logs the target it resolves to.
        beta / beta_below: exponents of the multiplicative form above / below the target.
        warmup_epochs: first epochs of `train.epochs` that train weights only (logits stay uniform).
        arch_fraction: share of the training split held out for architecture steps.
        arch_opt / arch_lr / arch_weight_decay: optimizer of the logits (a timm optimizer name).
        tau_start / tau_end: Gumbel-softmax temperature, decayed exponentially over the search epochs.
        arch_tau_start / arch_tau_end: temperature of the architecture distribution softmax(logits / arch_tau),
            decayed the same way: the distribution sharpens toward its mode, so that the expected latency the
            loss constrains converges to the latency of the arch that is derived (the mode).
        finetune_epochs / finetune_lr: training of the derived arch alone afterwards (cosine schedule).
        finalize_every_epoch: finalisation may choose any search epoch's derived arch (candidates.csv has one row
            per epoch); false (default): the search's result, the last epoch's derived arch, alone.
    """

    relaxation: str = "gumbel"
    loss: str = "additive"
    latency_lambda: float = 1.0
    target_ms: Optional[float] = None
    target_vs_smallest: Optional[float] = None
    beta: float = 1.0
    beta_below: float = 0.0
    warmup_epochs: int = 1
    arch_fraction: float = 0.5
    arch_opt: str = "adam"
    arch_lr: float = 0.05
    arch_weight_decay: float = 0.0
    tau_start: float = 5.0
    tau_end: float = 0.5
    arch_tau_start: float = 1.0
    arch_tau_end: float = 0.2
    finetune_epochs: int = 1
    finetune_lr: float = 0.01
    finalize_every_epoch: bool = False

    def __post_init__(self):
        if self.relaxation not in RELAXATIONS:
            raise ValueError(f"relaxation: {self.relaxation!r} is not one of {', '.join(RELAXATIONS)}")
        if self.loss not in LOSS_FORMS:
            raise ValueError(f"loss: {self.loss!r} is not one of {', '.join(LOSS_FORMS)}")
        if self.target_ms is not None and self.target_vs_smallest is not None:
            raise ValueError("target_ms: give the latency target in ms or as target_vs_smallest, not both")
        if self.loss == "multiplicative" and self.target_ms is None and self.target_vs_smallest is None:
            raise ValueError("target_ms: the multiplicative loss needs a latency target (target_ms, or "
                             "target_vs_smallest)")
        if self.target_ms is not None and self.target_ms <= 0:
            raise ValueError("target_ms: must be > 0")
        if self.target_vs_smallest is not None and self.target_vs_smallest < 1:
            raise ValueError("target_vs_smallest: must be >= 1 (no arch is faster than the smallest)")
        check_bounds(self, non_negative=("latency_lambda", "beta", "beta_below", "warmup_epochs", "arch_weight_decay",
                                         "finetune_epochs"),
                     positive=("arch_lr", "tau_start", "tau_end", "arch_tau_start", "arch_tau_end", "finetune_lr"))
        if not 0 < self.arch_fraction < 1:
            raise ValueError("arch_fraction: must be in (0, 1)")

    def target_latency_ms(self, space: SearchSpace, cost_model: CostModel) -> Optional[float]:
        """The latency target in ms on `cost_model` (None without one)."""
        if self.target_vs_smallest is None:
            return self.target_ms
        return self.target_vs_smallest * cost_model.latency_ms(space.blocks(space.smallest()))


def latency_loss(task_loss: torch.Tensor, expected_ms: torch.Tensor, config: DifferentiableConfig,
                 reference_ms: float, target_ms: Optional[float] = None) -> torch.Tensor:
    """The architecture loss (see the module docstring); `reference_ms` scales the additive form, `target_ms`
    (`DifferentiableConfig.target_latency_ms`) is the multiplicative form's target."""
    if config.loss == "additive":
        return task_loss + config.latency_lambda * expected_ms / reference_ms
    ratio = expected_ms / target_ms
    exponent = config.beta if ratio.item() > 1.0 else -config.beta_below
    return task_loss * ratio ** exponent


class _Subset:
    """Part of a batch source (`tasks.data.BatchSource`), by index."""

    def __init__(self, source, indices: np.ndarray):
        self.source, self.indices = source, np.asarray(indices)
        self.num_classes = source.num_classes

    def __len__(self) -> int:
        return len(self.indices)

    def get_batch(self, indices, seed):
        return self.source.get_batch(self.indices[np.asarray(indices)], seed)


class DifferentiableTrainer:
    """Searches `space` by gradient: trains the relaxed supernet's weights and the architecture logits, then the
    derived arch; checkpoints to `checkpoint_path` and resumes from it. The run's strategy around it is
    `nas.strategies.differentiable.DifferentiableStrategy`.

    Args:
        space / task / cost_model: what the run searches, on what, with which latency source.
        train: the weight-training recipe (`train.epochs` passes over the weight split in all; the sandwich
            settings `sandwich_*` and `distill` belong to `SupernetTrainer`: a config that changes them is
            refused).
        config: `DifferentiableConfig`.
        random: the run's random streams (initial weights, data split, gate samples, dropout).
        checkpoint_path: file of the whole state; loaded when it exists. It holds the supernet weights under
            "model" like `SupernetTrainer`'s, so `load_trained_supernet` (export) reads it.
    """

    def __init__(self, space: SearchSpace, task, cost_model: CostModel, train: TrainConfig,
                 config: DifferentiableConfig, random: RunRandom, checkpoint_path: Optional[Path] = None):
        from timm.optim import create_optimizer_v2
        from timm.scheduler import create_scheduler_v2

        if train.ema_decay > 0:
            raise ConfigError("train.ema_decay: the differentiable strategy keeps no weight EMA (the derived arch is "
                              "fine-tuned instead); set it to 0")
        if config.warmup_epochs >= train.epochs:
            raise ConfigError(f"search.differentiable.warmup_epochs ({config.warmup_epochs}) must be below "
                              f"train.epochs ({train.epochs:g}): no epoch would search")
        self.space, self.task, self.cost_model, self.train_config, self.config = space, task, cost_model, train, config
        self.random, self.seed = random, random.seed
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        torch.manual_seed(self.seed)  # the initial weights
        self.relaxed = build_relaxed(space)
        self.supernet = self.relaxed.supernet
        if train.channels_last:
            to_channels_last(self.supernet)
        self.arch = ArchParameters(space.choices)
        self.latency = ExpectedLatency(space, self.relaxed.cost_terms(), cost_model)
        self.reference_ms = cost_model.latency_ms(space.blocks(space.largest()))
        self.target_ms = config.target_latency_ms(space, cost_model)
        if config.target_vs_smallest is not None and config.loss == "multiplicative":
            logger.info("latency target %.4f ms on %s: %g x the smallest arch's %.4f ms", self.target_ms,
                        cost_model.name, config.target_vs_smallest, self.target_ms / config.target_vs_smallest)

        full = task.train_batches
        perm = random.numpy("differentiable.split").permutation(len(full.source))
        n_arch = int(round(config.arch_fraction * len(perm)))
        self.weight_batches = EpochBatches(_Subset(full.source, np.sort(perm[n_arch:])), full.batch_size, self.seed)
        self.arch_batches = EpochBatches(_Subset(full.source, np.sort(perm[:n_arch])), full.batch_size,
                                         random.seed_of("differentiable.arch_batches"))
        self.full_batches = full
        for name, batches in (("weight", self.weight_batches), ("architecture", self.arch_batches)):
            if batches.steps_per_epoch() < 1:
                raise DataError(f"search.differentiable.arch_fraction {config.arch_fraction} leaves "
                                f"{len(batches.source)} training images for {name} steps, less than one batch of "
                                f"{full.batch_size}")
        self.steps_per_epoch = self.weight_batches.steps_per_epoch()
        self.warmup_steps = config.warmup_epochs * self.steps_per_epoch
        self.search_steps = max(1, round(train.epochs * self.steps_per_epoch))  # a fraction ends mid-epoch
        self.finetune_steps = config.finetune_epochs * full.steps_per_epoch()
        self.total_steps = self.search_steps + self.finetune_steps

        self.optimizer = create_optimizer_v2(self.supernet, opt=train.opt, lr=train.lr,
                                             weight_decay=train.weight_decay, momentum=train.momentum)
        self.scheduler, _ = create_scheduler_v2(
            self.optimizer, sched=train.sched, num_epochs=train.epochs, warmup_epochs=train.warmup_epochs,
            warmup_lr=train.lr * 0.01, min_lr=train.min_lr, step_on_epochs=False,
            updates_per_epoch=self.steps_per_epoch)
        self.arch_optimizer = create_optimizer_v2(list(self.arch.parameters()), opt=config.arch_opt,
                                                  lr=config.arch_lr, weight_decay=config.arch_weight_decay)
        self.finetune_optimizer = create_optimizer_v2(self.supernet, opt=train.opt, lr=config.finetune_lr,
                                                      weight_decay=train.weight_decay, momentum=train.momentum)
        self.finetune_scheduler = (create_scheduler_v2(
            self.finetune_optimizer, sched="cosine", num_epochs=config.finetune_epochs, warmup_epochs=0,
            min_lr=0.0, step_on_epochs=False, updates_per_epoch=full.steps_per_epoch())[0]
            if config.finetune_epochs else None)
        self.global_step = 0
        #: one entry per search epoch: epoch, derived arch, expected latency, temperature, entropy, losses
        self.trajectory: list[dict] = []
        self._epoch_losses: list[tuple[float, float]] = []
        if self.checkpoint_path is not None and self.checkpoint_path.exists():
            self._load()

    # ------------------------------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.global_step >= self.total_steps

    @property
    def derived(self) -> dict:
        """The derived arch: the most probable one at the end of the search (before: at the current logits)."""
        if self.trajectory and self.global_step >= self.search_steps:
            return self.trajectory[-1]["arch"]
        return self.space.arch_from_assignment(self.arch.assignment())

    def state_dict(self) -> dict:
        return {"global_step": self.global_step, "model": self.supernet.state_dict(), "ema": None,
                "optimizer": self.optimizer.state_dict(), "arch": self.arch.state_dict(),
                "arch_optimizer": self.arch_optimizer.state_dict(),
                "finetune_optimizer": self.finetune_optimizer.state_dict(), "trajectory": self.trajectory,
                "epoch_losses": self._epoch_losses}

    def load_state_dict(self, state: dict) -> None:
        """Take a `state_dict()` (the whole state: resuming from it continues bit for bit)."""
        self.supernet.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.arch.load_state_dict(state["arch"])
        self.arch_optimizer.load_state_dict(state["arch_optimizer"])
        self.finetune_optimizer.load_state_dict(state["finetune_optimizer"])
        self.trajectory, self._epoch_losses = state["trajectory"], [tuple(v) for v in state["epoch_losses"]]
        self.global_step = state["global_step"]

    def _load(self) -> None:
        self.load_state_dict(load_checkpoint(self.checkpoint_path))
        logger.info("resumed differentiable search at step %d of %d", self.global_step, self.total_steps)

    def save(self) -> None:
        if self.checkpoint_path is not None:
            atomic_torch_save(self.state_dict(), self.checkpoint_path)

    # ------------------------------------------------------------------------------------------ steps
    def _anneal(self, start: float, end: float, step: int) -> float:
        """`start` during warm-up, then exponential decay to `end` at the last search step."""
        span = max(1, self.search_steps - self.warmup_steps - 1)
        return start * (end / start) ** min(1.0, max(0, step - self.warmup_steps) / span)

    def tau(self, step: int) -> float:
        """Gumbel-softmax temperature at a step."""
        return self._anneal(self.config.tau_start, self.config.tau_end, step)

    def sharpness(self, step: int) -> float:
        """1 / architecture temperature at a step (the probabilities are softmax(sharpness * logits))."""
        return 1.0 / self._anneal(self.config.arch_tau_start, self.config.arch_tau_end, step)

    def sample_gates(self, step: int, kind: str) -> dict[str, torch.Tensor]:
        """The gates of a step's `weight` or `arch` (architecture) pass, drawn from its random stream at `step`."""
        generator = self.random.torch(f"differentiable.{kind}_gates", step)
        return self.arch.gates(self.config.relaxation, self.tau(step), generator, self.sharpness(step))

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        return in_layout(x, self.train_config.channels_last)

    def weight_step(self, x: torch.Tensor, y: torch.Tensor, gates: dict[str, torch.Tensor]) -> float:
        """One optimizer step of the supernet weights under fixed gates; returns the task loss."""
        self.supernet.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.task.loss(self.relaxed(x, {k: g.detach() for k, g in gates.items()}), y)
        loss.backward()
        check_finite([loss.item()], "differentiable search (weights)", self.global_step, "train.lr",
                     self.train_config.lr, len(x))
        if self.train_config.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.supernet.parameters(), self.train_config.grad_clip)
        self.optimizer.step()
        return loss.item()

    def arch_step(self, x: torch.Tensor, y: torch.Tensor, gates: dict[str, torch.Tensor],
                  sharpness: float = 1.0) -> tuple[float, float]:
        """One optimizer step of the logits (weights untouched); returns (task loss, expected latency ms)."""
        self.supernet.train()
        params = list(self.arch.parameters())
        task_loss = self.task.loss(self.relaxed(x, gates), y)
        expected = self.latency(self.arch.probs(sharpness))
        loss = latency_loss(task_loss, expected, self.config, self.reference_ms, self.target_ms)
        grads = torch.autograd.grad(loss, params)
        check_finite([loss.item()], "differentiable search (architecture)", self.global_step,
                     "search.differentiable.arch_lr", self.config.arch_lr, len(x))
        for p, g in zip(params, grads):
            p.grad = g
        self.arch_optimizer.step()
        return task_loss.item(), expected.item()

    def finetune_step(self, x: torch.Tensor, y: torch.Tensor, arch: dict) -> float:
        self.supernet.train()
        self.supernet.set_active(arch)
        self.finetune_optimizer.zero_grad(set_to_none=True)
        loss = self.task.loss(self.supernet(x), y)
        loss.backward()
        check_finite([loss.item()], "fine-tuning of the derived arch", self.global_step,
                     "search.differentiable.finetune_lr", self.config.finetune_lr, len(x))
        if self.train_config.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.supernet.parameters(), self.train_config.grad_clip)
        self.finetune_optimizer.step()
        return loss.item()

    def expected_latency_ms(self) -> float:
        """E[latency] under the architecture distribution of the current step."""
        with torch.no_grad():
            return float(self.latency(self.arch.probs(self.sharpness(self.global_step))))

    def _end_of_epoch(self, epoch: int) -> None:
        arch = self.space.arch_from_assignment(self.arch.assignment())
        task, expected = (np.mean(self._epoch_losses, axis=0) if self._epoch_losses else (float("nan"),) * 2)
        entry = {"epoch": epoch + 1, "arch": arch, "expected_latency_ms": self.expected_latency_ms(),
                 "latency_ms": self.cost_model.latency_ms(self.space.blocks(arch)), "tau": self.tau(self.global_step),
                 "entropy": self.arch.entropy(self.sharpness(self.global_step)), "arch_task_loss": float(task),
                 "mean_expected_ms": float(expected)}
        self.trajectory.append(entry)
        self._epoch_losses = []
        logger.info("search epoch %d: E[latency] %.4f ms, derived arch %.4f ms, entropy %.3f, tau %.2f, "
                    "arch-step task loss %.3f; %s", entry["epoch"], entry["expected_latency_ms"], entry["latency_ms"],
                    entry["entropy"], entry["tau"], entry["arch_task_loss"], arch)

    # ------------------------------------------------------------------------------------------ the loop
    def run(self, progress: bool = True, on_step: Optional[Callable[[int], None]] = None,
            adapt_threads: bool = True) -> None:
        """Run (or finish) the search and the fine-tuning, checkpointing as `train.checkpoint_every` says.

        `on_step(global_step)` runs after each step (and its checkpoint); `adapt_threads` as in
        `SupernetTrainer.train`.
        """
        started = time.perf_counter()
        with TrainingSession(self, "differentiable search", checkpoint_every=self.train_config.checkpoint_every,
                             progress=progress, progress_label="dnas", adapt_threads=adapt_threads,
                             on_step=on_step) as session:
            while self.global_step < self.search_steps:
                epoch, start = divmod(self.global_step, self.steps_per_epoch)
                for step, x, y in self.weight_batches(epoch, start):
                    g = self.global_step
                    torch.manual_seed(self.random.seed_of("differentiable.noise", epoch, step))
                    self.scheduler.step_update(g)
                    if g == self.warmup_steps:
                        session.new_phase()
                    with session.timed_step():
                        loss = self.weight_step(self._input(x), y, self.sample_gates(g, "weight"))
                        if g >= self.warmup_steps:
                            arch_epoch, arch_step = divmod(g - self.warmup_steps,
                                                           self.arch_batches.steps_per_epoch())
                            _, xa, ya = next(self.arch_batches(arch_epoch, arch_step))
                            self._epoch_losses.append(self.arch_step(self._input(xa), ya, self.sample_gates(g, "arch"),
                                                                     self.sharpness(g)))
                    self.global_step += 1
                    last = step == self.steps_per_epoch - 1 or self.global_step == self.search_steps
                    if last and epoch >= self.config.warmup_epochs:
                        self._end_of_epoch(epoch - self.config.warmup_epochs)
                    session.step_done(checkpoint=last, epoch=epoch, loss=f"{loss:.3f}",
                                      lat=f"{self.expected_latency_ms():.4f}")
                    if self.global_step == self.search_steps:
                        break
            arch = self.derived
            session.new_phase()
            per_epoch = self.full_batches.steps_per_epoch()
            while not self.done:
                epoch, start = divmod(self.global_step - self.search_steps, per_epoch)
                for step, x, y in self.full_batches(epoch, start):
                    torch.manual_seed(self.random.seed_of("differentiable.finetune_noise", epoch, step))
                    self.finetune_scheduler.step_update(self.global_step - self.search_steps)
                    with session.timed_step():
                        loss = self.finetune_step(self._input(x), y, arch)
                    self.global_step += 1
                    session.step_done(checkpoint=step == per_epoch - 1, finetune=epoch, loss=f"{loss:.3f}")
        logger.info("differentiable search finished: %d steps in %.0f s; derived arch %s", self.total_steps,
                    time.perf_counter() - started, arch)
