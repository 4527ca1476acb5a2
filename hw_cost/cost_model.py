"""The cost-model interface every latency source implements (`hw_cost.registry` picks one by name)."""
from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch.nn as nn

from .layers import LayerSpec, extract_layers, module_for_layer

__all__ = ["Block", "CostModel", "CostModelError", "layers_as_blocks"]


class CostModelError(ValueError):
    """A cost model cannot answer: unknown kind, missing file or table entry, unsupported layer."""


@dataclass(frozen=True)
class Block:
    """A unit of a network that a latency table measures as a whole (a stem, an inverted-residual block, a head).

    Args:
        key: stable text key naming everything that determines the block's cost (choice, shapes, stride).
        input_shape: (N, C, H, W) the block runs on.
        build: returns a standalone `nn.Module` of the block (random weights are fine: latency only).
    """

    key: str
    input_shape: tuple[int, int, int, int]
    build: Callable[[], nn.Module] = field(compare=False, repr=False)

    def layers(self, dtype: str = "uint8") -> list[LayerSpec]:
        """The block's layer descriptors (cached per key, input shape and dtype: keys name the whole block)."""
        return list(_block_layers(self, dtype))


@functools.lru_cache(maxsize=8192)
def _block_layers(block: Block, dtype: str) -> tuple[LayerSpec, ...]:
    return tuple(extract_layers(block.build(), block.input_shape, dtype=dtype))


def complexity(blocks: Sequence[Block]) -> tuple[int, int]:
    """(params, MACs) of the deployed network (batch norm folded), from its blocks' layer descriptors."""
    layers = [layer for block in blocks for layer in block.layers()]
    return sum(layer.params for layer in layers), sum(layer.macs for layer in layers)


def layers_as_blocks(layers: Sequence[LayerSpec]) -> list[Block]:
    """One block per layer, keyed by the layer's signature (for networks that are not from a search space)."""
    return [Block(key=layer.signature(), input_shape=layer.in_shape,
                  build=lambda layer=layer: module_for_layer(layer)) for layer in layers]


class CostModel(ABC):
    """Latency of blocks and networks. Implementations: `hw_cost.lut.LutCostModel`, `hw_cost.vpunn.VpunnCostModel`.

    A network is a sequence of `Block`s; its latency is the sum of its blocks (plus whatever the implementation
    documents).
    """

    #: short name recorded with every result, e.g. "vpunn:VPU_2_7" or "lut:default_fmnist.json"
    name: str = "cost model"
    #: inference precision the model assumes ("uint8" or "fp16")
    dtype: str = "uint8"
    #: the latencies measured on a machine that the model looks up (a `hw_cost.lut.LatencyTable`), or None where
    #: it predicts a device (VPUNN predicts the NPU). Only measured latencies can be checked against networks
    #: measured on this machine and corrected to it (`nas.latency.lut_validation`).
    table = None
    #: the correction to this machine applied to every latency (a `hw_cost.lut.LatencyCorrection`), set on a model
    #: with a `table` only; None: the latencies as measured or predicted
    correction = None

    @property
    def is_measured(self) -> bool:
        """Whether it looks up latencies measured on a machine (`table`), which a run checks against this machine
        and corrects; False for a model that predicts a device."""
        return self.table is not None

    @abstractmethod
    def block_latencies_ms(self, blocks: Sequence[Block]) -> np.ndarray:
        """Latency of each block in milliseconds, in the order given."""

    def latency_ms(self, blocks: Sequence[Block]) -> float:
        return float(np.sum(self.block_latencies_ms(blocks)))

    def check_covers(self, blocks: Sequence[Block]) -> None:
        """Raise CostModelError when some of `blocks` cannot be costed (checked before a run trains anything)."""

    def network_cost(self, model: nn.Module, input_shape):
        """A per-layer breakdown of `model`'s latency (with `table()`, `ms`, `fps`: VPUNN's `NetworkCost`); None
        (the default) for a kind that costs whole blocks only, as a latency table does."""
        return None

    def model_latency_ms(self, model: nn.Module, input_shape) -> float:
        """Latency of any torch model, through its layer descriptors."""
        return self.latency_ms(layers_as_blocks(extract_layers(model, input_shape, dtype=self.dtype)))
