"""The baselines marked beside the front: reference models scored with the run's data, metric and cost model.

`scoring.py` checks and scores a run's baselines (every `type`, one typed entry each: `nas.baseline_entries`) and
writes baselines.csv; `trainer.py` trains a network from scratch with the run's recipe; `cached_networks.py` makes the
cached types' networks (`reference`, `zoo`) and trains what the cache lacks; `cache.py` keeps trained networks' weights
and scores across runs; `workers.py` trains cached baselines in processes beside the search;
`reference_networks.py` (torchvision networks) and `zoo.py` (timm / torchvision / SR models by name) build the
networks, adapted to the task's input. The public names of `scoring.py`, `trainer.py` and `cached_networks.py` are
re-exported here.
"""
from .cached_networks import (CACHED_TYPES, CachedNetwork, CacheEntry, cached_baseline_path, train_cached_baseline,
                              train_cached_network)
from .scoring import BASELINE_TYPES, TRAINED_TYPES, check_baselines, evaluate_baselines, resolve_arch
from .trainer import matched_epochs

__all__ = ["evaluate_baselines", "check_baselines", "BASELINE_TYPES", "TRAINED_TYPES", "CACHED_TYPES",
           "resolve_arch", "matched_epochs", "train_cached_baseline", "train_cached_network",
           "cached_baseline_path", "CachedNetwork", "CacheEntry"]
