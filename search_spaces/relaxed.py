"""A family's supernet under gates: the interface a family implements for differentiable search.

Differentiable search (`nas.strategies.differentiable`) gives every searched `Choice` of a space a vector of
probabilities and draws from it one *gate* vector per choice for each forward pass. A family that can be searched
so has a `RelaxedSupernet` subclass beside its supernet, named by its space's `relaxed_class`: it runs the supernet
with every choice mixed by its gate (one-hot gates reproduce the supernet running that arch), and splits the
space's latency into cost terms over few choices each (`CostTerm`), from which the search computes the expected
latency exactly. A family without one (`relaxed_class` None) is not searched by gradient.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from hw_cost import Block

from .base import SearchSpace, Supernet

__all__ = ["CostTerm", "RelaxedSupernet", "prefix_masks", "centred_kernel_masks"]


@dataclass(frozen=True)
class CostTerm:
    """A part of a network's latency that depends on the values of a few choices.

    Args:
        labels: the choices the part depends on (none for fixed parts such as a stem).
        blocks: values of `labels` (label -> value) -> the cost blocks the part then has (empty when skipped).
    """

    labels: tuple[str, ...]
    blocks: Callable[[dict], list[Block]]


class RelaxedSupernet(nn.Module, ABC):
    """A family's supernet run under gates (one vector per choice) instead of one discrete arch.

    A family's subclass (its space's `relaxed_class`) reads the family's config and reuses the supernet's own
    modules and weights (never copies), so the weights trained under gates are the supernet's:
    `supernet.extract(arch)` exports them as usual.

    Args:
        space: the search space.
        supernet: its supernet (shared, not copied).
    """

    def __init__(self, space: SearchSpace, supernet: Supernet):
        super().__init__()
        self.space, self.supernet = space, supernet

    def stage_depths(self) -> list[list[int]]:
        """Per stage, the searched depths (the values of the `s{stage}.depth` choices)."""
        values = {c.label: list(c.values) for c in self.space.choices}
        return [values[f"s{s}.depth"] for s in range(len(self.supernet.stages))]

    def depth_mixed(self, s: int, x: torch.Tensor, gates: dict[str, torch.Tensor],
                    block: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The output of stage `s` of a family with stages (FBNetV2's depth search): its blocks run in turn on `x`
        (`block(b, h)` the output of block b on h), and the outputs after each of the stage's searched depths
        (`self.depths[s]`, see `stage_depths`) are summed, weighted by that depth's gate."""
        depths, depth_gate, mixed = self.depths[s], gates[f"s{s}.depth"], 0
        for b in range(len(self.supernet.stages[s])):
            x = block(b, x)
            if b + 1 in depths:
                mixed = mixed + depth_gate[depths.index(b + 1)] * x
        return mixed

    @abstractmethod
    def forward(self, x: torch.Tensor, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        """The output of the gate-weighted network; one-hot gates reproduce the supernet running that arch."""

    @abstractmethod
    def cost_terms(self) -> list[CostTerm]:
        """The space's latency split into terms over few choices each (see `CostTerm`)."""

    def block_term(self, position: int, labels: tuple[str, ...], depth: Optional[tuple[str, int]] = None) -> CostTerm:
        """The term of the block at `position` of the largest arch's blocks, as a function of `labels`.

        The block is taken from `space.blocks` of the largest arch with `labels` set to the term's values (so the
        block keys are the family's own). With `depth = (label, index)` the block runs only when that depth
        choice exceeds `index` (it costs nothing otherwise).
        """
        space = self.space
        template = space.assignment_from_arch(space.largest())

        def blocks(values: dict) -> list[Block]:
            if depth is not None and values[depth[0]] <= depth[1]:
                return []
            chosen = {k: v for k, v in values.items() if depth is None or k != depth[0]}
            return [space.blocks(space.arch_from_assignment({**template, **chosen}))[position]]

        return CostTerm(tuple(labels) + ((depth[0],) if depth is not None else ()), blocks)

    def stage_block_terms(self, first: int, labels: Callable[[int, int], tuple[str, ...]]) -> list[CostTerm]:
        """The terms of the stages' blocks of a family with stages, at consecutive positions of the largest arch's
        blocks from `first` on: block b of stage s as a function of `labels(s, b)`, run while the stage's depth
        (`s{s}.depth`) exceeds b (`block_term`)."""
        terms, position = [], first
        for s, blocks in enumerate(self.supernet.stages):
            for b in range(len(blocks)):
                terms.append(self.block_term(position, labels(s, b), depth=(f"s{s}.depth", b)))
                position += 1
        return terms


def prefix_masks(widths, size: int) -> torch.Tensor:
    """(len(widths), size): row i keeps the first widths[i] of `size` channels (channel slicing as a mask)."""
    channels = torch.arange(size)
    return torch.stack([(channels < w).float() for w in widths])


def centred_kernel_masks(kernels) -> torch.Tensor:
    """(len(kernels), kmax, kmax): row i keeps the centred kernels[i] x kernels[i] window (centre-cropped kernels)."""
    kmax = max(kernels)
    return torch.stack([F.pad(torch.ones(k, k), [(kmax - k) // 2] * 4) for k in kernels])
