"""Differentiable (one-shot) architecture search with a latency term that has a gradient.

`relaxation`: architecture parameters, gates (Gumbel-softmax or ProxylessNAS binary gates) and the expected
latency, over the supernet under gates that a space family provides (`search_spaces.relaxed`; its space's
`relaxed_class`); `search`: the search itself (`DifferentiableTrainer`); `strategy`: the run's strategy around it
(`DifferentiableStrategy`, registered as `differentiable`).
"""
from .relaxation import RELAXATIONS, ArchParameters, ExpectedLatency, build_relaxed, relaxed_families
from .search import LOSS_FORMS, DifferentiableConfig, DifferentiableTrainer, latency_loss
from .strategy import DifferentiableStrategy

__all__ = ["RELAXATIONS", "ArchParameters", "ExpectedLatency", "build_relaxed", "relaxed_families", "LOSS_FORMS",
           "DifferentiableConfig", "DifferentiableTrainer", "latency_loss", "DifferentiableStrategy"]
