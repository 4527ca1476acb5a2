"""Errors that mean bad input, not a bug: the CLI reports each in one line with exit status 2.

A leaf module (it imports nothing of the project), so every part of `nas` can raise them without import cycles.
"""
from __future__ import annotations

__all__ = ["ConfigError", "QuantizationError", "RunDirError", "TrainingDiverged"]


class ConfigError(ValueError):
    """A config file or override is malformed (the message names the key or path)."""


class RunDirError(ValueError):
    """A run directory's file is damaged or belongs to another run (the message names the file)."""


class TrainingDiverged(ArithmeticError):
    """A training loss became NaN or infinite; raised before that step's update, so the last checkpoint is the
    last good state (the message names the stage and step)."""


class QuantizationError(ArithmeticError):
    """An INT8 model lost more of its task metric than allowed (the message gives both metrics and the bound)."""
