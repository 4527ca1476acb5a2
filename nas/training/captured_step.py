"""Training steps of fixed networks replayed as CUDA graphs.

A small network's training step on a GPU is a few hundred kernels of microseconds each: launching them one by one
from Python costs more than running them, and the GPU stays mostly idle (the figures: docs/results.md). Captured
once as a CUDA graph (forward under bf16 autocast, loss, backward, gradient clipping, optimizer step), a step is
one launch. Finalisation (`LockstepTrainer`) and trained baselines (`StandaloneTrainer`)
use it on CUDA; on the CPU nothing is captured and their steps are those of before.

What capture needs, and how it is met:
* static tensors: each batch is copied into the graph's own input tensors (training batches are whole batches:
  `EpochBatches` drops the last partial one);
* an optimizer that steps without the host: torch's Adam / AdamW with `capturable=True`, each parameter group's
  learning rate in a device tensor filled before each replay from the float the schedule set; other optimizers
  (SGD) train eagerly (`capture_refusal` says why);
* random numbers: dropout draws from the default CUDA generator, which graphs replay safely; the trainers seed it
  before each step, so a resumed run draws the same masks;
* warm-up: the first `WARMUP_STEPS` steps run eagerly on a side stream (as torch's documentation does), creating
  the optimizer's state and picking the kernels before the capture; they are steps of the schedule, not extra ones.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn as nn

__all__ = ["CapturedTrainStep", "capture_refusal", "WARMUP_STEPS"]

WARMUP_STEPS = 2

#: loss(outputs, labels, teacher outputs or None) -> scalar loss
LossFn = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


def capture_refusal(device: torch.device, optimizer: torch.optim.Optimizer, enabled: bool) -> str | None:
    """Why a training step on `device` with `optimizer` is not captured (None: it is)."""
    if not enabled:
        return "train.cuda_graphs is off"
    if device.type != "cuda":
        return "not on CUDA"
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return f"{type(optimizer).__name__} cannot step inside a CUDA graph (Adam / AdamW can)"
    return None


class CapturedTrainStep:
    """One network's training step (forward under bf16 autocast, loss, backward, clipping, optimizer step), eager for
    the first `WARMUP_STEPS` calls, then captured and replayed.

    Args:
        net: the network, on CUDA, in train mode while it trains.
        optimizer: its Adam / AdamW (made capturable here; its state moves to the device).
        loss_fn: loss of the network's outputs (see `LossFn`).
        grad_clip: clip the global gradient norm (0 = off).
    """

    def __init__(self, net: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, grad_clip: float):
        self.net, self.optimizer, self.loss_fn, self.grad_clip = net, optimizer, loss_fn, grad_clip
        self.device = next(net.parameters()).device
        for group in optimizer.param_groups:
            group["capturable"] = True
        for state in optimizer.state.values():  # resumed from a checkpoint of an uncaptured run
            if torch.is_tensor(state.get("step")) and state["step"].device != self.device:
                state["step"] = state["step"].to(self.device, torch.float32)
        self.eager_steps = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
        self._lrs: list[torch.Tensor] = []
        self._loss: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None = None) -> torch.Tensor:
        """One step on (x, y) at the learning rates now in the optimizer's groups; returns the loss (a device
        scalar: reading it is the caller's one synchronisation)."""
        if self.graph is None and self.eager_steps < WARMUP_STEPS:
            self.eager_steps += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self.optimizer.zero_grad(set_to_none=True)
                loss = self._step(x, y, teacher_out)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss
        if self.graph is None:
            self._capture(x, y, teacher_out)
        static_x, static_y, static_teacher = self._inputs
        if x.shape != static_x.shape:
            raise RuntimeError(f"CapturedTrainStep: a batch of shape {tuple(x.shape)} after capturing "
                               f"{tuple(static_x.shape)} (training batches must be whole)")
        static_x.copy_(x)
        static_y.copy_(y)
        if static_teacher is not None:
            static_teacher.copy_(teacher_out)
        for group, lr in zip(self.optimizer.param_groups, self._lrs):
            lr.fill_(group["lr"])
        self.graph.replay()
        return self._loss.clone()

    def _step(self, x: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = self.loss_fn(self.net(x), y, teacher_out)
        loss.backward()
        if self.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.net.parameters(), self.grad_clip)
        self.optimizer.step()
        return loss.detach().float()

    def _capture(self, x: torch.Tensor, y: torch.Tensor, teacher_out: torch.Tensor | None) -> None:
        """Record one step on static copies of the inputs; it runs at the first replay. The groups' learning rates
        are device tensors inside the graph; the groups keep their floats outside it (schedules, checkpoints)."""
        self._inputs = (torch.empty_like(x), torch.empty_like(y),
                        None if teacher_out is None else torch.empty_like(teacher_out))
        for static, value in zip(self._inputs, (x, y, teacher_out)):
            if static is not None:
                static.copy_(value)
        floats = [group["lr"] for group in self.optimizer.param_groups]
        self._lrs = [torch.tensor(float(lr), device=self.device) for lr in floats]
        for group, lr in zip(self.optimizer.param_groups, self._lrs):
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)  # gradients are then the graph's own tensors
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self._loss = self._step(*self._inputs)
        finally:
            for group, lr in zip(self.optimizer.param_groups, floats):
                group["lr"] = lr
