"""The search strategies: how a run picks the archs it evaluates.

`strategy.py` is the interface (`SearchStrategy`, `SearchOutcome`), `registry.py` the registry (`STRATEGIES`,
`register_strategy`), `search_config.py` the config's `search` section (`SearchConfig`). Each strategy lives in a
module of its own and registers itself there: `evolution` (NSGA-II, `evolution.py`) and `random` (uniform or
latency-binned sampling, `random_search.py`) over a supernet trained by the sandwich rule (`sandwich.py`),
`differentiable` (a relaxed supernet trained by gradient, `differentiable/`). This package imports them so that
they register; a new strategy is a new module imported here. `nni_compat.py` adapts NNI's one-shot strategies.
"""
# each registers its strategy; the order of registration is the order of their sections in a run's config.yaml
from . import evolution  # noqa: F401
from . import random_search  # noqa: F401
from . import differentiable  # noqa: F401
from .registry import STRATEGIES, register_strategy
from .search_config import SearchConfig
from .strategy import SearchOutcome, SearchStrategy

__all__ = ["STRATEGIES", "SearchStrategy", "SearchOutcome", "register_strategy", "SearchConfig"]
