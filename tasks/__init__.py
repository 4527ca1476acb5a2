"""Tasks: data sets, losses, metrics, train and evaluate loops (classification; super-resolution)."""
from .base import Task, TaskConfig
from .classification import ClassificationConfig, ClassificationTask
from .data import DataError
from .super_resolution import SuperResolutionConfig, SuperResolutionTask

#: task type -> (config dataclass, task class); a task is built as `cls(config, seed=...)`
TASKS = {"classification": (ClassificationConfig, ClassificationTask),
         "super_resolution": (SuperResolutionConfig, SuperResolutionTask)}


def build_task(config: TaskConfig, seed: int) -> Task:
    """The task named by `config.type`."""
    if config.type not in TASKS:
        raise DataError(f"unknown task type {config.type!r}; valid: {', '.join(sorted(TASKS))}")
    return TASKS[config.type][1](config, seed=seed)


__all__ = ["ClassificationConfig", "ClassificationTask", "DataError", "SuperResolutionConfig", "SuperResolutionTask",
           "TASKS", "Task", "TaskConfig", "build_task"]
