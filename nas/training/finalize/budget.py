"""Fitting finalisation to a run budget: how many archs, and how many epochs each, fit in the time a run has left."""
from __future__ import annotations

import copy
import logging
import math
import time
from typing import Sequence

from search_spaces import arch_key

from ...records import Candidate
from ...search_context import SearchContext
from ..evaluation import ArchEvaluator
from ..supernet_training import recalibrate_batchnorm
from .final_scores import better_of
from .lockstep import LockstepTrainer, lockstep_trainer
from .plan import CHECKPOINT_FILE, FinalizationPlan, epochs_text
from .replan import PlanTiming, planned_seconds
from .schedules import epochs_to_steps
from .settings import FinalizeConfig

logger = logging.getLogger(__name__)

#: what the run's last steps take beyond scoring its archs and baselines (results, plots, the report)
REPORT_SECONDS = 20.0


def budgeted_epochs(epochs: float, max_epochs: float, seconds_left: float, scoring_seconds: float,
                    steps_per_epoch: int, step_seconds: float, net_seconds: Sequence[float],
                    workers: int) -> list[float]:
    """Each net's epochs, in tenths, whose training (`planned_seconds`) and the scoring after it fit in
    `seconds_left`: at most `max(epochs, max_epochs)`, never under half of `epochs` (a budget spent elsewhere is
    exceeded rather than the archs left untrained), and in between in inverse proportion to the square root of
    the net's step time.

    That split makes the most of the time when an arch's error falls like 1/epochs (equal gain per second at
    the margin: e_i ~ 1/sqrt(c_i)), as the finalised archs' errors roughly do over the first few epochs. The
    archs' steps differ several times in cost, so the cheap end of the front, where a user's small model is
    hardest to beat, gets the longer schedules."""
    lowest, highest = epochs / 2, max(epochs, max_epochs)
    net_seconds = [max(c, 1e-9) for c in net_seconds]  # a net too quick for the clock
    cheapest = min(net_seconds)

    def plan(longest: float) -> list[float]:  # the cheapest net's epochs -> everyone's
        return [min(highest, max(lowest, math.floor(longest * math.sqrt(cheapest / c) * 10 + 1e-9) / 10))
                for c in net_seconds]

    def fits(net_epochs: Sequence[float]) -> bool:
        steps = epochs_to_steps(net_epochs, steps_per_epoch)
        return planned_seconds(steps, net_seconds, step_seconds, workers) + scoring_seconds <= seconds_left

    low, high = lowest, highest * math.sqrt(max(net_seconds) / cheapest)  # plan(high): all at `highest`
    longest, shortest = plan(high), plan(low)
    if fits(longest):
        return longest
    if not fits(shortest):
        return shortest
    for _ in range(40):  # plan(low) fits, plan(high) does not
        low, high = ((low + high) / 2, high) if fits(plan((low + high) / 2)) else (low, (low + high) / 2)
    return plan(low)


def budgeted_archs(archs: int, max_archs: int, seconds_left: float, seconds_per_arch: float) -> int:
    """How many archs, `archs` to `max_archs`, fit in `seconds_left` at `seconds_per_arch` each (training and
    scoring; the lockstep step's time grows with its nets)."""
    return max(archs, min(max_archs, math.floor(seconds_left / seconds_per_arch)))


def _timed(ctx: SearchContext, trainer: LockstepTrainer) -> tuple[float, list[float], float]:
    """(seconds of one lockstep step, each net's seconds in it, seconds of scoring all its nets), timed on copies:
    the training itself is left untouched."""
    step_seconds, net_seconds = trainer.time_steps()
    probe = copy.deepcopy(trainer.nets[-1])  # the costliest arch (they come sorted by latency): not too little
    timed = time.perf_counter()
    probe = recalibrate_batchnorm(probe, ctx.task.calibration_batches(), ctx.config.train.channels_last)
    better_of(ctx.task, probe, probe, 0)  # its inherited subnet is scored beside it
    return step_seconds, net_seconds, (time.perf_counter() - timed) * len(trainer.nets)


def fit_to_budget(ctx: SearchContext, chosen: list[Candidate], choose, evaluator: ArchEvaluator,
                  seconds_left: float) -> FinalizationPlan:
    """The plan of a fresh finalisation sized to the time the run's budget leaves it: more archs (`choose(n)`, up
    to `max_archs`) when it has time for them at the full epochs, then each arch's epochs by its cost
    (`budgeted_epochs`: up to `max_epochs`, down to half of `epochs`), timed on lockstep trainers of the archs.
    The time left is the run's: the archs' scoring and the stages after finalisation (the baselines' scoring at
    an arch's cost each, `REPORT_SECONDS`) come out of it. The plan keeps its timing for the re-planning as the
    training goes (`Replanner`)."""
    config: FinalizeConfig = ctx.config.search.finalize
    checkpoint = ctx.run_dir.checkpoint_dir / CHECKPOINT_FILE  # none yet: the timing trainers save nothing
    started = time.perf_counter()
    trainer = lockstep_trainer(ctx, chosen, evaluator, checkpoint)
    step_seconds, net_seconds, scoring = _timed(ctx, trainer)
    after = scoring / len(chosen) * len(ctx.config.baselines) + REPORT_SECONDS
    if config.max_archs > len(chosen):
        left = seconds_left - (time.perf_counter() - started) - after
        per_arch = (step_seconds * round(config.epochs * trainer.steps_per_epoch) + scoring) / len(chosen)
        wider = choose(budgeted_archs(len(chosen), config.max_archs, left, per_arch))
        if len(wider) > len(chosen):
            chosen = wider
            trainer = lockstep_trainer(ctx, chosen, evaluator, checkpoint)
            step_seconds, net_seconds, scoring = _timed(ctx, trainer)
    left = seconds_left - (time.perf_counter() - started)
    timing = PlanTiming(step_seconds, net_seconds, trainer.threads.nets_at_once(), scoring, after)
    epochs = budgeted_epochs(config.epochs, config.max_epochs, left, scoring + after, trainer.steps_per_epoch,
                             step_seconds, net_seconds, timing.workers)
    planned = timing.training_seconds(epochs_to_steps(epochs, trainer.steps_per_epoch))
    logger.info("run budget %g min: %.1f min left for finalisation and the rest of the run; %d archs, a lockstep "
                "step takes %.2f s (%.0f-%.0f ms a net), scoring about %.0f s and %.0f s after it -> %s "
                "(configured: %.3g; about %.1f min)", config.run_budget_minutes, left / 60, len(chosen), step_seconds,
                min(net_seconds) * 1e3, max(net_seconds) * 1e3, scoring, after, epochs_text(epochs), config.epochs,
                (planned + scoring + after) / 60)
    return FinalizationPlan([arch_key(c.arch) for c in chosen], epochs, timing=timing)
