"""The finalisation stage of a run: plan, train, score (see the package docstring)."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Sequence

import torch

from search_spaces import arch_key

from ...records import Candidate, FinalScores
from ...rundir import EvaluationJournal, atomic_torch_save
from ...search_context import SearchContext
from ..evaluation import ArchEvaluator
from ..supernet_training import recalibrate_batchnorm
from .budget import fit_to_budget
from .final_scores import better_of, final_weights_path, int8_scores, val_metric
from .lockstep import LockstepTrainer, lockstep_trainer
from .plan import CHECKPOINT_FILE, SCREENING_CHECKPOINT_FILE, FinalizationPlan, epochs_text
from .replan import CHECKS_PER_EPOCH, Replanner
from .schedules import epochs_to_steps
from .selection import feasible_records, ranking_fidelity, select_spread
from .settings import FinalizeConfig

logger = logging.getLogger(__name__)


def _screen(ctx: SearchContext, candidates: Sequence[Candidate], evaluator: ArchEvaluator,
            costs: Sequence[str]) -> list[Candidate]:
    """The `archs` of `candidates` that continue, chosen by their val metric after `screen_epochs` (the scores
    journaled; the screening's training checkpointed to its own file)."""
    config: FinalizeConfig = ctx.config.search.finalize
    metric = ctx.task.metric
    journal = EvaluationJournal(ctx.run_dir.checkpoint_dir / "screened.jsonl")
    screened = {r["key"]: r[metric] for r in journal.load()}
    keys = [arch_key(c.arch) for c in candidates]
    if not all(k in screened for k in keys):
        logger.info("screening %d archs (ids %s) for %.3g of %.3g epochs", len(candidates),
                    [c.id for c in candidates], config.screen_epochs, config.epochs)
        trainer = lockstep_trainer(ctx, candidates, evaluator, ctx.run_dir.checkpoint_dir / SCREENING_CHECKPOINT_FILE,
                                   stop_epochs=config.screen_epochs)
        trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
        for key, net in zip(keys, trainer.nets):
            if key not in screened:
                screened[key] = val_metric(ctx.task, net)
                journal.append({"key": key, metric: screened[key]})
    rescored = [replace(c, score=screened[k]) for c, k in zip(candidates, keys)]
    kept = {arch_key(c.arch) for c in select_spread(rescored, config.archs, costs)}
    logger.info("screened: %s", ", ".join(f"id {c.id} {c.score:.2f}{' (continues)' if k in kept else ''}"
                                          for c, k in zip(rescored, keys)))
    return [c for c, k in zip(candidates, keys) if k in kept]


def _new_plan(ctx: SearchContext, feasible: Sequence[Candidate], evaluator: ArchEvaluator, costs: Sequence[str],
              seconds_left: float | None) -> FinalizationPlan | None:
    """The archs to finalise and their epochs: `archs` spread over the front (`select_spread`), or those the
    screening keeps of `screen_archs`, or as many and as long as the run budget has time for; None when there are
    none."""
    config: FinalizeConfig = ctx.config.search.finalize
    choose = lambda n: select_spread(feasible, n, costs)
    candidates = choose(config.screen_archs if config.screening else config.archs)
    if not candidates:
        return None
    if config.screening:
        kept = _screen(ctx, candidates, evaluator, costs)
        return FinalizationPlan([arch_key(c.arch) for c in kept], [config.epochs] * len(kept), from_screening=True)
    if seconds_left is not None:
        return fit_to_budget(ctx, candidates, choose, evaluator, seconds_left)
    return FinalizationPlan([arch_key(c.arch) for c in candidates], [config.epochs] * len(candidates))


def _trainer(ctx: SearchContext, plan: FinalizationPlan, chosen: Sequence[Candidate],
             evaluator: ArchEvaluator) -> LockstepTrainer:
    """The trainer of the plan's archs: resumed from its checkpoint when there is one, else continuing the
    screening's training where the plan says so, else from the start. A checkpoint holds the latest schedules: a
    re-plan interrupted before its record is recorded now."""
    checkpoint = ctx.run_dir.checkpoint_dir / CHECKPOINT_FILE
    screening = ctx.run_dir.checkpoint_dir / SCREENING_CHECKPOINT_FILE
    started = checkpoint.exists()
    trainer = lockstep_trainer(ctx, chosen, evaluator, checkpoint, epochs=plan.epochs)
    if plan.from_screening and not started and screening.exists():  # none: a screening too short for one step
        trainer.continue_from(screening)
    if epochs_to_steps(plan.epochs, trainer.steps_per_epoch) != trainer.net_steps:
        plan.reschedule(trainer.net_steps, trainer.steps_per_epoch, ctx.run_dir.checkpoint_dir)
    return trainer


def _replanner(ctx: SearchContext, plan: FinalizationPlan, trainer: LockstepTrainer,
               ends_at: float | None) -> Replanner | None:
    """What keeps a budgeted plan's training within the run budget, ending by `ends_at`; None without a budget
    (or for a plan from before the re-planning, which has no timing)."""
    if ends_at is None or plan.timing is None:
        return None
    return Replanner(plan.timing, ends_at, trainer.steps_per_epoch // CHECKS_PER_EPOCH,
                     lambda net_steps: plan.reschedule(net_steps, trainer.steps_per_epoch, ctx.run_dir.checkpoint_dir))


def finalize(ctx: SearchContext, records: Sequence[Candidate], evaluator: ArchEvaluator,
             seconds_left: float | None = None) -> dict[str, FinalScores]:
    """Finalise the run's chosen archs (see the package docstring); returns arch key -> final scores.

    `seconds_left`: what the run's budget (`run_budget_minutes`) leaves for finalisation and the stages after it;
    None = no budget."""
    config: FinalizeConfig = ctx.config.search.finalize
    task, run_dir = ctx.task, ctx.run_dir
    _, costs = ctx.config.search.finalize_scope()
    feasible = feasible_records(records, ctx.config.search)
    started = time.perf_counter()
    ends_at = None if seconds_left is None else started + seconds_left
    plan = FinalizationPlan.load(run_dir.checkpoint_dir, config.epochs)
    if plan is None:
        plan = _new_plan(ctx, feasible, evaluator, costs, seconds_left)
        if plan is None:
            return {}
        plan.save(run_dir.checkpoint_dir)
    chosen, keys = plan.records(feasible), plan.keys
    journal = EvaluationJournal(run_dir.checkpoint_dir / "finalized.jsonl")
    scored = {entry["key"]: FinalScores.from_journal(entry, task.metric) for entry in journal.load()}
    if not all(k in scored for k in keys):
        trainer = _trainer(ctx, plan, chosen, evaluator)
        logger.info("finalising %d archs (ids %s, %s init, %s, kd_ratio %g)", len(chosen),
                    [c.id for c in chosen], config.init, epochs_text(trainer.net_epochs), config.kd_ratio)
        trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads,
                      replanner=_replanner(ctx, plan, trainer, ends_at))
        calibrate = ctx.config.train.channels_last
        for candidate, key, net, epochs in zip(chosen, keys, trainer.nets, trainer.net_epochs):
            if key in scored:
                continue
            net = recalibrate_batchnorm(net, task.calibration_batches(), calibrate)
            net, scores, rejected = better_of(task, net, evaluator.subnet(candidate.arch), epochs)
            if rejected is not None:
                logger.info("  id %d: its inherited weights score %.2f on val, %.3g epochs of finalisation %.2f: it "
                            "keeps them (final_epochs 0)", candidate.id, scores.val, epochs, rejected)
            plain = net.to(memory_format=torch.contiguous_format)
            atomic_torch_save(plain.state_dict(), final_weights_path(run_dir, candidate.id))
            scored[key] = scores
            journal.append(dict(scores.journal_entry(task.metric), key=key, id=candidate.id))
    finals = {k: scored[k] for k in keys}
    if config.int8:
        for key, score in int8_scores(ctx, chosen, keys, evaluator).items():
            finals[key] = replace(finals[key], int8_test=score)
    tau = ranking_fidelity([c.score for c in chosen], [finals[k].val for k in keys])
    logger.info("finalised %d archs in %.0f s; ranking fidelity (Kendall tau, inherited vs finalised val %s): %s",
                len(chosen), time.perf_counter() - started, task.metric, "n/a" if tau is None else f"{tau:.3f}")
    for candidate, key in zip(chosen, keys):
        final = finals[key]
        logger.info("  id %d: latency %.4f ms, %s %.2f inherited -> %.2f finalised (test %.2f%s)", candidate.id,
                    candidate.latency_ms, task.metric, candidate.score, final.val, final.test[task.metric],
                    "" if final.int8_test is None else f", INT8 {final.int8_test:.2f}")
    return finals
