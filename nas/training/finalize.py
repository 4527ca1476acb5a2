"""Finalisation: the archs a run hands over, trained past their inherited weights.

Inherited weights rank archs; they are not what a user deploys. After the search, `archs` archs spread over
the cost range of the front (`select_spread`) are trained further as standalone networks, from their
inherited weights (`init: inherited`, fine-tuning as in Once-for-All) or from fresh weights (`init: scratch`:
`SearchSpace.fresh_network`'s, as a from-scratch baseline starts, so that both train by one recipe), optionally
with knowledge distillation from the supernet's largest arch (`kd_ratio`; Hinton et al. 2015; OFA, BigNAS).
The default configs distil nothing: trained students overtake the inherited teacher, which then holds them back
(measured in both default runs). All of them train in lockstep on the same batches, so each
batch and the teacher's output on it are computed once for all students; on the CPU the students train side by
side, one per thread, the teacher's forward beside theirs (`LockstepTrainer._nets_side_by_side`).

Each finalised arch gets `final_<metric>` (the whole val split) and `final_test_<metric>` (and, for tasks that
report more, e.g. `final_test_ssim`); its weights are kept under `checkpoint/final/` for `vpunas export`. Where its
inherited subnet scores better on the whole val split than the trained net, the arch keeps its inherited weights
(`final_epochs` 0, logged): finalisation never makes an arch worse. With
`int8`, it also gets `final_int8_test_<metric>`: the test metric of its INT8 model, as the NPU runs it.
The Kendall tau between inherited-weight and finalised val metric over the finalised archs is the supernet's
ranking fidelity.

Screening (`screen_archs` > `archs`): inherited weights rank archs poorly (that Kendall tau), so more archs than
will be finalised are chosen the same way and all trained for the first `screen_epochs` of the schedule; their
val metric then chooses the `archs` that continue (`select_spread` again, on it), as successive halving does
(Jamieson & Talwalkar 2016; Hyperband). The chosen archs continue where they stopped, so each gets the same
schedule as without screening.

Machines differ by several times in speed: under a run budget (`run_budget_minutes`), the schedule is fitted
before its first step to what the run has left (`_fit_to_budget`), so a run keeps its length rather than its
epochs. Where the budget leaves time to spare at the full epochs, up to `max_archs` archs are finalised instead of
`archs` (the issue's "K sized to the run's budget"). The time is then split among the archs by their step times
(`budgeted_epochs`): a cheap arch trains longer (up to `max_epochs`) than a costly one (down to half of
`epochs`), since the same seconds buy it more epochs. Each net leaves the lockstep when its own schedule ends.

Resuming: the lockstep training state (weights, optimizers, step) is checkpointed like the supernet's (the
screening's in a file of its own), screening scores and each scored arch are journaled (a finalised arch after
its weights are saved, its INT8 score in a journal of its own), so a restart repeats neither finished steps nor
scores.
"""
from __future__ import annotations

import copy
import itertools
import logging
import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from search_spaces import arch_key
from tasks.data import EpochBatches, batch_seed, to_device

from ..errors import ConfigError, RunDirError
from ..rundir import EvaluationJournal, atomic_torch_save, load_checkpoint
from ..runtime import check_finite
from .captured_step import WARMUP_STEPS, CapturedTrainStep, capture_refusal
from .evaluation import ArchEvaluator, fed_from_cpu, test_scores
from .session import TrainingSession
from .supernet_training import TrainConfig, modules_swapped, recalibrate_batchnorm, to_channels_last

logger = logging.getLogger(__name__)

__all__ = ["FinalizeConfig", "select_spread", "LockstepTrainer", "finalize", "final_weights_path",
           "load_final_weights", "ranking_fidelity"]

INITS = ("inherited", "scratch")


@dataclass
class FinalizeConfig:
    """Args:
        archs: archs to finalise, spread over the front's latency range (0 = no finalisation; see
            `select_spread`).
        screen_archs: archs trained for the first `screen_epochs` before `archs` of them are chosen to continue,
            by their val metric then (0, or not more than `archs` = no screening).
        screen_epochs: how far into the schedule the screening trains (below `epochs`).
        init: "inherited" (fine-tune the supernet's weights) or "scratch" (train from fresh weights).
        epochs: passes over the training split (fractions allowed).
        batch_size: training batch of finalisation (0 = the task's `batch_size`). Larger batches train these
            small nets faster per image on the CPU: fewer steps, so less per-step framework work per image.
        lr: peak learning rate (linear warm-up, cosine to 0); None = the supernet's `train.lr`. Optimizer,
            weight decay and gradient clipping are the supernet's (`train` section).
        warmup_epochs: linear warm-up from 1% of `lr`.
        kd_ratio: weight of the distillation loss from the supernet's largest arch, added to the task loss
            (0 = task loss only, no teacher).
        int8: also score each finalised arch quantized to INT8 (`nas.export.quantize`): `final_int8_test_<metric>`.
        run_budget_minutes: the run's wall time (all its sessions) by which finalisation should have ended, its
            scoring included: finalisation then times a few of its training steps and trains each arch for the
            epochs that fit in what is left (never under half of `epochs`, see `budgeted_epochs`); 0 = no budget.
            Machines differ by several times in speed; this keeps a run's length, not its recipe.
        max_archs: under a run budget, finalise up to this many archs when what is left fits them at the full
            `epochs` (timed like the epochs; the first `archs` of them are the archs chosen without the extra
            places); 0 = `archs` exactly. A faster machine so hands over a denser front instead of idle minutes.
        max_epochs: under a run budget, an arch trains for up to this many epochs (0 = `epochs` at most): the
            budget's time is split among the archs by their step times, so cheap archs train longer than costly
            ones (`budgeted_epochs`), and with time to spare all of them train up to `max_epochs`.
    """

    archs: int = 8
    screen_archs: int = 0
    screen_epochs: float = 0.5
    init: str = "inherited"
    epochs: float = 1.0
    batch_size: int = 0
    lr: Optional[float] = None
    warmup_epochs: float = 0.0
    kd_ratio: float = 1.0
    int8: bool = False
    run_budget_minutes: float = 0.0
    max_archs: int = 0
    max_epochs: float = 0.0

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init: {self.init!r} is not one of {', '.join(INITS)}")
        if self.archs < 0:
            raise ValueError("archs: must be >= 0")
        if self.epochs <= 0:
            raise ValueError("epochs: must be > 0")
        if self.screen_archs < 0:
            raise ValueError("screen_archs: must be >= 0")
        if self.batch_size < 0:
            raise ValueError("batch_size: must be >= 0 (0 = the task's batch_size)")
        if self.screening and not 0 < self.screen_epochs < self.epochs:
            raise ValueError(f"screen_epochs: must be > 0 and below epochs ({self.epochs:g})")
        for name in ("warmup_epochs", "kd_ratio", "run_budget_minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        if self.run_budget_minutes and self.screening:
            raise ValueError("run_budget_minutes: not with screening (screen_archs > archs); set one of them to 0")
        if self.max_archs and self.max_archs < self.archs:
            raise ValueError(f"max_archs: must be 0 or at least archs ({self.archs})")
        if self.max_archs > self.archs and not self.run_budget_minutes:
            raise ValueError("max_archs: sized by the run budget; set run_budget_minutes too")
        if self.max_epochs and self.max_epochs < self.epochs:
            raise ValueError(f"max_epochs: must be 0 or at least epochs ({self.epochs:g})")
        if self.max_epochs > self.epochs and not self.run_budget_minutes:
            raise ValueError("max_epochs: sized by the run budget; set run_budget_minutes too")
        if self.lr is not None and self.lr <= 0:
            raise ValueError("lr: must be > 0 (or null for train.lr)")

    @property
    def screening(self) -> bool:
        return self.screen_archs > self.archs > 0


# ---------------------------------------------------------------------------------------------------- selection
def select_spread(records: Sequence[dict], metric: str, n: int, costs: Sequence[str] = ("latency_ms",)) -> list[dict]:
    """`n` distinct archs for finalisation, spread over the cost range of the front (sorted by latency).

    The ends of the front of the metric against each cost (latency, then a search's extra objectives, e.g.
    MACs) come first: its cheapest arch and its best. Then, place by place, the widest gap between the chosen
    archs on any cost's log scale (the largest cost ratio between neighbours, where a user's model that the
    finalised front should beat can fall) gets an arch inside it, preferring the middle half of the gap: of the
    better half of those archs by inherited metric, the cheapest on the other costs (with one cost, the best).
    Costs that rise together (latency and MACs) so share their places instead of each picking archs at the same
    levels. When no gap has an arch left, the remaining places go to the other archs in order of non-dominated
    layer (over the metric and all costs), then metric.

    Inherited metrics rank archs only to within their noise (the default run's ranking fidelity was 0.0 .. 0.55),
    so an arch behind the front is as good a candidate, and a front with a gap in cost still gets archs in the
    gap. Costs disagree about archs (dense convolutions suit the VPU's DPU, depthwise ones the CPU, for which MACs
    stand): a gap in MACs gets the VPU's fastest arch there, a gap in VPU latency the one of fewest MACs, so the
    chosen archs span both trade-offs rather than one kind of arch. In the default run (Xeon VM, 2026-12-02) the
    best inherited archs of the middle gaps all had expansion 1 in the first stage, and 7 archs of expansion 3 of
    the same CPU latency (0.12-0.15 ms) finalised 0.4 points higher on average than 4 of them.
    """
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    unique = list({arch_key(r["arch"]): r for r in records}.values())
    if n <= 0 or not unique:
        return []
    score = np.array([r[metric] for r in unique], dtype=float)
    log_cost = np.log(np.array([[r[c] for c in costs] for r in unique], dtype=float))
    chosen: list[int] = []
    for j in range(len(costs)):
        front = NonDominatedSorting().do(np.stack([-score, log_cost[:, j]], axis=1), only_non_dominated_front=True)
        cheapest = min(front, key=lambda i: (log_cost[i, j], -score[i], i))
        best = max(front, key=lambda i: (score[i], -log_cost[i, j], -i))
        chosen += [int(i) for i in dict.fromkeys((cheapest, best)) if i not in chosen]  # one arch may be both
    chosen = chosen[:n]
    empty: set[tuple] = set()
    while len(chosen) < n:
        gaps = [(right - left, left, right, j) for j in range(len(costs))
                for left, right in itertools.pairwise(sorted(set(log_cost[chosen, j])))
                if (left, right, j) not in empty]
        if not gaps:
            break
        width, left, right, j = max(gaps)
        inside = [i for i in range(len(unique)) if i not in chosen and left < log_cost[i, j] < right]
        if not inside:
            empty.add((left, right, j))
            continue
        pool = [i for i in inside if abs(log_cost[i, j] - (left + right) / 2) <= width / 4] or inside
        better_half = [i for i in pool if score[i] >= np.median(score[pool])]
        chosen.append(min(better_half, key=lambda i: (log_cost[i].sum() - log_cost[i, j], -score[i],
                                                      log_cost[i, j], i)))
    layers = NonDominatedSorting().do(np.stack([-score, *log_cost.T], axis=1))
    layer_of = {int(i): depth for depth, layer in enumerate(layers) for i in layer}
    rest = sorted((i for i in range(len(unique)) if i not in chosen), key=lambda i: (layer_of[i], -score[i], i))
    chosen += rest[:n - len(chosen)]
    return sorted((unique[i] for i in chosen), key=lambda r: (r["latency_ms"], r["id"]))


def feasible_records(records: Sequence[dict], search) -> list[dict]:
    """The records finalisation may choose from (`SearchConfig.finalize_candidates`: e.g. the differentiable
    search's derived arch alone) within the latency limit of the search (`SearchConfig.finalize_scope`): archs it
    treated as infeasible are not worth finalisation time."""
    limit, _ = search.finalize_scope()
    return [r for r in search.finalize_candidates(list(records)) if limit is None or r["latency_ms"] <= limit]


def ranking_fidelity(inherited: Sequence[float], final: Sequence[float]) -> float | None:
    """Kendall tau between inherited-weight and finalised metrics (None for fewer than 2 archs or no spread)."""
    from scipy.stats import kendalltau

    if len(inherited) < 2:
        return None
    tau = kendalltau(inherited, final).statistic
    return None if math.isnan(tau) else float(tau)


# ---------------------------------------------------------------------------------------------------- training
class SeededDropout(nn.Dropout):
    """`nn.Dropout` whose masks come from a generator of its own (seeded step by step by `LockstepTrainer`)."""

    def __init__(self, p: float, device: torch.device):
        super().__init__(p)
        self.generator = torch.Generator(device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return torch.zeros_like(x)
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)
        return x * keep * (1 / (1 - self.p))


class LockstepTrainer:
    """Trains several standalone networks on the same batches, each with its own optimizer.

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
        stop_epochs: train only this far into the schedule (screening); None = to its end.
    """

    def __init__(self, nets: list[nn.Module], teacher: nn.Module | None, task, train: TrainConfig,
                 config: FinalizeConfig, seed: int, checkpoint_path: Path, names: list[str], *,
                 device: torch.device | str = "cpu", stop_epochs: float | None = None):
        self.nets, self.teacher, self.task, self.train_config, self.config = nets, teacher, task, train, config
        self.seed, self.checkpoint_path, self.names = seed, Path(checkpoint_path), list(names)
        self.device = torch.device(device)
        for net in [*nets, *([teacher] if teacher is not None else [])]:
            net.to(self.device)
        if train.channels_last:
            for net in nets:
                to_channels_last(net)
        self.peak_lr = config.lr if config.lr is not None else train.lr
        self.optimizers = [self._optimizer(net) for net in nets]
        refusal = capture_refusal(self.device, self.optimizers[0], train.cuda_graphs)
        if refusal and self.device.type == "cuda":
            logger.info("finalisation trains eagerly on the GPU: %s", refusal)
        #: per net, its step replayed as a CUDA graph (made at its first step); None = eager steps
        self.captured: list[CapturedTrainStep | None] | None = None if refusal else [None] * len(nets)
        task_batches = task.train_batches
        own_size = config.batch_size and config.batch_size != task_batches.batch_size
        self.batches = (EpochBatches(task_batches.source, config.batch_size, task_batches.seed, task_batches.drop_last,
                                     task_batches.workers) if own_size else task_batches)
        self.steps_per_epoch = self.batches.steps_per_epoch()
        if self.steps_per_epoch < 1:
            raise ConfigError(f"search.finalize.batch_size: {self.batches.batch_size} is more than the "
                              f"{len(task_batches.source)} training samples")
        self.net_steps = [max(1, round(config.epochs * self.steps_per_epoch))] * len(nets)  # each net's schedule
        self.stop_step = self.total_steps if stop_epochs is None else round(stop_epochs * self.steps_per_epoch)
        self.warmup_steps = round(config.warmup_epochs * self.steps_per_epoch)
        self.global_step = 0
        self._pool: ThreadPoolExecutor | None = None  # threads training nets side by side (`_nets_side_by_side`)
        self.workers = 1
        self._dropouts: list[list[SeededDropout]] = []  # per net, while side by side
        self._net_seconds: list[float] | None = None  # per net, while `time_steps` times them
        if self.checkpoint_path.exists():
            self._load()

    def _optimizer(self, net: nn.Module):
        from timm.optim import create_optimizer_v2

        train = self.train_config
        return create_optimizer_v2(net, opt=train.opt, lr=self.peak_lr, weight_decay=train.weight_decay,
                                   momentum=train.momentum)

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

    def reschedule(self, epochs: float | Sequence[float]) -> None:
        """Make the schedule `epochs` long, or each net's its own of `epochs` (its cosine then ends there; a net
        whose schedule has ended trains no more while the others go on); only before its first step."""
        if self.global_step:
            raise RuntimeError("LockstepTrainer.reschedule: the schedule has started")
        epochs = [epochs] * len(self.nets) if isinstance(epochs, (int, float)) else list(epochs)
        self.net_steps = [max(1, round(e * self.steps_per_epoch)) for e in epochs]
        self.stop_step = self.total_steps

    def time_steps(self, steps: int = 10) -> tuple[float, list[float]]:
        """(mean wall time of one lockstep step, loading its batch included; each net's mean time of its own
        work in it), timed as `train` runs it on copies of the nets (fresh optimizers, the first batches of the
        schedule) after two untimed steps: the training itself is left untouched."""
        probe = copy.copy(self)
        probe.nets = copy.deepcopy(self.nets)
        probe.optimizers = [self._optimizer(net) for net in probe.nets]
        probe.captured = None if self.captured is None else [None] * len(self.nets)
        untimed = 2 if self.captured is None else WARMUP_STEPS + 1  # captured: the eager steps and the capture
        probe.net_steps = [steps + untimed] * len(self.nets)  # every net takes every timed step
        batches = itertools.chain.from_iterable(self.batches(epoch, 0) for epoch in itertools.count())  # tiny splits
        with probe._nets_side_by_side():
            for _, x, y in itertools.islice(batches, untimed):
                probe.train_step(*self._prepared(x, y))
            started = time.perf_counter()
            probe._net_seconds = [0.0] * len(self.nets)
            for _, x, y in itertools.islice(batches, steps):
                probe.train_step(*self._prepared(x, y))
        return (time.perf_counter() - started) / steps, [seconds / steps for seconds in probe._net_seconds]

    def continued(self, indices: Sequence[int], checkpoint_path: Path) -> "LockstepTrainer":
        """A trainer of the nets at `indices` (and their optimizers) that continues this one's schedule to its end,
        checkpointing to `checkpoint_path` (loaded when it exists: a resumed continuation)."""
        kept = copy.copy(self)
        kept.nets = [self.nets[i] for i in indices]
        kept.optimizers = [self.optimizers[i] for i in indices]
        kept.captured = None if self.captured is None else [self.captured[i] for i in indices]
        kept.names = [self.names[i] for i in indices]
        kept.net_steps = [self.net_steps[i] for i in indices]
        kept.checkpoint_path, kept.stop_step = Path(checkpoint_path), kept.total_steps
        if kept.checkpoint_path.exists():
            kept._load()
        return kept

    def lr(self, step: int, schedule_steps: int | None = None) -> float:
        """Linear warm-up from 1% of the peak, then cosine to 0 at `schedule_steps` (a net's schedule; default:
        the longest)."""
        if step < self.warmup_steps:
            return self.peak_lr * (0.01 + 0.99 * step / self.warmup_steps)
        end = self.total_steps if schedule_steps is None else schedule_steps
        t = (step - self.warmup_steps) / max(1, end - self.warmup_steps)
        return self.peak_lr * 0.5 * (1 + math.cos(math.pi * t))

    def state_dict(self) -> dict:
        return {"global_step": self.global_step, "total_steps": self.total_steps, "net_steps": self.net_steps,
                "names": self.names, "nets": [n.state_dict() for n in self.nets],
                "optimizers": [o.state_dict() for o in self.optimizers]}

    def _load(self) -> None:
        state = load_checkpoint(self.checkpoint_path)
        if state["names"] != self.names:
            raise RunDirError(f"{self.checkpoint_path} holds the finalisation of other archs; it cannot be resumed "
                             "with this run's front")
        for net, weights in zip(self.nets, state["nets"]):
            net.load_state_dict(weights)
        for optimizer, opt_state in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(opt_state)
        self.global_step = state["global_step"]
        planned = state.get("total_steps", self.total_steps)  # a budget may have rescheduled it: keep its plan
        if self.stop_step == self.total_steps:
            self.stop_step = planned
        self.net_steps = state.get("net_steps", [planned] * len(self.nets))
        logger.info("resumed finalisation at step %d of %d", self.global_step, self.stop_step)

    def save(self) -> None:
        atomic_torch_save(self.state_dict(), self.checkpoint_path)

    def _prepared(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.train_config.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return to_device(x, self.device), to_device(y, self.device)

    def _each_net(self, fn, indices: Sequence[int]) -> list:
        """`fn(i)` for each net of `indices`, on `workers` threads when there are several; costliest nets (the
        last: they come sorted by latency) first, so the threads finish together."""
        if self._net_seconds is not None:
            fn = self._timed_net(fn)
        order = sorted(indices, reverse=True)
        if self._pool is not None and self.workers > 1:
            done = dict(zip(order, self._pool.map(fn, order)))
        else:
            done = {i: fn(i) for i in order}
        return [done[i] for i in indices]

    def _timed_net(self, fn):
        def timed(i: int):
            started = time.perf_counter()
            result = fn(i)
            self._net_seconds[i] += time.perf_counter() - started
            return result
        return timed

    def _started(self, fn, *args) -> Future:
        """`fn(*args)` on a worker thread when nets train side by side, else done here and now."""
        if self._pool is not None and self.workers > 1:
            return self._pool.submit(fn, *args)
        done = Future()
        done.set_result(fn(*args))
        return done

    def _teacher_outputs(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.teacher(x)

    def _loss(self, out: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None) -> torch.Tensor:
        loss = self.task.loss(out, y)
        if teacher_out is not None:
            loss = loss + self.config.kd_ratio * self.task.distill_loss(out, teacher_out)
        return loss

    def _set_lr(self, i: int) -> None:
        for group in self.optimizers[i].param_groups:
            group["lr"] = self.lr(self.global_step, self.net_steps[i])

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> list[float]:
        """One optimizer step of every net whose schedule has not ended on one batch; returns their losses.

        With distillation the teacher's forward is queued first: side by side it runs beside the students'
        forwards, which wait for its outputs only at their loss. On CUDA (`captured`) each net's whole step is
        one graph replay, and a non-finite loss is caught after the nets' updates, before any checkpoint."""
        teacher_out = self._started(self._teacher_outputs, x) if self.teacher is not None else None
        training = [i for i, steps in enumerate(self.net_steps) if self.global_step < steps]
        if self.captured is not None:
            losses = self._captured_steps(x, y, None if teacher_out is None else teacher_out.result(), training)
            check_finite(losses, "finalisation training", self.global_step)
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

        losses = self._each_net(forward_backward, training)
        check_finite(losses, "finalisation training", self.global_step)  # before any net's update
        self._each_net(update, training)
        return losses

    def _captured_steps(self, x: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None,
                        training: Sequence[int]) -> list[float]:
        """The nets' steps as graph replays, one after the other; their losses read at once (one sync). While
        `time_steps` times the nets, each waits for its own replay."""
        losses = []
        for i in training:
            started = time.perf_counter()
            if self.captured[i] is None:
                self.captured[i] = CapturedTrainStep(self.nets[i], self.optimizers[i], self._loss,
                                                     self.train_config.grad_clip)
            self.nets[i].train()
            self._set_lr(i)
            losses.append(self.captured[i](x, y, teacher_out))
            if self._net_seconds is not None:
                torch.cuda.synchronize(self.device)
                self._net_seconds[i] += time.perf_counter() - started
        return torch.stack(losses).tolist() if losses else []

    @contextmanager
    def _nets_side_by_side(self) -> Iterator[None]:
        """Train the nets on torch's threads one net per thread, each net single-threaded, instead of every net on
        all threads in turn: these small nets leave much of a parallel region idle (the default run's 8 archs on a
        2-core AMD EPYC VM: 399 s instead of 459 s).
        A net's results then depend on no thread count or schedule. The nets' dropouts draw from generators of
        their own (`seed_dropouts`), as threads sharing torch's generator would draw in no fixed order."""
        cores = self.nets_at_once()
        def seeded(child: nn.Module) -> SeededDropout | None:
            if self.captured is not None:  # graphs draw from the default generator (`seed_dropouts`)
                return None
            return SeededDropout(child.p, self.device).train(child.training) if type(child) is nn.Dropout else None

        with modules_swapped(self.nets, seeded) as self._dropouts:
            self._pool, self.workers = ThreadPoolExecutor(cores), cores
            torch.set_num_threads(1)
            try:
                yield
            finally:
                torch.set_num_threads(cores)
                self._pool.shutdown()
                self._pool, self.workers, self._dropouts = None, 1, []

    def nets_at_once(self) -> int:
        """How many nets `_nets_side_by_side` trains at once: one per torch thread on the CPU, one on a GPU (it
        runs one net at a time anyway)."""
        return torch.get_num_threads() if self.device.type == "cpu" else 1

    def _use_workers(self, n: int) -> None:
        """The thread governor's setting: `n` nets train at once (each on one thread)."""
        self.workers = n

    def seed_dropouts(self, seed: int) -> None:
        """Seed each net's dropouts for the next step (inside `_nets_side_by_side`); captured steps draw from the
        default CUDA generator, seeded here."""
        if self.captured is not None:
            torch.cuda.manual_seed(seed)
        for i, dropouts in enumerate(self._dropouts):
            for j, dropout in enumerate(dropouts):
                dropout.generator.manual_seed(batch_seed(seed, i, j))

    def train(self, progress: bool = True, adapt_threads: bool = True) -> None:
        """Train to `stop_step` (see `SupernetTrainer.train`)."""
        if self.done:
            return
        started = time.perf_counter()
        with (TrainingSession(self, "finalisation training", checkpoint_every=self.train_config.checkpoint_every,
                              progress=progress, progress_label=f"finalise {len(self.nets)} archs",
                              progress_total=self.stop_step, set_threads=self._use_workers,
                              adapt_threads=adapt_threads) as session,
              self._nets_side_by_side()):
            while not self.done:
                epoch, start = divmod(self.global_step, self.steps_per_epoch)
                for step, x, y in self.batches(epoch, start):
                    if self.done:
                        break
                    x, y = self._prepared(x, y)
                    self.seed_dropouts(batch_seed(self.seed, epoch, step) ^ 0x5F1A)  # not the supernet's masks
                    with session.timed_step():
                        losses = self.train_step(x, y)
                    self.global_step += 1
                    if self.global_step in self.net_steps:  # nets leave the lockstep: steps of another pace
                        session.new_phase()
                    session.step_done(checkpoint=self.done or step == self.steps_per_epoch - 1, epoch=epoch,
                                      loss=f"{np.mean(losses):.3f}")
        logger.info("finalisation training: %d archs at step %d of %d after %.0f s", len(self.nets), self.stop_step,
                    self.total_steps, time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------------- the stage
def final_weights_path(run_dir, arch_id: int) -> Path:
    return run_dir.checkpoint_dir / "final" / f"arch{arch_id}.pt"


def load_final_weights(run_dir, arch_id: int, net: nn.Module) -> bool:
    """Load arch `arch_id`'s finalised weights into `net` (its extracted subnet); False when it has none."""
    path = final_weights_path(run_dir, arch_id)
    if not path.exists():
        return False
    net.load_state_dict(load_checkpoint(path))
    return True


def _val(task, model: nn.Module) -> float:
    """The metric on the whole val split."""
    return round(float(task.evaluate(fed_from_cpu(model), "val", all_images=True)), 4)


def _better_of(task, trained: nn.Module, inherited: nn.Module) -> tuple[nn.Module, dict, float | None]:
    """Whichever of the trained net and the arch's inherited subnet (recalibrated) scores better on the whole val
    split, with its final_<metric> (val) and final_test_<metric> (and the task's other test scores); the third
    value is the trained net's val metric when the inherited subnet won, else None. Finalisation so never hands
    over an arch worse than its inherited weights made it (too short a schedule, a weak teacher, too high a
    learning rate)."""
    trained_val, inherited_val = _val(task, trained), _val(task, inherited)
    keep = inherited_val > trained_val
    net = inherited if keep else trained
    scores = {f"final_{task.metric}": inherited_val if keep else trained_val,
              **{f"final_{k}": v for k, v in test_scores(task, net).items()}}
    return net, scores, trained_val if keep else None


def _int8_scores(ctx, chosen: Sequence[dict], keys: Sequence[str], evaluator: ArchEvaluator) -> dict[str, float]:
    """Arch key -> test metric of the finalised arch quantized to INT8; journaled, so a restart scores no arch
    twice."""
    from ..export.quantize import int8_metric

    journal = EvaluationJournal(ctx.run_dir.checkpoint_dir / "finalized_int8.jsonl")
    scored = {r["key"]: r for r in journal.load()}
    started = time.perf_counter()
    for record, key in zip(chosen, keys):
        if key not in scored:
            net = evaluator.supernet.extract(record["arch"]).cpu()  # INT8 models run on the CPU
            load_final_weights(ctx.run_dir, record["id"], net)
            scored[key] = {"key": key, "id": record["id"], "int8": round(int8_metric(net.eval(), ctx.task)[1], 4)}
            journal.append(scored[key])
    logger.info("INT8 test %s of %d finalised archs in %.1f s", ctx.task.metric, len(keys),
                time.perf_counter() - started)
    return {key: scored[key]["int8"] for key in keys}


def _lockstep(ctx, records: Sequence[dict], evaluator: ArchEvaluator, checkpoint: Path,
              stop_epochs: float | None = None) -> LockstepTrainer:
    """A lockstep trainer of `records`' archs, initialised as `init` says (resumed from `checkpoint` if it exists)."""
    config: FinalizeConfig = ctx.config.search.finalize
    torch.manual_seed(ctx.config.seed)  # fresh weights of the `scratch` init
    if config.init == "inherited":
        nets = [evaluator.subnet(r["arch"]) for r in records]
    else:
        nets = [ctx.space.fresh_network(r["arch"]) for r in records]
    teacher = evaluator.subnet(ctx.space.largest()).eval() if config.kd_ratio > 0 else None
    if teacher is not None:
        teacher.requires_grad_(False)
    return LockstepTrainer(nets, teacher, ctx.task, ctx.config.train, config, ctx.config.seed, checkpoint,
                           [arch_key(r["arch"]) for r in records], device=evaluator.device, stop_epochs=stop_epochs)


def _screening_trainer(ctx, candidates: Sequence[dict], evaluator: ArchEvaluator) -> LockstepTrainer:
    """The lockstep trainer of all screened archs, stopping at `screen_epochs` (resumed from screen.pt)."""
    return _lockstep(ctx, candidates, evaluator, ctx.run_dir.checkpoint_dir / "screen.pt",
                     stop_epochs=ctx.config.search.finalize.screen_epochs)


def _screen(ctx, candidates: Sequence[dict], evaluator: ArchEvaluator,
            costs: Sequence[str]) -> tuple[list[dict], LockstepTrainer | None]:
    """(the `archs` of `candidates` that continue, chosen by their val metric after `screen_epochs`; the
    screening's trainer, None when an earlier session finished the screening)."""
    config: FinalizeConfig = ctx.config.search.finalize
    metric = ctx.task.metric
    journal = EvaluationJournal(ctx.run_dir.checkpoint_dir / "screened.jsonl")
    screened = {r["key"]: r[metric] for r in journal.load()}
    keys = [arch_key(r["arch"]) for r in candidates]
    trainer = None
    if not all(k in screened for k in keys):
        logger.info("screening %d archs (ids %s) for %.3g of %.3g epochs", len(candidates),
                    [r["id"] for r in candidates], config.screen_epochs, config.epochs)
        trainer = _screening_trainer(ctx, candidates, evaluator)
        trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
        for key, net in zip(keys, trainer.nets):
            if key not in screened:
                screened[key] = round(float(ctx.task.evaluate(fed_from_cpu(net), "val", all_images=True)), 4)
                journal.append({"key": key, metric: screened[key]})
    rescored = [dict(r, **{metric: screened[k]}) for r, k in zip(candidates, keys)]
    kept = {arch_key(r["arch"]) for r in select_spread(rescored, metric, config.archs, costs)}
    logger.info("screened: %s", ", ".join(f"id {r['id']} {r[metric]:.2f}{' (continues)' if k in kept else ''}"
                                          for r, k in zip(rescored, keys)))
    return [r for r, k in zip(candidates, keys) if k in kept], trainer


def planned_seconds(net_steps: Sequence[int], net_seconds: Sequence[float], step_seconds: float,
                    workers: int) -> float:
    """Training time of a lockstep plan whose nets stop at `net_steps`. A step costs its nets' work shared among
    `workers` threads (the longest net's at least), plus what else a step of all nets took beyond theirs
    (`step_seconds` as timed with all of them: loading the batch, waiting on threads)."""
    def busy(seconds: Sequence[float]) -> float:
        return max(sum(seconds) / workers, max(seconds))

    rest = max(0.0, step_seconds - busy(net_seconds))
    total, done = 0.0, 0
    for end in sorted(set(net_steps)):
        training = [c for c, steps in zip(net_seconds, net_steps) if steps >= end]
        total += (end - done) * (rest + busy(training))
        done = end
    return total


def budgeted_epochs(epochs: float, max_epochs: float, seconds_left: float, scoring_seconds: float,
                    steps_per_epoch: int, step_seconds: float, net_seconds: Sequence[float],
                    workers: int) -> list[float]:
    """Each net's epochs, in tenths, whose training (`planned_seconds`) and the scoring after it fit in
    `seconds_left`: at most `max(epochs, max_epochs)`, never under half of `epochs` (a budget spent elsewhere is
    exceeded rather than the archs left untrained), and in between in inverse proportion to the square root of
    the net's step time.

    That split makes the most of the time when an arch's error falls like 1/epochs (equal gain per second at
    the margin: e_i ~ 1/sqrt(c_i)), as the default run's archs did: 1.5 -> 2 -> 3 -> 5 epochs gained 0.6, 0.56
    and 0.6 points of test top-1 (about 4/epochs). Its archs' steps differ about 5x in time (46-214 ms a net in
    the lockstep, AMD EPYC VM of 2026-12-03): where the budget fit 14 archs, they got 2.5-5 epochs, and the low
    end, where a user's small model is hardest to beat, gained 0.4-0.8 points over 3 epochs each (README,
    "Search quality, measured")."""
    lowest, highest = epochs / 2, max(epochs, max_epochs)
    net_seconds = [max(c, 1e-9) for c in net_seconds]  # a net too quick for the clock
    cheapest = min(net_seconds)

    def plan(longest: float) -> list[float]:  # the cheapest net's epochs -> everyone's
        return [min(highest, max(lowest, math.floor(longest * math.sqrt(cheapest / c) * 10 + 1e-9) / 10))
                for c in net_seconds]

    def fits(net_epochs: Sequence[float]) -> bool:
        steps = [max(1, round(e * steps_per_epoch)) for e in net_epochs]
        return planned_seconds(steps, net_seconds, step_seconds, workers) + scoring_seconds <= seconds_left

    low, high = lowest, highest * math.sqrt(max(net_seconds) / cheapest)  # plan(high): all at `highest`
    longest, shortest = plan(high), plan(low)
    if fits(longest):
        return longest
    if not fits(shortest):
        return shortest
    for _ in range(40):  # plan(low) fits, plan(high) does not
        low, high = ((low + high) / 2, high) if fits(plan((low + high) / 2)) else (low, (low + high) / 2)
    return plan(low)


def budgeted_archs(archs: int, max_archs: int, seconds_left: float, seconds_per_arch: float) -> int:
    """How many archs, `archs` to `max_archs`, fit in `seconds_left` at `seconds_per_arch` each (training and
    scoring; the lockstep step's time grows with its nets)."""
    return max(archs, min(max_archs, math.floor(seconds_left / seconds_per_arch)))


def _timed(ctx, trainer: LockstepTrainer) -> tuple[float, list[float], float]:
    """(seconds of one lockstep step, each net's seconds in it, seconds of scoring all its nets), timed on copies:
    the training itself is left untouched."""
    step_seconds, net_seconds = trainer.time_steps()
    probe = copy.deepcopy(trainer.nets[-1])  # the costliest arch (they come sorted by latency): not too little
    timed = time.perf_counter()
    probe = recalibrate_batchnorm(probe, ctx.task.calibration_batches(), ctx.config.train.channels_last)
    _better_of(ctx.task, probe, probe)  # its inherited subnet is scored beside it
    return step_seconds, net_seconds, (time.perf_counter() - timed) * len(trainer.nets)


def _epochs_text(epochs: Sequence[float]) -> str:
    low, high = min(epochs), max(epochs)
    return f"{low:.3g} epochs" if low == high else f"{low:.3g}-{high:.3g} epochs by arch cost"


def _fit_to_budget(ctx, trainer: LockstepTrainer, chosen: list[dict], choose, evaluator: ArchEvaluator,
                   seconds_left: float) -> tuple[LockstepTrainer, list[dict]]:
    """A fresh finalisation sized to the time the run's budget leaves it: more archs (`choose(n)`, up to
    `max_archs`) when it has time for them at the full epochs, then each arch's epochs by its cost
    (`budgeted_epochs`: up to `max_epochs`, down to half of `epochs`). Returns the trainer and its archs; the
    plan is checkpointed at once (the archs are its nets), so a resumed run keeps it."""
    config: FinalizeConfig = ctx.config.search.finalize
    started = time.perf_counter()
    step_seconds, net_seconds, scoring = _timed(ctx, trainer)
    if config.max_archs > len(chosen):
        left = seconds_left - (time.perf_counter() - started)
        per_arch = (step_seconds * round(config.epochs * trainer.steps_per_epoch) + scoring) / len(chosen)
        wider = choose(budgeted_archs(len(chosen), config.max_archs, left, per_arch))
        if len(wider) > len(chosen):
            chosen = wider
            trainer = _lockstep(ctx, chosen, evaluator, trainer.checkpoint_path)
            step_seconds, net_seconds, scoring = _timed(ctx, trainer)
    left = seconds_left - (time.perf_counter() - started)
    workers = trainer.nets_at_once()
    epochs = budgeted_epochs(config.epochs, config.max_epochs, left, scoring, trainer.steps_per_epoch, step_seconds,
                             net_seconds, workers)
    trainer.reschedule(epochs)
    trainer.save()
    planned = planned_seconds(trainer.net_steps, net_seconds, step_seconds, workers)
    logger.info("run budget %g min: %.1f min left for finalisation; %d archs, a lockstep step takes %.2f s "
                "(%.0f-%.0f ms a net), scoring about %.0f s -> %s (configured: %.3g; about %.1f min)",
                config.run_budget_minutes, left / 60, len(chosen), step_seconds, min(net_seconds) * 1e3,
                max(net_seconds) * 1e3, scoring, _epochs_text(epochs), config.epochs, (planned + scoring) / 60)
    return trainer, chosen


def _planned_archs(checkpoint: Path) -> int | None:
    """The number of archs a started finalisation trains (a budget may have added some), None before it starts."""
    return len(load_checkpoint(checkpoint, mmap=True)["names"]) if checkpoint.exists() else None


def finalize(ctx, records: Sequence[dict], evaluator: ArchEvaluator,
             seconds_left: float | None = None) -> dict[str, dict]:
    """Finalise the run's chosen archs (see the module docstring); returns arch key -> final scores.

    `seconds_left`: what the run's budget (`run_budget_minutes`) leaves for finalisation; None = no budget."""
    config: FinalizeConfig = ctx.config.search.finalize
    task, run_dir = ctx.task, ctx.run_dir
    search = ctx.config.search
    _, costs = search.finalize_scope()
    feasible = feasible_records(records, search)
    checkpoint = run_dir.checkpoint_dir / "finalize.pt"
    choose = lambda n: select_spread(feasible, task.metric, n, costs)  # choose(n) holds choose(m), m < n
    planned = None if config.screening else _planned_archs(checkpoint)
    candidates = choose(config.screen_archs if config.screening else planned or config.archs)
    if not candidates:
        return {}
    started = time.perf_counter()
    chosen, screening = _screen(ctx, candidates, evaluator, costs) if config.screening else (candidates, None)
    journal = EvaluationJournal(run_dir.checkpoint_dir / "finalized.jsonl")
    scored = {r["key"]: r for r in journal.load()}
    keys = [arch_key(r["arch"]) for r in chosen]
    if not all(k in scored for k in keys):
        if config.screening and not checkpoint.exists():  # the chosen archs continue from the screening
            screening = screening or _screening_trainer(ctx, candidates, evaluator)
            trainer = screening.continued([i for i, r in enumerate(candidates) if arch_key(r["arch"]) in keys],
                                          checkpoint)
        else:
            fresh = not checkpoint.exists()
            trainer = _lockstep(ctx, chosen, evaluator, checkpoint)
            if fresh and seconds_left is not None:
                trainer, chosen = _fit_to_budget(ctx, trainer, chosen, choose, evaluator, seconds_left)
                keys = [arch_key(r["arch"]) for r in chosen]
        logger.info("finalising %d archs (ids %s, %s init, %s, kd_ratio %g)", len(chosen),
                    [r["id"] for r in chosen], config.init, _epochs_text(trainer.net_epochs), config.kd_ratio)
        trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
        calibrate = ctx.config.train.channels_last
        for record, key, net, epochs in zip(chosen, keys, trainer.nets, trainer.net_epochs):
            if key in scored:
                continue
            net = recalibrate_batchnorm(net, task.calibration_batches(), calibrate)
            net, scores, rejected = _better_of(task, net, evaluator.subnet(record["arch"]))
            kept = rejected is not None
            if kept:
                logger.info("  id %d: its inherited weights score %.2f on val, %.3g epochs of finalisation %.2f: it "
                            "keeps them (final_epochs 0)", record["id"], scores[f"final_{task.metric}"], epochs,
                            rejected)
            plain = net.to(memory_format=torch.contiguous_format)
            atomic_torch_save(plain.state_dict(), final_weights_path(run_dir, record["id"]))
            scored[key] = dict(scores, final_epochs=0 if kept else round(epochs, 2), key=key, id=record["id"])
            journal.append(scored[key])
    finals = {k: {f: v for f, v in scored[k].items() if f not in ("key", "id")} for k in keys}
    if config.int8:
        for key, score in _int8_scores(ctx, chosen, keys, evaluator).items():
            finals[key][f"final_int8_test_{task.metric}"] = score
    metric = f"final_{task.metric}"
    tau = ranking_fidelity([r[task.metric] for r in chosen], [finals[k][metric] for k in keys])
    logger.info("finalised %d archs in %.0f s; ranking fidelity (Kendall tau, inherited vs finalised val %s): %s",
                len(chosen), time.perf_counter() - started, task.metric, "n/a" if tau is None else f"{tau:.3f}")
    for record, key in zip(chosen, keys):
        int8 = finals[key].get(f"final_int8_test_{task.metric}")
        logger.info("  id %d: latency %.4f ms, %s %.2f inherited -> %.2f finalised (test %.2f%s)", record["id"],
                    record["latency_ms"], task.metric, record[task.metric], finals[key][metric],
                    finals[key][f"final_test_{task.metric}"], "" if int8 is None else f", INT8 {int8:.2f}")
    return finals
