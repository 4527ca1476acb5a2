"""The search strategies: how a run picks the archs it evaluates.

`base.py` holds the registry (`STRATEGIES`, `register_strategy`, `SearchStrategy`, the `search` section's
`SearchConfig`) and the built-in strategies; `evolution.py` (NSGA-II), `random_search.py` (uniform or
latency-binned sampling) and `differentiable/` (a relaxed supernet trained by gradient) are their engines;
`nni_compat.py` adapts NNI's one-shot strategies. The registry's names are re-exported here.
"""
from .base import (STRATEGIES, DifferentiableSearchStrategy, EvolutionSearch, RandomSearch, SearchConfig,
                   SearchOutcome, SearchStrategy, register_strategy, train_supernet)

__all__ = ["STRATEGIES", "SearchStrategy", "register_strategy", "EvolutionSearch", "RandomSearch",
           "DifferentiableSearchStrategy", "SearchConfig", "SearchOutcome", "train_supernet"]
