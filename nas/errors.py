"""Errors that mean bad input, not a bug: the CLI reports each in one line with exit status 2.

A leaf module (it imports nothing of the project), so every part of `nas` can raise them without import cycles.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

__all__ = ["ConfigError", "NamesParameters", "ParameterError", "QuantizationError", "RunDirError",
           "TrainingDiverged", "check_bounds", "name_parameters"]


class NamesParameters(Exception):
    """An error whose message names the parameters of the library call it is about in backticks
    (`` `max_drop` ``), as the library knows them; a front end shows them under its own names (`name_parameters`:
    the CLI maps them to its flags, `nas.cli.flags`)."""


def name_parameters(message: str, names: Mapping[str, str]) -> str:
    """`message` with each `` `parameter` `` that `names` maps written as its name there."""
    return re.sub(r"`(\w+)`", lambda m: names.get(m.group(1), m.group(0)), message)


class ConfigError(ValueError):
    """A config file or override is malformed (the message names the key or path)."""


class ParameterError(NamesParameters, ConfigError):
    """An argument of a library call is invalid (the message names the parameter, see `NamesParameters`)."""


class RunDirError(ValueError):
    """A run directory's file is damaged or belongs to another run (the message names the file)."""


class TrainingDiverged(ArithmeticError):
    """A training loss became NaN or infinite; raised before that step's update, so the last checkpoint is the
    last good state (the message names the stage and step)."""


class QuantizationError(NamesParameters, ArithmeticError):
    """An INT8 model lost more of its task metric than allowed (the message gives both metrics and the bound, and
    names the parameter that sets the bound)."""


def check_bounds(settings: object, *, non_negative: Iterable[str] = (), positive: Iterable[str] = (),
                 at_least: Mapping[str, float] | None = None) -> None:
    """Raise ValueError `<field>: must be >= 0` for the first field of the dataclass `settings` named in
    `non_negative` that is below 0, `<field>: must be > 0` for the first in `positive` at or below 0, and
    `<field>: must be >= <bound>` for the first of `at_least` (field -> bound) below its bound; NaN fails them all."""
    bounds = [(name, 0, ">=") for name in non_negative] + [(name, 0, ">") for name in positive]
    bounds += [(name, bound, ">=") for name, bound in (at_least or {}).items()]
    for name, bound, relation in bounds:
        value = getattr(settings, name)
        if not (value >= bound if relation == ">=" else value > bound):
            raise ValueError(f"{name}: must be {relation} {bound:g}")
