"""The lockstep nets' optimizers and learning-rate schedules: one optimizer per net by the supernet's recipe, and
per net a linear warm-up and a cosine that ends where that net's own schedule ends."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from ..supernet_training import TrainConfig


def net_optimizer(net: nn.Module, train: TrainConfig, peak_lr: float) -> torch.optim.Optimizer:
    """`net`'s optimizer by the recipe of `train` (optimizer, weight decay, momentum) at `peak_lr`."""
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2(net, opt=train.opt, lr=peak_lr, weight_decay=train.weight_decay,
                               momentum=train.momentum)


def epochs_to_steps(epochs: Sequence[float], steps_per_epoch: int) -> list[int]:
    """Each schedule of `epochs` in optimizer steps (one at least)."""
    return [max(1, round(e * steps_per_epoch)) for e in epochs]


def cosine_schedulers(optimizers: Sequence[torch.optim.Optimizer], peak_lr: float, net_steps: Sequence[int],
                      warmup_steps: int) -> list:
    """Per net, timm's schedule stepped per update: a linear warm-up from 1% of the peak, then a cosine to 0 at
    the end of the net's own steps (`net_steps`)."""
    from timm.scheduler import CosineLRScheduler

    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["initial_lr"] = peak_lr  # the schedule's peak, also for optimizers loaded mid-schedule
    return [CosineLRScheduler(optimizer, t_initial=max(1, steps - warmup_steps), lr_min=0.0,
                              warmup_t=warmup_steps, warmup_lr_init=0.01 * peak_lr, warmup_prefix=True,
                              t_in_epochs=False)
            for optimizer, steps in zip(optimizers, net_steps)]
