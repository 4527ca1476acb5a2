"""Cost models by kind: each implementation registers the loader of its specs ("lut:...", "vpunn:...").

`hw_cost/__init__.py` imports the implementations, so every kind is registered once `hw_cost` is imported.
"""
from __future__ import annotations

from typing import Callable

from .cost_model import CostModel, CostModelError

__all__ = ["COST_MODEL_KINDS", "load_cost_model", "register_cost_model"]

#: kind -> loader(arg, **options) of the specs "<kind>:<arg>"
COST_MODEL_KINDS: dict[str, Callable[..., CostModel]] = {}


def register_cost_model(kind: str) -> Callable[[Callable[..., CostModel]], Callable[..., CostModel]]:
    """Function decorator: registers a loader `loader(arg, **options) -> CostModel` for the specs `<kind>:<arg>`."""
    if not kind.isidentifier():
        raise ValueError(f"register_cost_model: {kind!r} is not an identifier")

    def register(loader: Callable[..., CostModel]) -> Callable[..., CostModel]:
        if COST_MODEL_KINDS.get(kind, loader) is not loader:
            raise ValueError(f"register_cost_model: {kind!r} is taken by {COST_MODEL_KINDS[kind].__qualname__}")
        COST_MODEL_KINDS[kind] = loader
        return loader

    return register


def load_cost_model(spec: str, **options) -> CostModel:
    """Build a cost model from a spec such as "lut:path/to/table.json" or "vpunn:VPU_2_7".

    Keyword options go to the kind's loader (e.g. `model_dir=`, `dtype=` for VPUNN).
    """
    kind, sep, arg = spec.partition(":")
    if not sep or kind not in COST_MODEL_KINDS or not arg:
        raise CostModelError(f"unknown cost model {spec!r}; expected one of: "
                             + ", ".join(f"{k}:..." for k in COST_MODEL_KINDS)
                             + " (e.g. vpunn:VPU_2_7, lut:table.json)")
    return COST_MODEL_KINDS[kind](arg, **options)
