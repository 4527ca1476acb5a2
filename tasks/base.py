"""What the rest of the project asks of a task and of its config section: the `Task` and `TaskConfig` protocols.

Training, evaluation, finalisation, the baselines, export and quantization use a task only through these; a new
task implements them (`tests/test_tasks.py` checks each registered one) and registers in `tasks.TASKS`.
"""
from __future__ import annotations

from typing import Iterator, Protocol, Sized, runtime_checkable

import torch
import torch.nn as nn

from .data import EpochBatches

__all__ = ["Task", "TaskConfig"]


@runtime_checkable
class TaskConfig(Protocol):
    """A task's config section: a dataclass registered with its task (`tasks.TASKS`)."""

    #: the task's name in `tasks.TASKS`
    type: str
    #: where its data lies ("" where it needs none); relative roots are resolved against the config file's folder
    root: str
    #: training images (or patches) per step
    batch_size: int


@runtime_checkable
class Task(Protocol):
    """A data set with its loss and metric, built from its config and the run's seed (`tasks.build_task`)."""

    config: TaskConfig
    #: the search's metric (higher is better), e.g. "top1", "psnr": candidates.csv's column
    metric: str
    #: (C, H, W) of a network's input: what latency is costed at
    input_shape: tuple[int, ...]
    #: a network's output channels (classes; image channels)
    num_outputs: int
    #: the classes a classification task tells apart; 0 for a task whose outputs are no classes
    num_classes: int
    #: how many times larger than its input a network's output image is; None for a task whose output is no image
    scale: int | None
    #: the held-out split that is only reported (empty: the reports fall back to `val`)
    test: Sized
    #: the training batches of each epoch, drawn from the run's seed
    train_batches: EpochBatches

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The training loss of a batch."""

    def distill_loss(self, output: torch.Tensor, teacher_output: torch.Tensor) -> torch.Tensor:
        """In-place distillation's loss against the largest subnet's output."""

    def calibration_batches(self) -> Iterator[torch.Tensor]:
        """Inputs that recalibrate a subnet's batch norm (none for networks without it)."""

    def ptq_samples(self, count: int) -> list[torch.Tensor]:
        """`count` single-image inputs that calibrate post-training quantization."""

    def preprocessing(self) -> dict:
        """How a deployed model's input must be prepared (recorded next to exported models)."""

    def evaluate(self, model: nn.Module, split: str = "val", all_images: bool = False) -> float:
        """The metric of `model` on `split` ('val' or 'test'); `all_images`: the whole val split, not the part the
        search scores candidates on."""

    def scores(self, model: nn.Module, split: str = "val") -> dict[str, float]:
        """Every figure the task reports for `model` on `split`, the metric first (super-resolution adds SSIM)."""

    def untrained_level(self) -> float:
        """The val metric at or below which a trained network has learned nothing."""
