"""The config's `search` section (`SearchConfig`): the strategy that runs, every registered strategy's settings,
and finalisation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..records import Candidate
from ..training.finalize import FinalizeConfig
from .registry import STRATEGIES
from .strategy import SearchStrategy

__all__ = ["SearchConfig"]


@dataclass
class SearchConfig:
    """The `search` section of a run config.

    It names the strategy that runs and holds every registered strategy's settings in a sub-section of its name,
    so that one override (`search.strategy=differentiable`) switches strategy; `search.finalize` is common to all.

    Args:
        strategy: the strategy that runs (a key of `STRATEGIES`).
        strategies: the settings of every registered strategy, by name (in a config file, each is a sub-section
            of its name: `search.evolution.population`); a strategy not given takes its defaults.
        finalize: training of the chosen archs after the search, whatever the strategy (`FinalizeConfig`).
    """

    strategy: str = "evolution"
    strategies: dict[str, Any] = field(default_factory=dict)
    finalize: FinalizeConfig = field(default_factory=FinalizeConfig)

    def __post_init__(self):
        for name, cls in STRATEGIES.items():
            self.strategies.setdefault(name, cls.config_class())

    def sections(self) -> dict[str, Any]:
        """The section as a config file holds it: `strategy`, each strategy's settings, `finalize`."""
        return {"strategy": self.strategy, **self.strategies, "finalize": self.finalize}

    def settings(self, name: Optional[str] = None):
        """The settings of strategy `name` (default: the strategy that runs)."""
        return self.strategies[self.strategy if name is None else name]

    @property
    def strategy_class(self) -> type[SearchStrategy]:
        """The registered class of the strategy that runs."""
        return STRATEGIES[self.strategy]

    def finalize_scope(self) -> tuple[Optional[float], tuple[str, ...]]:
        """The running strategy's `SearchStrategy.finalize_scope` with its settings."""
        return self.strategy_class.finalize_scope(self.settings())

    def finalize_candidates(self, records: list[Candidate]) -> list[Candidate]:
        """The running strategy's `SearchStrategy.finalize_candidates` with its settings."""
        return self.strategy_class.finalize_candidates(self.settings(), records)

    def latency_target_ms(self, space, cost_model) -> Optional[float]:
        """The running strategy's `SearchStrategy.latency_target_ms` with its settings."""
        return self.strategy_class.latency_target_ms(self.settings(), space, cost_model)
