"""The interface of a search strategy: a class that turns a `SearchContext` into evaluated architectures.

A strategy is a `SearchStrategy` subclass registered under its `name` (`nas.strategies.registry`). Its
`config_class` is the settings dataclass of the `search.<name>` sub-section (`nas.strategies.search_config.SearchConfig`).

`nas.run.run_search` creates the strategy of the config, loads the state it recorded in
RUN_DIR/checkpoint/strategy.json into it on resume (`state_dict` / `load_state_dict`; a strategy that checkpoints
itself sets `persists_state = False`), and writes candidates.csv and that state after each generation
(the `on_generation` callback).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

from ..records import Candidate
from ..search_context import SearchContext
from ..training.evaluation import ArchEvaluator, CachedEvaluator

__all__ = ["SearchStrategy", "SearchOutcome"]


@dataclass
class SearchOutcome:
    """`evaluate.records`: every evaluated arch (`Candidate`) in id order; `evaluator`: scores further archs (test,
    baselines)."""

    evaluate: CachedEvaluator
    evaluator: ArchEvaluator


class SearchStrategy(ABC):
    """A search strategy of a run.

    Class attributes: `name` (its key in `STRATEGIES` and the `search.<name>` sub-section of its settings),
    `config_class` (the dataclass of those settings), `persists_state` (whether `run_search` keeps `state_dict()`
    in RUN_DIR/checkpoint/strategy.json, as JSON; False for a strategy that checkpoints itself).

    Args:
        ctx: the run's `SearchContext`.
        on_generation: `on_generation(records)` after each generation (search epoch), with every record so far
            (the run writes candidates.csv and the strategy's state there); None: nothing.
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    persists_state: ClassVar[bool] = True
    #: torchrun may run it in several processes (its supernet training and scoring are data-parallel)
    scales_out: ClassVar[bool] = False
    #: its supernet training follows the sandwich rule (`train.sandwich_*`, `train.distill`)
    uses_sandwich: ClassVar[bool] = False

    @classmethod
    def finalize_scope(cls, settings) -> tuple[Optional[float], tuple[str, ...]]:
        """(latency limit in ms or None, the costs its front spreads over) of a search with these settings: where
        finalisation chooses its archs."""
        return None, ("latency_ms",)

    @classmethod
    def finalize_candidates(cls, settings, records: list[Candidate]) -> list[Candidate]:
        """The records of a search with these settings that finalisation may choose from (default: all)."""
        return records

    @classmethod
    def latency_target_ms(cls, settings, space, cost_model) -> Optional[float]:
        """The latency a search with these settings aims its archs at, in ms on `cost_model` (None: no target;
        the run measures each finalised arch against a target and logs how far off it is)."""
        return None

    def __init__(self, ctx: SearchContext, on_generation: Optional[Callable[[list[Candidate]], None]] = None):
        self.ctx, self.on_generation = ctx, on_generation

    @property
    def settings(self):
        """This strategy's settings: the config's `search.<name>` sub-section, a `config_class` instance."""
        return self.ctx.config.search.settings(self.name)

    @abstractmethod
    def run(self) -> SearchOutcome:
        """Run (or, on resume, finish) the search."""

    def state_dict(self) -> dict:
        """The state a resumed run needs beyond the run directory's journals and checkpoints (none by default)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take the state `state_dict()` gave in an earlier session of the run, before `run()`."""

    def _generation_done(self, records: list[Candidate]) -> None:
        if self.on_generation is not None:
            self.on_generation(records)
