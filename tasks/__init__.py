"""Tasks: data sets, losses, metrics, train and evaluate loops (classification; super-resolution)."""
from typing import NamedTuple

from .base import Task, TaskConfig
from .classification import ClassificationConfig, ClassificationTask
from .data import DataError
from .super_resolution import SuperResolutionConfig, SuperResolutionTask


class TaskKind(NamedTuple):
    """A registered task: its class, built as `task_class(config, seed=...)`, and its config dataclass."""

    task_class: type
    config_class: type


#: task type -> its `TaskKind`
TASKS = {"classification": TaskKind(ClassificationTask, ClassificationConfig),
         "super_resolution": TaskKind(SuperResolutionTask, SuperResolutionConfig)}


def build_task(config: TaskConfig, seed: int) -> Task:
    """The task named by `config.type`."""
    if config.type not in TASKS:
        raise DataError(f"unknown task type {config.type!r}; valid: {', '.join(sorted(TASKS))}")
    return TASKS[config.type].task_class(config, seed=seed)


__all__ = ["ClassificationConfig", "ClassificationTask", "DataError", "SuperResolutionConfig", "SuperResolutionTask",
           "TASKS", "Task", "TaskConfig", "TaskKind", "build_task"]
