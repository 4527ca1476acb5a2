"""Search strategies by name: each turns a `SearchContext` into evaluated architectures.

`STRATEGIES[name] = (config dataclass, runner)`. The config's `search` section (`SearchConfig`) names the
strategy that runs and holds every strategy's settings in a sub-section of its name, so that one override
(`search.strategy=differentiable`) switches strategy; `search.finalize` is common to all of them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from .differentiable import DifferentiableConfig, run_differentiable
from .evaluation import ArchEvaluator, CachedEvaluator
from .evolution import EvolutionConfig, EvolutionStrategy
from .finalize import FinalizeConfig
from .supernet_training import SupernetTrainer

logger = logging.getLogger(__name__)

__all__ = ["STRATEGIES", "SearchConfig", "SearchOutcome", "run_evolution", "train_supernet"]


@dataclass
class SearchOutcome:
    """`evaluate.records`: every evaluated arch in id order; `evaluator`: scores further archs (test, baselines)."""

    evaluate: CachedEvaluator
    evaluator: ArchEvaluator


def train_supernet(ctx) -> SupernetTrainer:
    """Train (or finish training) the run's supernet; returns the trainer holding the weights."""
    torch.manual_seed(ctx.config.seed)  # the initial weights
    trainer = SupernetTrainer(ctx.space, ctx.space.build_supernet(), ctx.task, ctx.config.train, ctx.config.seed,
                              ctx.run_dir.supernet_checkpoint, dist=ctx.dist, device=ctx.device)
    trainer.train(progress=ctx.progress)
    return trainer


def run_evolution(ctx) -> SearchOutcome:
    """Supernet training with the sandwich rule, then NSGA-II over (metric with inherited weights, latency).

    With several processes, each generation's new archs are scored spread over them (`CachedEvaluator.
    evaluate_all`); the records, and so the search, are those of one process."""
    from tqdm import tqdm

    from .search import write_results

    trainer = train_supernet(ctx)
    evaluator = ArchEvaluator(ctx.space, trainer.trained_model, ctx.task, ctx.cost_model,
                              ctx.config.train.channels_last)
    evaluate = CachedEvaluator(evaluator.evaluate, ctx.run_dir.journal, dist=ctx.dist)
    config: EvolutionConfig = ctx.config.search.evolution
    bar = tqdm(total=config.population * config.generations, desc="search", unit="arch", disable=not ctx.progress,
               dynamic_ncols=True)

    def evaluate_generation(archs: list[dict], generation: int) -> list[dict]:
        return evaluate.evaluate_all(archs, on_record=lambda: bar.update(1), generation=generation)

    def on_generation(generation: int) -> None:
        if ctx.dist.is_main:
            write_results(ctx, evaluate.records, {})

    strategy = EvolutionStrategy(ctx.space, config, ctx.task.metric, ctx.config.seed)
    strategy.run(evaluate_generation=evaluate_generation, on_generation=on_generation)
    bar.close()
    logger.info("evolution: %d archs evaluated (%d new in this session)", len(evaluate.records),
                evaluate.new_evaluations)
    return SearchOutcome(evaluate, evaluator)


STRATEGIES = {"evolution": (EvolutionConfig, run_evolution),
              "differentiable": (DifferentiableConfig, run_differentiable)}


@dataclass
class SearchConfig:
    """The `search` section of a run config.

    Args:
        strategy: the strategy that runs (a key of `STRATEGIES`).
        evolution / differentiable: each strategy's settings (one field per key of `STRATEGIES`).
        finalize: training of the chosen archs after the search, whatever the strategy (`FinalizeConfig`).
    """

    strategy: str = "evolution"
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    differentiable: DifferentiableConfig = field(default_factory=DifferentiableConfig)
    finalize: FinalizeConfig = field(default_factory=FinalizeConfig)
