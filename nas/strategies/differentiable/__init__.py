"""Differentiable (one-shot) architecture search with a latency term that has a gradient.

`relaxation`: architecture parameters, gates (Gumbel-softmax or ProxylessNAS binary gates) and the expected
latency; one adapter per space family runs its supernet under gates (`mobilenet`, `resnet`, `edsr`); `search`: the
search itself (`DifferentiableSearch`; the run's strategy around it is `nas.strategies.DifferentiableSearchStrategy`).
"""
from . import edsr, mobilenet, resnet  # noqa: F401  (register the families' relaxations)
from .relaxation import (RELAXATIONS, RELAXED_FAMILIES, ArchParameters, CostTerm, ExpectedLatency, RelaxedSupernet,
                         build_relaxed, register_relaxed)
from .search import LOSS_FORMS, DifferentiableConfig, DifferentiableSearch, latency_loss

__all__ = ["RELAXATIONS", "RELAXED_FAMILIES", "ArchParameters", "CostTerm", "ExpectedLatency", "RelaxedSupernet",
           "build_relaxed", "register_relaxed", "LOSS_FORMS", "DifferentiableConfig", "DifferentiableSearch",
           "latency_loss"]
