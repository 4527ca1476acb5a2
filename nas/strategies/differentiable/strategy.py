"""The differentiable strategy of a run (`DifferentiableStrategy`, registered as `differentiable`): the search by
gradient (`DifferentiableTrainer`), then the scoring of each search epoch's derived arch."""
from __future__ import annotations

import logging
from typing import Callable, Optional

from dataclasses import replace

from search_spaces import arch_key

from ...records import Candidate
from ...search_context import SearchContext
from ...training.evaluation import ArchEvaluator, journaled_candidates
from ..registry import register_strategy
from ..strategy import SearchOutcome, SearchStrategy
from .search import DifferentiableConfig, DifferentiableTrainer

logger = logging.getLogger(__name__)

__all__ = ["DifferentiableStrategy"]


@register_strategy
class DifferentiableStrategy(SearchStrategy):
    """The differentiable strategy of a run: search, fine-tune (`DifferentiableTrainer`), then score each search
    epoch's derived arch.

    candidates.csv gets one row per search epoch (`generation` = epoch, `expected_latency_ms` = E[latency] at
    its end); the last row is the derived arch. All rows are scored with the final (fine-tuned) weights, the
    weights `vpunas export` uses, so `on_generation` follows the scoring of each epoch's arch, after the search.

    The state is that of the `DifferentiableTrainer` it drives (weights, logits, optimizers, trajectory), which
    checkpoints itself by step in RUN_DIR/checkpoint/supernet.pt and resumes from it (`persists_state` False).
    """

    name = "differentiable"
    config_class = DifferentiableConfig
    persists_state = False

    @classmethod
    def finalize_candidates(cls, settings: DifferentiableConfig, records: list[Candidate]) -> list[Candidate]:
        """The derived arch (the last epoch's row) alone, unless `finalize_every_epoch`: an early epoch's arch is
        a search not yet finished, not a result."""
        return records if settings.finalize_every_epoch else records[-1:]

    @classmethod
    def latency_target_ms(cls, settings: DifferentiableConfig, space, cost_model) -> Optional[float]:
        return settings.target_latency_ms(space, cost_model)

    def __init__(self, ctx: SearchContext, on_generation: Optional[Callable[[list[Candidate]], None]] = None):
        super().__init__(ctx, on_generation)
        self.trainer = DifferentiableTrainer(ctx.space, ctx.task, ctx.cost_model, ctx.config.train, self.settings,
                                             ctx.random, ctx.run_dir.supernet_checkpoint)

    def state_dict(self) -> dict:
        return self.trainer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.trainer.load_state_dict(state)

    def run(self) -> SearchOutcome:
        ctx, trainer = self.ctx, self.trainer
        trainer.run(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
        evaluator = ArchEvaluator(ctx.space, trainer.supernet, ctx.task, ctx.cost_model, ctx.config.train.channels_last)
        measured: dict[str, Candidate] = {}

        def score(entry: dict) -> Candidate:
            key = arch_key(entry["arch"])
            if key not in measured:  # the trajectory often derives the same arch for several epochs
                measured[key] = evaluator.evaluate(entry["arch"])
            return replace(measured[key], key=f"epoch{entry['epoch']}",
                           expected_latency_ms=round(entry["expected_latency_ms"], 6))

        evaluate = journaled_candidates(score, ctx.run_dir.journal, ctx.task.metric,
                                        key=lambda entry: f"epoch{entry['epoch']}")
        for record in evaluate.records:
            measured.setdefault(arch_key(record.arch), replace(record, key=arch_key(record.arch), id=None,
                                                               generation=None, expected_latency_ms=None))
        for entry in trainer.trajectory:
            new = evaluate.new_evaluations
            evaluate(entry, generation=entry["epoch"])
            if evaluate.new_evaluations > new:  # an epoch scored in an earlier session was reported there
                self._generation_done(evaluate.records)
        final = evaluate.records[-1]
        logger.info("derived arch (id %d): %s %.4f, latency %.4f ms on %s (E[latency] %.4f ms)", final.id,
                    ctx.task.metric, final.score, final.latency_ms, final.cost_model, final.expected_latency_ms)
        return SearchOutcome(evaluate, evaluator)
