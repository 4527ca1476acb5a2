"""What every search space provides, and the registry that builds one from a config.

A space is a list of labelled choices (`Choice`), each an ordered tuple of values from the cheapest to the
most expensive option. An architecture is a plain JSON-able dict; the space converts between that dict and an
assignment label -> value, and everything generic (sampling, mutation, integer encoding for evolutionary
strategies, largest / smallest arch) is built on that conversion here, once for all families.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Protocol

import numpy as np
import torch.nn as nn

from hw_cost import Block

__all__ = ["Choice", "SearchSpace", "Supernet", "ArchError", "register_space", "build_space", "space_config_class",
           "space_family", "SPACES", "SpaceConfig", "SpaceFamily", "arch_key", "ArchBox", "ArchStage", "numbers_text"]


class ArchError(ValueError):
    """An architecture does not belong to its space (the message names the field)."""


@dataclass(frozen=True)
class Choice:
    """One searched decision. `values` are ordered from the cheapest to the most expensive option."""

    label: str
    values: tuple

    def index(self, value) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise ArchError(f"{self.label}: {value!r} is not one of {list(self.values)}") from None


def arch_key(arch: dict) -> str:
    """Canonical text of an architecture: equal archs give equal keys."""
    return json.dumps(arch, sort_keys=True, separators=(",", ":"))


class Supernet(nn.Module, ABC):
    """A weight-sharing network: runs any arch of its space, and exports any arch as a standalone module."""

    @abstractmethod
    def set_active(self, arch: dict) -> None:
        """Make `forward` run `arch` (the one place the active arch is set)."""

    @abstractmethod
    def extract(self, arch: dict) -> nn.Module:
        """A standalone module of `arch` with weights copied from the supernet (same outputs as the supernet)."""


@dataclass
class ArchBox:
    """One block of an arch's picture (`SearchSpace.arch_stages`): `height` relative to the tallest (0-1], `kernel`
    its width and colour; `ghost`: a block the arch leaves out that a deeper arch of the space runs."""

    label: str
    height: float
    kernel: int = 3
    ghost: bool = False


#: a stage of an arch's picture: its caption and its blocks, left to right
ArchStage = tuple[str, list[ArchBox]]


def numbers_text(values) -> str:
    """Numbers for an arch's summary: "3,5,7"."""
    return ",".join(f"{v:g}" for v in values)


class SearchSpace(ABC):
    """A family of architectures for one input shape and output size.

    Args:
        input_shape: (C, H, W) of one input image.
        num_outputs: classes (classification) or output channels (super-resolution).
    """

    family: str = ""
    #: the family's supernet under gates, for differentiable search: a `search_spaces.relaxed.RelaxedSupernet`
    #: subclass built from (space, supernet); None: the family has none
    relaxed_class: Optional[type] = None

    def __init__(self, input_shape: tuple[int, int, int], num_outputs: int):
        self.input_shape, self.num_outputs = tuple(input_shape), num_outputs
        self._choices: list[Choice] | None = None

    # ------------------------------------------------------------------ what each family implements
    @abstractmethod
    def _build_choices(self) -> list[Choice]:
        """The searched decisions, in a fixed order."""

    @abstractmethod
    def arch_from_assignment(self, values: dict[str, Any]) -> dict:
        """The canonical arch dict of a complete assignment label -> value."""

    @abstractmethod
    def assignment_from_arch(self, arch: dict) -> dict[str, Any]:
        """A complete assignment for `arch` (choices the arch does not use get their first value).

        Raises ArchError naming the field when the arch is malformed or outside the space.
        """

    @abstractmethod
    def build_supernet(self) -> Supernet:
        """A new supernet with freshly initialised weights."""

    @abstractmethod
    def blocks(self, arch: dict) -> list[Block]:
        """The cost blocks of `arch` in execution order (stem, searched blocks, head): LUT keys and builders."""

    @abstractmethod
    def all_blocks(self) -> list[Block]:
        """Every distinct block any arch of the space can contain: what a latency table must measure."""

    # ------------------------------------------------------------------ generic, built on the above
    @property
    def choices(self) -> list[Choice]:
        if self._choices is None:
            self._choices = self._build_choices()
        return self._choices

    def validate(self, arch: Any) -> dict:
        """The canonical form of `arch`; raises ArchError naming the bad field."""
        if not isinstance(arch, dict):
            raise ArchError(f"an architecture is a dict, got {type(arch).__name__}")
        assignment = self.assignment_from_arch(arch)
        for choice in self.choices:
            choice.index(assignment[choice.label])
        return self.arch_from_assignment(assignment)

    def encode(self, arch: dict) -> np.ndarray:
        """Integer genes: the index of each choice's value."""
        assignment = self.assignment_from_arch(arch)
        return np.array([c.index(assignment[c.label]) for c in self.choices], dtype=np.int64)

    def decode(self, genes) -> dict:
        genes = np.asarray(genes, dtype=np.int64)
        if genes.shape != (len(self.choices),):
            raise ArchError(f"expected {len(self.choices)} genes, got shape {genes.shape}")
        return self.arch_from_assignment({c.label: c.values[int(np.clip(g, 0, len(c.values) - 1))]
                                          for c, g in zip(self.choices, genes)})

    def gene_upper_bounds(self) -> np.ndarray:
        return np.array([len(c.values) - 1 for c in self.choices], dtype=np.int64)

    def fresh_network(self, arch: dict) -> nn.Module:
        """A standalone network of `arch` with fresh weights: what a from-scratch baseline and a `scratch`
        finalisation train. By default the arch extracted from a new supernet; a family whose supernet
        initialisation depends on the largest weights' sizes overrides it, so that a network starts as one of
        its own size would."""
        return self.build_supernet().extract(self.validate(arch))

    def reference_network(self, arch: dict) -> tuple[nn.Module, list[Block]] | None:
        """A freshly initialised network of the family whose sizes lie outside the searched ranges (a reference
        baseline such as the EDSR-baseline), with its cost blocks; ArchError when `arch` is malformed. None (the
        default): the family builds only archs of its space."""
        return None

    def sample(self, rng: np.random.Generator) -> dict:
        return self.decode([rng.integers(len(c.values)) for c in self.choices])

    def largest(self) -> dict:
        return self.decode(self.gene_upper_bounds())

    def smallest(self) -> dict:
        return self.decode(np.zeros(len(self.choices), dtype=np.int64))

    def spread_sample(self, n: int, rng: np.random.Generator) -> list[dict]:
        """`n` distinct archs (fewer if the space is smaller): the largest, the smallest, then random ones."""
        archs = {arch_key(a): a for a in (self.largest(), self.smallest())}
        for _ in range(1000 * n):
            if len(archs) >= n:
                break
            arch = self.sample(rng)
            archs.setdefault(arch_key(arch), arch)
        return list(archs.values())[:n]

    def mutate(self, arch: dict, rng: np.random.Generator, prob: float) -> dict:
        """Each choice, with probability `prob`, moves to a different value drawn uniformly."""
        genes = self.encode(arch)
        for i, choice in enumerate(self.choices):
            if len(choice.values) > 1 and rng.random() < prob:
                new = rng.integers(len(choice.values) - 1)
                genes[i] = new + (new >= genes[i])
        return self.decode(genes)

    def describe(self) -> str:
        size = float(np.prod([len(c.values) for c in self.choices], dtype=np.float64))
        return f"{self.family} space: {len(self.choices)} choices, up to {size:.3g} assignments"

    # ------------------------------------------------------------------ an arch shown (a report; no space built)
    @classmethod
    def arch_summary(cls, arch: dict) -> str:
        """One line of an arch of the family (a report's hover): per stage the choices of each active block. By
        default its JSON."""
        return arch_key(arch)

    @classmethod
    def arch_stages(cls, arch: dict, config) -> list[ArchStage] | None:
        """An arch of the family as a picture's stages, left to right (`nas.reporting.arch_picture` draws them),
        shaped by the family's `config` (fixed widths, the blocks a deeper arch runs); None: no picture."""
        return None


# ---------------------------------------------------------------------------------------------------- registry
class SpaceConfig(Protocol):
    """A family's config section: a dataclass registered with the family (`register_space`)."""

    #: the family's name in `SPACES`
    type: str


class SpaceFamily(NamedTuple):
    """A registered family: its space class, built as `space_class(config, input_shape=..., num_outputs=...)`, and
    its config dataclass."""

    space_class: type[SearchSpace]
    config_class: type


#: family name -> its `SpaceFamily`
SPACES: dict[str, SpaceFamily] = {}


def register_space(name: str, config_class: type) -> Callable[[type[SearchSpace]], type[SearchSpace]]:
    """Class decorator: register a space family under `name` with its config dataclass."""

    def wrap(cls: type[SearchSpace]) -> type[SearchSpace]:
        if name in SPACES:
            raise ValueError(f"search space {name!r} is registered twice")
        cls.family = name
        SPACES[name] = SpaceFamily(cls, config_class)
        return cls

    return wrap


def space_family(name: str) -> SpaceFamily:
    """The family registered as `name`; ArchError (one line, the valid names) otherwise."""
    if name not in SPACES:
        raise ArchError(f"unknown search space {name!r}; valid: {', '.join(sorted(SPACES))}")
    return SPACES[name]


def space_config_class(name: str) -> type:
    return space_family(name).config_class


def build_space(config: SpaceConfig, input_shape: tuple[int, int, int], num_outputs: int) -> SearchSpace:
    """The space named by `config.type`, built from its config dataclass."""
    return space_family(config.type).space_class(config, input_shape=input_shape, num_outputs=num_outputs)
