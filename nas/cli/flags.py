"""The library speaks of its parameters, the command line of its flags: errors of library calls that name their
parameters (`nas.errors.NamesParameters`) are shown under the flags of the command that made the call."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..errors import NamesParameters

__all__ = ["as_flags"]


@contextmanager
def as_flags(**flags: str) -> Iterator[None]:
    """Inside, an error that names a parameter of `flags` (parameter=flag) names the flag instead."""
    try:
        yield
    except NamesParameters as error:
        raise type(error)(error.named(flags)) from None
