"""The baselines marked beside the front: reference models scored with the run's data, metric and cost model.

`scoring.py` checks, trains and scores a run's baselines (every `type`) and writes baselines.csv; `cache.py` keeps
trained networks' weights and scores across runs; `workers.py` trains cached baselines in processes beside the
search; `reference_networks.py` (torchvision networks) and `zoo.py` (timm / torchvision / SR models by name) build
the networks, adapted to the task's input. `scoring.py`'s public names are re-exported here.
"""
from .scoring import (BASELINE_TYPES, CACHED_TYPES, TRAINED_TYPES, CachedNetwork, CacheEntry, cached_baseline_path,
                      check_baselines, evaluate_baselines, matched_epochs, resolve_arch, train_cached_baseline,
                      train_cached_network)

__all__ = ["evaluate_baselines", "check_baselines", "BASELINE_TYPES", "TRAINED_TYPES", "CACHED_TYPES",
           "resolve_arch", "matched_epochs", "train_cached_baseline", "train_cached_network",
           "cached_baseline_path", "CachedNetwork", "CacheEntry"]
