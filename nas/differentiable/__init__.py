"""Differentiable (one-shot) architecture search with a latency term that has a gradient.

`relaxation`: architecture parameters, gates (Gumbel-softmax or ProxylessNAS binary gates) and the expected
latency; one adapter per space family runs its supernet under gates (`mobilenet`, ...); `search`: the strategy.
"""
from . import mobilenet  # noqa: F401  (registers the family's relaxation)
from .relaxation import (RELAXATIONS, RELAXED_FAMILIES, ArchParameters, CostTerm, ExpectedLatency, RelaxedSupernet,
                         build_relaxed, register_relaxed)
from .search import LOSS_FORMS, DifferentiableConfig, DifferentiableSearch, latency_loss, run_differentiable

__all__ = ["RELAXATIONS", "RELAXED_FAMILIES", "ArchParameters", "CostTerm", "ExpectedLatency", "RelaxedSupernet",
           "build_relaxed", "register_relaxed", "LOSS_FORMS", "DifferentiableConfig", "DifferentiableSearch",
           "latency_loss", "run_differentiable"]
