"""Cost models by kind: each implementation registers the loader of its specs ("lut:...", "vpunn:...").

A spec names a cost model as configs and the command line write it, "<kind>:<argument>"; `CostModelSpec.parse`
is the one place such a text is read. `hw_cost/__init__.py` imports the implementations, so every kind is
registered once `hw_cost` is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .cost_model import CostModel, CostModelError

__all__ = ["COST_MODEL_KINDS", "CostModelSpec", "load_cost_model", "register_cost_model"]

#: kind -> loader(argument, **options) of the specs "<kind>:<argument>"
COST_MODEL_KINDS: dict[str, Callable[..., CostModel]] = {}


def register_cost_model(kind: str) -> Callable[[Callable[..., CostModel]], Callable[..., CostModel]]:
    """Function decorator: registers a loader `loader(argument, **options) -> CostModel` for the specs
    `<kind>:<argument>`."""
    if not kind.isidentifier():
        raise ValueError(f"register_cost_model: {kind!r} is not an identifier")

    def register(loader: Callable[..., CostModel]) -> Callable[..., CostModel]:
        if COST_MODEL_KINDS.get(kind, loader) is not loader:
            raise ValueError(f"register_cost_model: {kind!r} is taken by {COST_MODEL_KINDS[kind].__qualname__}")
        COST_MODEL_KINDS[kind] = loader
        return loader

    return register


@dataclass(frozen=True)
class CostModelSpec:
    """A cost model by name: its registered `kind` and the `argument` its loader takes, a VPUNN device or model
    file ("vpunn:VPU_2_7") or a latency table's path ("lut:tables/fmnist.json"). `str(spec)` is the text again.

    Args:
        kind: a kind of `COST_MODEL_KINDS` ("lut", "vpunn").
        argument: what follows the colon.
    """

    kind: str
    argument: str

    @classmethod
    def parse(cls, text: str) -> "CostModelSpec":
        """The spec of a text "<kind>:<argument>"; CostModelError (one line, the valid kinds) otherwise."""
        kind, colon, argument = text.partition(":")
        if not colon or kind not in COST_MODEL_KINDS or not argument:
            raise CostModelError(f"unknown cost model {text!r}; expected one of: "
                                 + ", ".join(f"{k}:..." for k in COST_MODEL_KINDS)
                                 + " (e.g. vpunn:VPU_2_7, lut:table.json)")
        return cls(kind, argument)

    def __str__(self) -> str:
        return f"{self.kind}:{self.argument}"


def load_cost_model(spec: CostModelSpec | str, **options) -> CostModel:
    """Build a cost model from a spec, or its text such as "lut:path/to/table.json" or "vpunn:VPU_2_7".

    Keyword options go to the kind's loader (e.g. `model_dir=`, `dtype=` for VPUNN).
    """
    if isinstance(spec, str):
        spec = CostModelSpec.parse(spec)
    return COST_MODEL_KINDS[spec.kind](spec.argument, **options)
