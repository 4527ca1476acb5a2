"""The library speaks of its parameters, the command line of its flags: errors of library calls that name their
parameters in backticks (`nas.errors.NamesParameters`; another package's errors written alike) are shown under the
flags of the command that made the call."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..errors import NamesParameters, name_parameters

__all__ = ["as_flags"]


@contextmanager
def as_flags(*, also: tuple[type[Exception], ...] = (), **flags: str) -> Iterator[None]:
    """Inside, an error that names a parameter of `flags` (parameter=flag) names the flag instead: a
    `NamesParameters` error, and one of the types `also` (errors of `hw_cost`, which knows nothing of `nas`)."""
    try:
        yield
    except (NamesParameters, *also) as error:
        raise type(error)(name_parameters(str(error), flags)) from None
