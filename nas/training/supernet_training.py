"""Supernet training with the sandwich rule, and batch-norm recalibration of subnets.

Each step trains a top arch, a bottom arch and `sandwich_random` random archs on the same batch, accumulating
gradients before one optimizer step (Yu & Huang, "Universally Slimmable Networks", ICCV 2019; BigNAS, ECCV 2020):
the space's largest and smallest archs and uniform draws, or, with `sandwich_window`, the search's latency window
(`nas.training.sandwich_archs`). With `distill`, the other archs learn from the top arch's outputs (in-place
distillation). Without `sandwich_fixed`, a step trains its random archs only: every update goes to the archs the
search ranks instead of two fixed ones. Optimizer, schedule, EMA and augmentation are timm's.

Everything random in a step is drawn from (seed, epoch, step), so a run resumed from a mid-epoch checkpoint
continues bit for bit as if it had never stopped.

Several processes (torchrun, `nas.distributed`) train one supernet data-parallel: every process draws the same
archs and the same global batch of `task.batch_size` images, and trains on its contiguous share of it; the
losses are weighted by the share's size and the gradients summed over the processes, batch norm normalises with
the whole batch's statistics (`search_spaces.elastic.synchronised_batch_norm`) and dropout applies its share of
the whole batch's mask. A step therefore computes what one process computes on the whole batch, up to the order
of floating-point sums, and a checkpoint (written by rank 0, per-process state free) resumes with any number of
processes. On CUDA, training runs under bf16 autocast.
"""
from __future__ import annotations

import itertools
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from search_spaces import SearchSpace, Supernet
from search_spaces.elastic import ElasticBatchNorm2d
from tasks.data import DataError, to_device

from ..distributed import Distributed
from ..errors import check_bounds
from ..randomness import RunRandom
from ..rundir import atomic_torch_save, load_checkpoint
from ..runtime import check_finite
from .sandwich_archs import SandwichArchs, SpaceSandwich
from .session import TrainingSession

logger = logging.getLogger(__name__)

__all__ = ["TrainConfig", "SANDWICH_SETTINGS", "SupernetTrainer", "load_trained_supernet", "recalibrate_batchnorm", "to_channels_last",
           "device_of", "batch_share_layers", "ShareDropout"]


#: the settings of `TrainConfig` that shape the sandwich rule (what a supernet step trains), and nothing else
SANDWICH_SETTINGS = ("sandwich_random", "sandwich_fixed", "sandwich_window", "sandwich_top_mmacs", "sandwich_bins",
                     "distill")


@dataclass
class TrainConfig:
    """Supernet training recipe.

    Args:
        epochs: passes over the training split (fractions end the schedule inside an epoch).
        opt / lr / momentum / weight_decay: timm `create_optimizer_v2` arguments.
        sched / warmup_epochs / min_lr: timm `create_scheduler_v2`, stepped per update.
        sandwich_random: random archs per step besides the top and the bottom arch.
        sandwich_fixed: each step trains the top and the bottom arch; false: its `sandwich_random` random archs
            only (no teacher: needs `distill: false`). In a space whose archs share weights across many choices,
            two fixed archs take updates the archs between them need to be ranked (docs/results.md).
        sandwich_window: train the search's latency window instead of the whole space: the top arch is the largest
            within the search's latency limit, the random archs spread evenly over the latency up to it
            (`nas.training.sandwich_archs.WindowSandwich`); no effect without a latency limit.
        sandwich_top_mmacs: with `sandwich_window`, the top arch's million MACs at most (what a step of it costs
            to train); None: the arch with the most parameters within the latency limit, whatever its MACs.
        sandwich_bins: latency bins of the window's random archs.
        distill: the other archs learn from the top arch's outputs (in-place distillation).
        ema_decay: decay of timm's ModelEmaV3 of the supernet weights; 0 disables it. With EMA, subnets are
            evaluated with the averaged weights.
        grad_clip: clip the global gradient norm (0 = off).
        channels_last: run convolutions in NHWC, much faster for depthwise convs on CPU.
        cuda_graphs: on CUDA, replay the training step of fixed networks (finalisation, trained baselines) as a
            CUDA graph (`nas.training.captured_step`; Adam / AdamW only); no effect on the CPU.
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
    sandwich_fixed: bool = True
    sandwich_window: bool = False
    sandwich_top_mmacs: Optional[float] = None
    sandwich_bins: int = 8
    distill: bool = True
    ema_decay: float = 0.0
    grad_clip: float = 5.0
    channels_last: bool = True
    cuda_graphs: bool = True
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.sandwich_top_mmacs is not None and not self.sandwich_top_mmacs > 0:
            raise ValueError("sandwich_top_mmacs: must be > 0 (or null for no cap)")
        if not self.sandwich_fixed:  # no top arch: no teacher, no cap on it, and the draws are all a step trains
            if self.distill:
                raise ValueError("distill: needs the top arch as its teacher; set distill: false with "
                                 "sandwich_fixed: false")
            if self.sandwich_top_mmacs is not None:
                raise ValueError("sandwich_top_mmacs: would be ignored: sandwich_fixed: false trains no top arch; "
                                 "leave it null")
            if self.sandwich_random < 1:
                raise ValueError("sandwich_random: must be >= 1 with sandwich_fixed: false (the step's only archs)")
        check_bounds(self, non_negative=("lr", "weight_decay", "warmup_epochs", "min_lr", "sandwich_random",
                                         "ema_decay", "grad_clip"),
                     positive=("epochs",), at_least={"checkpoint_every": 1, "sandwich_bins": 1})

    @property
    def archs_per_step(self) -> int:
        """Subnets a sandwich step trains (forward and backward each)."""
        return self.sandwich_random + (2 if self.sandwich_fixed else 0)


def to_channels_last(module: nn.Module) -> nn.Module:
    return module.to(memory_format=torch.channels_last)


def in_layout(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """A batch in the memory layout the nets run in (channels-last with `train.channels_last`)."""
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def device_of(module: nn.Module) -> torch.device:
    """Where a module's parameters are (the CPU for a module without any)."""
    return next(module.parameters(), torch.empty(0)).device


class ShareDropout(nn.Module):
    """Dropout of one process's rows `rows` of a batch of `total` rows: it draws the mask of the whole batch, as
    `nn.Dropout` on one process would from the same seed, and applies its own rows of it."""

    def __init__(self, p: float, rows: slice, total: int):
        super().__init__()
        self.p, self.rows, self.total = p, rows, total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        mask = F.dropout(x.new_ones((self.total, *x.shape[1:])), self.p, True)
        return x * mask[self.rows]


@contextmanager
def batch_share_layers(model: nn.Module, rows: slice, total: int):
    """While `model` trains on rows `rows` of a batch of `total` rows split over processes: batch norms take the
    whole batch's statistics and dropouts its mask. Plain `nn.BatchNorm2d` and `nn.Dropout` are replaced for the
    duration by stand-ins on the same parameters and statistics (like torch's `convert_sync_batchnorm`, but
    undone on exit, so checkpoints, copies and extracted subnets never see them)."""
    def stand_in(child: nn.Module) -> nn.Module | None:
        if type(child) is nn.BatchNorm2d:
            return ElasticBatchNorm2d.sharing(child)
        if type(child) is nn.Dropout:
            return ShareDropout(child.p, rows, total).train(child.training)
        return None

    with modules_swapped([model], stand_in):
        norms = [m for m in model.modules() if isinstance(m, ElasticBatchNorm2d)]
        for norm in norms:
            norm.synchronise = True
        try:
            yield
        finally:
            for norm in norms:
                norm.synchronise = False


@contextmanager
def modules_swapped(models: Sequence[nn.Module], stand_in: Callable[[nn.Module], nn.Module | None]):
    """While inside, every submodule of `models` for which `stand_in(child)` gives a module is replaced by it; the
    originals come back on exit. Yields the stand-ins, per model."""
    swaps = [[(parent, name, child, new) for parent in list(model.modules())
              for name, child in parent.named_children() if (new := stand_in(child)) is not None]
             for model in models]
    for parent, name, _, new in itertools.chain.from_iterable(swaps):
        setattr(parent, name, new)
    try:
        yield [[new for *_, new in model_swaps] for model_swaps in swaps]
    finally:
        for parent, name, original, _ in itertools.chain.from_iterable(swaps):
            setattr(parent, name, original)


class SupernetTrainer:
    """Trains a supernet on a task; checkpoints to `checkpoint_path` and resumes from it.

    Args:
        space / supernet: the search space and its supernet.
        task: gives `train_batches(epoch, start_step)`, `loss`, `distill_loss`.
        config: `TrainConfig`.
        seed: run seed (arch sampling, dropout).
        checkpoint_path: file of the training state; loaded when it exists.
        dist: the processes training together (`nas.distributed`; default: this one alone).
        device: where the supernet trains (it is moved there).
        sandwich: the archs of a step (default: the whole space, `SpaceSandwich`).
    """

    def __init__(self, space: SearchSpace, supernet: Supernet, task, config: TrainConfig, seed: int,
                 checkpoint_path: Path, *, dist: Distributed | None = None, device: torch.device | str = "cpu",
                 sandwich: SandwichArchs | None = None):
        from timm.optim import create_optimizer_v2
        from timm.scheduler import create_scheduler_v2

        self.space, self.supernet, self.task, self.config, self.seed = space, supernet, task, config, seed
        self.progress_label = "supernet"
        self.checkpoint_path = Path(checkpoint_path)
        self.dist = dist if dist is not None else Distributed()
        self.device = torch.device(device)
        supernet.to(self.device)
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
        self.sandwich = sandwich if sandwich is not None else SpaceSandwich(space)
        if self.checkpoint_path.exists():
            self._load()
        # every process starts from rank 0's weights, bit for bit, whatever the machine it runs on
        self.dist.broadcast_tensors_(list(supernet.state_dict().values()))
        if self.ema is not None:
            self.dist.broadcast_tensors_(list(self.ema.module.state_dict().values()))

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
        """Rank 0 writes the checkpoint; the other processes wait until it is on disk."""
        if self.dist.is_main:
            atomic_torch_save(self.state_dict(), self.checkpoint_path)
        self.dist.barrier()

    # ------------------------------------------------------------------------------------------ training
    def step_archs(self, epoch: int, step: int) -> list[dict]:
        """Sandwich rule: the top arch, the bottom arch (with `sandwich_fixed`), then random archs drawn from
        (seed, epoch, step)."""
        rng = RunRandom(self.seed).numpy("sandwich.archs", epoch, step)
        fixed = [self.sandwich.top, self.sandwich.bottom] if self.config.sandwich_fixed else []
        return fixed + [self.sandwich.random(rng) for _ in range(self.config.sandwich_random)]

    def train_step(self, x: torch.Tensor, y: torch.Tensor, archs: list[dict]) -> float:
        """One optimizer step over `archs` on one (whole) batch; returns the first arch's loss (the top arch's
        with `sandwich_fixed`).

        With several processes, each trains on its share of the batch (see the module docstring)."""
        self.supernet.train()
        self.optimizer.zero_grad(set_to_none=True)
        if not self.dist.enabled:
            losses = self._backward(to_device(x, self.device), to_device(y, self.device), archs, 1.0)
        else:
            rows = self.dist.share(len(x))
            with batch_share_layers(self.supernet, rows, len(x)):
                weight = (rows.stop - rows.start) / len(x)  # this share's part of the whole batch's mean loss
                losses = self._backward(to_device(x[rows], self.device), to_device(y[rows], self.device), archs,
                                        weight)
            self._sum_gradients()
        check_finite(losses, "supernet training", self.global_step, "train.lr", self.config.lr, len(x))
        if self.config.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.supernet.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return losses[0]

    def _backward(self, x: torch.Tensor, y: torch.Tensor, archs: list[dict], weight: float) -> list[float]:
        """Accumulate the gradients of `archs` on a batch (its losses weighted by `weight`); the losses, summed
        over the processes (the whole batch's)."""
        teacher, losses = None, []
        for arch in archs:
            self.supernet.set_active(arch)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                out = self.supernet(x)
                if teacher is None or not self.config.distill:
                    loss = self.task.loss(out, y)
                else:
                    loss = self.task.distill_loss(out, teacher)
            if teacher is None:
                teacher = out.detach()
            if self.dist.enabled:
                loss = loss * weight
            losses.append(loss.detach().float())
            loss.backward()
        return self.dist.all_reduce_(torch.stack(losses).cpu()).tolist()

    def _sum_gradients(self) -> None:
        """Sum the gradients over the processes: each holds its share's part of the whole batch's mean."""
        self.dist.sum_tensors_([p.grad for p in self.supernet.parameters() if p.grad is not None])

    def train(self, progress: bool = True, on_step: Callable[[int], None] | None = None,
              adapt_threads: bool = True) -> None:
        """Train to the end, checkpointing as configured. `on_step(global_step)` runs after each step;
        `adapt_threads` lets the thread governor drop to one thread on a busy machine (`TrainingSession`)."""
        if self.done:
            return
        started = time.perf_counter()
        with TrainingSession(self, f"{self.progress_label} training", checkpoint_every=self.config.checkpoint_every,
                             progress=progress and self.dist.is_main, progress_label=self.progress_label,
                             adapt_threads=adapt_threads, sync_stop=self.dist.any, on_step=on_step) as session:
            while not self.done:
                epoch, start = divmod(self.global_step, self.steps_per_epoch)
                for step, x, y in self.task.train_batches(epoch, start):
                    x = in_layout(x, self.config.channels_last)
                    torch.manual_seed(RunRandom(self.seed).seed_of("sandwich.noise", epoch, step))
                    self.scheduler.step_update(self.global_step)
                    with session.timed_step():
                        loss = self.train_step(x, y, self.step_archs(epoch, step))
                    if self.ema is not None:
                        self.ema.update(self.supernet, step=self.global_step)
                    self.global_step += 1
                    session.step_done(checkpoint=step == self.steps_per_epoch - 1 or self.done, epoch=epoch,
                                      loss=f"{loss:.3f}", lr=f"{self.optimizer.param_groups[0]['lr']:.4f}")
                    if self.done:
                        break
        logger.info("%s training finished: %d steps in %.0f s", self.progress_label, self.total_steps,
                    time.perf_counter() - started)


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
    device = device_of(model)
    model.eval()
    if not norms:  # e.g. EDSR-style networks: nothing to recalibrate
        return model
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
        bn.train()
    seen = 0
    for x in batches:
        x = to_device(x, device)
        model(in_layout(x, channels_last))
        seen += 1
    if not seen:
        raise DataError("no calibration images: batch norm cannot be recalibrated (task.calib_images must be > 0)")
    for bn in norms:
        bn.momentum = 0.1
    return model.eval()
