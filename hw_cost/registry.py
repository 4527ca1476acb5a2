"""Cost models by kind: each implementation registers the loader of its specs ("lut:...", "vpunn:...").

A spec names a cost model as configs and the command line write it, "<kind>:<argument>"; `CostModelSpec.parse`
is the one place such a text is read. `hw_cost/__init__.py` imports the implementations, so every kind is
registered once `hw_cost` is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from .cost_model import CostModel, CostModelError

__all__ = ["COST_MODEL_KINDS", "CostModelKind", "CostModelSpec", "load_cost_model", "register_cost_model"]


class CostModelKind(NamedTuple):
    """A registered kind of cost model: `load(argument, **options) -> CostModel` builds the model of a spec
    `<kind>:<argument>`; `table` says its specs name a latency table measured on some machine (a file, read
    relative to the config that names it), which a run checks against this machine and corrects."""

    load: Callable[..., CostModel]
    table: bool = False


#: kind -> its loader and capabilities
COST_MODEL_KINDS: dict[str, CostModelKind] = {}


def register_cost_model(kind: str, *, table: bool = False) -> Callable[[Callable[..., CostModel]],
                                                                        Callable[..., CostModel]]:
    """Function decorator: registers a loader `loader(argument, **options) -> CostModel` for the specs
    `<kind>:<argument>` (`table`: see `CostModelKind`)."""
    if not kind.isidentifier():
        raise ValueError(f"register_cost_model: {kind!r} is not an identifier")

    def register(loader: Callable[..., CostModel]) -> Callable[..., CostModel]:
        taken = COST_MODEL_KINDS.get(kind)
        if taken is not None and taken.load is not loader:
            raise ValueError(f"register_cost_model: {kind!r} is taken by {taken.load.__qualname__}")
        COST_MODEL_KINDS[kind] = CostModelKind(loader, table)
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

    @property
    def is_table(self) -> bool:
        """Whether it names a latency table measured on some machine (`CostModelKind.table`): its argument is the
        table's file, its latencies are checked against this machine and corrected to it."""
        return COST_MODEL_KINDS[self.kind].table


def load_cost_model(spec: CostModelSpec | str, **options) -> CostModel:
    """Build a cost model from a spec, or its text such as "lut:path/to/table.json" or "vpunn:VPU_2_7".

    Keyword options go to the kind's loader (e.g. `model_dir=`, `dtype=` for VPUNN).
    """
    if isinstance(spec, str):
        spec = CostModelSpec.parse(spec)
    return COST_MODEL_KINDS[spec.kind].load(spec.argument, **options)
