"""Tasks: data sets, losses, metrics, train and evaluate loops (classification; super-resolution)."""
from .classification import ClassificationConfig, ClassificationTask
from .data import DataError

__all__ = ["ClassificationConfig", "ClassificationTask", "DataError"]
