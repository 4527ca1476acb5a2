"""Any vpunas search space as an NNI 3.0 model space, so NNI's strategies can drive it.

Every `Choice` of the space becomes an `nni.choice` with the same label and values. NNI builds a trial's model
by re-running the constructor inside a frozen context (`nni.nas.space.model_context`); then the module holds the
standalone subnet of the sampled arch, extracted from the shared supernet (inherited weights), and `arch`.
"""
from __future__ import annotations

import nni
import torch
from nni.mutable import frozen_context
from nni.nas.nn.pytorch import ModelSpace
from nni.nas.space import model_context

from .base import SearchSpace, Supernet

__all__ = ["NniModelSpace"]


class NniModelSpace(ModelSpace):
    """An NNI model space over `space`; frozen samples are subnets of `supernet` (a new one when None).

    Args:
        space: the vpunas search space.
        supernet: the weight-sharing supernet trials inherit weights from.
    """

    def __init__(self, space: SearchSpace, supernet: Supernet | None = None):
        super().__init__()
        supernet = supernet if supernet is not None else space.build_supernet()
        # plain attributes, not submodules: a frozen trial owns only its extracted subnet
        object.__setattr__(self, "vpunas_space", space)
        object.__setattr__(self, "supernet", supernet)
        sample = frozen_context.current() or {}
        labels = [choice.label for choice in space.choices]
        if all(label in sample for label in labels):
            self.arch = space.arch_from_assignment({label: sample[label] for label in labels})
            self.network = supernet.extract(self.arch)
        else:
            self.arch = None
            for choice in space.choices:
                self.add_mutable(nni.choice(choice.label, list(choice.values)))
            self.network = supernet

    def freeze(self, sample: dict) -> "NniModelSpace":
        with model_context(sample):
            return NniModelSpace(self.vpunas_space, self.supernet)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)
