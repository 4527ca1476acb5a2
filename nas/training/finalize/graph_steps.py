"""The lockstep nets' steps as CUDA graph replays (`nas.training.captured_step`): each net's step is captured at
its first step and replayed after, one net after the other."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn

from ..captured_step import CapturedTrainStep, LossFn
from .net_timing import NetClock


class GraphSteps:
    """Per net, its step replayed as a CUDA graph (made at its first step).

    Args:
        nets / optimizers: the lockstep nets and theirs.
        loss: the students' loss (`LossFn`).
        grad_clip: clip each net's global gradient norm (0 = off).
        clock: times each net's replay, waiting for it, while started.
    """

    def __init__(self, nets: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer], loss: LossFn,
                 grad_clip: float, clock: NetClock):
        self.nets, self.optimizers, self.loss, self.grad_clip, self.clock = nets, optimizers, loss, grad_clip, clock
        self.steps: list[CapturedTrainStep | None] = [None] * len(nets)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None, training: Sequence[int],
                 set_lr: Callable[[int], None]) -> list[float]:
        """The steps of the nets of `training`, one after the other, each after `set_lr(i)`; their losses read at
        once (one sync)."""
        losses = []
        for i in training:
            with self.clock.timed(i, synchronize=x.device):
                if self.steps[i] is None:
                    self.steps[i] = CapturedTrainStep(self.nets[i], self.optimizers[i], self.loss, self.grad_clip)
                self.nets[i].train()
                set_lr(i)
                losses.append(self.steps[i](x, y, teacher_out))
        return torch.stack(losses).tolist() if losses else []
