"""What the strategies that search a supernet trained by the sandwich rule share (`evolution`, `random`): the
supernet's training (`train_supernet`), the journaled scoring of archs on its weights, the base class of their
strategies (`SandwichStrategy`) and of their settings (`FrontSettings`: a latency limit and the costs their front
spreads over, validated here for all of them).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..records import COSTS
from ..rundir import RunDir, atomic_copy
from ..search_context import SearchContext
from ..training.evaluation import ArchEvaluator, CachedEvaluator, journaled_candidates
from ..training.sandwich_archs import SandwichArchs, SpaceSandwich, WindowSandwich
from ..training.supernet_training import SupernetTrainer
from .strategy import SearchStrategy

logger = logging.getLogger(__name__)

__all__ = ["EXTRA_OBJECTIVES", "FrontSettings", "SandwichStrategy", "train_supernet", "sandwich_archs",
           "trained_supernet_scoring"]

#: a candidate's costs a search can minimise beside latency (`nas.records.COSTS`)
EXTRA_OBJECTIVES = tuple(c for c in COSTS if c != "latency_ms")


@dataclass
class FrontSettings:
    """The base of the settings of every strategy over a trained supernet: the two settings they all have, checked
    for all of them alike (`__post_init__`), and the costs their front spreads over. A subclass is a dataclass
    whose own fields follow these two.

    Args:
        latency_limit_ms: archs slower than this are infeasible (evolution: constraint-domination; random: not
            drawn); None = no limit.
        extra_objectives: a candidate's costs minimised beside latency ("macs", "params"); finalisation then spreads
            its archs over the cost range of every objective (`nas.training.finalize.select_spread`).
    """

    latency_limit_ms: Optional[float] = None
    extra_objectives: list = field(default_factory=list)

    def __post_init__(self):
        if self.latency_limit_ms is not None and self.latency_limit_ms <= 0:
            raise ValueError("latency_limit_ms: must be > 0 (or null for no limit)")
        unknown = [o for o in self.extra_objectives if o not in EXTRA_OBJECTIVES]
        if unknown or len(set(self.extra_objectives)) < len(self.extra_objectives):
            raise ValueError(f"extra_objectives: {list(self.extra_objectives)} is not a list of distinct "
                             f"{', '.join(EXTRA_OBJECTIVES)}")

    @property
    def costs(self) -> tuple[str, ...]:
        """The candidate's costs minimised (`Candidate.cost`): latency first, then the extra objectives."""
        return ("latency_ms", *self.extra_objectives)


def train_supernet(ctx: SearchContext) -> SupernetTrainer:
    """Train (or finish training) the run's supernet; returns the trainer holding the weights. With
    `supernet_from`, the other run's trained supernet is copied in first (checked to be trained alike when the run
    was prepared: `nas.config.supernet_source`), so that nothing is trained again."""
    if ctx.config.supernet_from and not ctx.run_dir.supernet_checkpoint.exists():
        source = RunDir(ctx.config.supernet_from).supernet_checkpoint
        atomic_copy(source, ctx.run_dir.supernet_checkpoint)
        logger.info("supernet: taken from %s", source)
    torch.manual_seed(ctx.config.seed)  # the initial weights
    trainer = SupernetTrainer(ctx.space, ctx.space.build_supernet(), ctx.task, ctx.config.train, ctx.config.seed,
                              ctx.run_dir.supernet_checkpoint, dist=ctx.dist, device=ctx.device,
                              sandwich=sandwich_archs(ctx))
    trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
    return trainer


def sandwich_archs(ctx: SearchContext) -> SandwichArchs:
    """The archs the run's sandwich steps train: the search's latency window with `train.sandwich_window` and a
    latency limit, else the whole space."""
    limit, _ = ctx.config.search.finalize_scope()
    if not (ctx.config.train.sandwich_window and limit is not None):
        return SpaceSandwich(ctx.space)
    top_mmacs = ctx.config.train.sandwich_top_mmacs
    return WindowSandwich(ctx.space, ctx.latency_ms, ctx.params, ctx.macs, limit, ctx.config.seed,
                          bins=ctx.config.train.sandwich_bins, top_macs=None if top_mmacs is None else top_mmacs * 1e6)


def trained_supernet_scoring(ctx: SearchContext) -> tuple[ArchEvaluator, CachedEvaluator]:
    """The run's supernet trained (`train_supernet`), and its journaled scoring of archs on inherited weights."""
    trainer = train_supernet(ctx)
    evaluator = ArchEvaluator(ctx.space, trainer.trained_model, ctx.task, ctx.cost_model,
                              ctx.config.train.channels_last)
    return evaluator, journaled_candidates(evaluator.evaluate, ctx.run_dir.journal, ctx.task.metric, dist=ctx.dist)


class SandwichStrategy(SearchStrategy):
    """A search over a supernet trained by the sandwich rule, whose settings (`FrontSettings`) give a latency limit
    and the costs its front spreads over."""

    scales_out = uses_sandwich = True

    @classmethod
    def finalize_scope(cls, settings: FrontSettings) -> tuple[Optional[float], tuple[str, ...]]:
        return settings.latency_limit_ms, settings.costs
