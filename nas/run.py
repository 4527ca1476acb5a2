"""A whole search run: prepare the run directory, build task / space / cost model (`nas.context`), run the
strategy, score the front on the test split, finalise the chosen archs, evaluate baselines, write candidates.csv
and the report.

Resuming is the same call with `resume=True`: every phase skips what its checkpoint or journal says is done.

Started by torchrun (`nas.distributed`), the processes train the supernet together and share the evolution's
and the test split's evaluations; rank 0 alone writes the run directory, and finalises and scores the baselines
while the others wait for its candidates.

`probe_run` is `vpunas probe`'s run: the probe set of a finished run (`nas.ranking.probe`) scored on its supernet,
and its report rebuilt.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from search_spaces import arch_key

from .baselines.scoring import check_baselines, evaluate_baselines
from .baselines.workers import BaselineWorkers
from .config import ConfigError, RunConfig, config_to_yaml, first_difference, load_config, supernet_source
from .context import build_context, resolve_device
from .distributed import Distributed, start
from .errors import ParameterError, RunDirError
from .latency.lut_validation import correct_for_this_machine, load_run_correction, measured_beside_predicted
from .pareto import pareto_mask
from .ranking.probe import score_probe
from .records import Candidate, FinalScores, write_candidates
from .reporting.build import build_report
from .reporting.report import read_stage_times
from .rundir import RunDir, atomic_write_text
from .runtime import auto_threads
from .search_context import SearchContext
from .strategies import STRATEGIES, SearchOutcome, SearchStrategy
from .training.evaluation import ArchEvaluator, CachedEvaluator
from .training.finalize import finalize
from .training.supernet_training import load_trained_supernet

logger = logging.getLogger(__name__)

__all__ = ["run_search", "prepare_run", "probe_run", "StageClock", "write_results"]


def prepare_run(config_path: str | Path, overrides: list[str], out: str | Path | None,
                resume: bool) -> tuple[RunConfig, RunDir, torch.device]:
    """Resolve the config, the run directory and the device the run's stages run on (`resolve_device`: recorded
    in the config as "cpu" or "cuda"); on resume the config must match the run's own.

    Nothing is written yet: `run_search` creates the directory once data, space and cost model all load. Under
    torchrun, the processes join their process group here, once each has checked the run directory.
    """
    config = load_config(config_path, overrides)
    run_dir = RunDir(out if out is not None else Path("runs") / config.name)
    launch = Distributed.from_environment()
    if resume:
        if not run_dir.exists():
            raise ParameterError(f"`resume`: {run_dir.path} holds no run (no config.yaml)")
        recorded = load_config(run_dir.config)
        if config.threads == 0:
            config.threads = recorded.threads
        if config.device == "auto":
            config.device = recorded.device
        diff = first_difference(config.to_dict(), recorded.to_dict())
        if diff:
            raise ParameterError(f"`resume`: {diff} differs from {run_dir.config}; resume with the same config and "
                                 "overrides, or start a new run with `out`")
        config = recorded
    else:
        if run_dir.path.exists() and any(run_dir.path.iterdir()):
            raise ParameterError(f"run directory {run_dir.path} exists and is not empty; use `resume` to continue it "
                                 "or `out` for a new one")
        if config.threads == 0:
            config.threads = auto_threads(launch.local_world_size)
    if config.supernet_from:
        supernet_source(config)  # checked before anything is written
    device = resolve_device(config.device, launch.local_rank)
    config.device = device.type
    start(device.type).barrier()  # every process has checked the directory before rank 0 creates it
    return config, run_dir, device


class StageClock:
    """Wall time per stage of a run, summed over its sessions, in RUN_DIR/stage_times.json: a resumed run adds
    its own time (a stage it finds done costs it seconds), and a stage cut short by an interrupt counts up to
    the interrupt. A session that ends in an error records nothing: a failed command leaves the run directory as
    it was."""

    def __init__(self, run_dir: RunDir):
        self.path = run_dir.stage_times
        self.record = read_stage_times(run_dir) or {"seconds": {}, "sessions": 0}
        self.stage: str | None = None
        self.since = 0.0

    def start(self, stage: str | None) -> None:
        """End the current stage, adding its time, and start `stage` (None: no stage)."""
        now = time.perf_counter()
        if self.stage is not None:
            seconds = self.record["seconds"]
            seconds[self.stage] = round(seconds.get(self.stage, 0.0) + now - self.since, 3)
        self.stage, self.since = stage, now

    def elapsed(self) -> float:
        """Seconds of the run so far: every stage of every session, the running one included."""
        running = time.perf_counter() - self.since if self.stage is not None else 0.0
        return sum(self.record["seconds"].values()) + running

    def save(self) -> None:
        """End the current stage and write the record, this session counted."""
        self.start(None)
        self.record["sessions"] += 1
        atomic_write_text(self.path, json.dumps(self.record, indent=1) + "\n")


def _attach_log(run_dir: RunDir) -> logging.Handler:
    handler = logging.FileHandler(run_dir.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


def write_results(ctx: SearchContext, records: list[Candidate], test_metrics: dict[str, float],
                  finals: dict[str, FinalScores] | None = None) -> list[Candidate]:
    """candidates.csv of the run's candidates `records`, with the test metric of those `test_metrics` has (by
    journal key) and the finalised scores of those `finals` has (by arch key); returns the candidates written."""
    finals = finals or {}
    return write_candidates(ctx.run_dir.candidates,
                            [replace(c, test_score=test_metrics.get(c.key), final=finals.get(arch_key(c.arch)))
                             for c in records])


def _start_strategy(ctx: SearchContext) -> SearchStrategy:
    """The config's strategy (`nas.strategies.STRATEGIES`) with the state it recorded in an earlier session of
    the run (RUN_DIR/checkpoint/strategy.json); after each generation, rank 0 writes candidates.csv and that
    state."""
    cls = STRATEGIES[ctx.config.search.strategy]
    path = ctx.run_dir.strategy_state

    def on_generation(records: list[Candidate]) -> None:
        write_results(ctx, records, {})  # the front so far is on disk while the search runs
        if cls.persists_state:
            atomic_write_text(path, json.dumps(strategy.state_dict(), indent=1) + "\n")

    strategy = cls(ctx, on_generation if ctx.dist.is_main else None)
    if cls.persists_state and path.exists():
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunDirError(f"{path} is damaged and cannot be read ({str(exc).splitlines()[0][:120]}); delete it "
                              "to resume without its check of the search, or start a new run in another run "
                              "directory") from None
        strategy.load_state_dict(state)
    return strategy


def run_search(config: RunConfig, run_dir: RunDir, device: torch.device, progress: bool = True) -> list[Candidate]:
    """Run (or resume) the whole search on `device` (`prepare_run`'s); returns the candidates written to
    candidates.csv (in every process of a torchrun launch)."""
    ctx = build_context(config, run_dir, device, progress)
    dist = ctx.dist
    if dist.enabled and not config.search.strategy_class.scales_out:
        scaling = ", ".join(name for name, cls in STRATEGIES.items() if cls.scales_out)
        raise ConfigError(f"search.strategy={config.search.strategy} runs in one process; start it without "
                          f"torchrun (strategies that scale out: {scaling})")
    ctx.cost_model.check_covers(ctx.space.all_blocks())
    check_baselines(ctx)
    if dist.is_main and not run_dir.exists():
        run_dir.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir.config, config_to_yaml(config))
    handler = _attach_log(run_dir) if dist.is_main else None
    clock = StageClock(run_dir)
    workers = BaselineWorkers(ctx)
    try:
        started = time.perf_counter()
        logger.info("run %s: %s; cost model %s; %d threads on %s%s", run_dir.path, ctx.space.describe(),
                    ctx.cost_model.name, config.threads, ctx.device,
                    f", {dist.world_size} processes" if dist.enabled else "")
        if ctx.cost_model.is_measured:  # measured latencies: checked against this machine
            clock.start("latency correction")
            if dist.is_main:  # measured by one process, on an otherwise idle machine
                correct_for_this_machine(ctx.space, ctx.cost_model, config.cost.correct,
                                         config.cost.correction_archs, config.seed, run_dir)
            dist.barrier()
            if not dist.is_main:
                load_run_correction(ctx.cost_model, run_dir)
        clock.start("supernet training and search")
        outcome = _start_strategy(ctx).run()
        records = outcome.evaluate.records
        # the test split scores the front only, after the search (the search itself never looks at it)
        clock.start("test scoring")
        on_front = pareto_mask([c.score for c in records], [c.latency_ms for c in records])
        test_eval = CachedEvaluator(lambda arch: {"key": arch_key(arch),
                                                  "test": outcome.evaluator.metric(arch, "test")},
                                    run_dir.test_journal, dist=dist)
        front = [r for r, on in zip(records, on_front) if on]
        test_metrics = {c.key: round(t["test"], 4)
                        for c, t in zip(front, test_eval.evaluate_all([c.arch for c in front]))}
        written = _finish(ctx, outcome, records, test_metrics, clock, started, workers) if dist.is_main else None
        return dist.broadcast(written)
    except KeyboardInterrupt:  # an interrupted session's time counts; an error's does not
        if dist.is_main:
            clock.save()
        raise
    finally:
        workers.stop()
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()


#: how far from its latency target a finalised arch may measure before the log warns
TARGET_TOLERANCE = 0.10


def _log_against_target(ctx: SearchContext, finalised: list[Candidate], measured: dict[str, float]) -> None:
    """A search with a latency target (`SearchStrategy.latency_target_ms`): each finalised arch's latency measured
    end to end on this machine against it."""
    target = ctx.config.search.latency_target_ms(ctx.space, ctx.cost_model)
    for candidate in finalised if target else ():
        ms = measured.get(arch_key(candidate.arch))
        if ms is not None:
            off = ms / target - 1
            within = abs(off) <= TARGET_TOLERANCE
            logger.log(logging.INFO if within else logging.WARNING,
                       "latency target %.4f ms: arch %d measured %.4f ms end to end on this machine (%+.1f%%, %s "
                       "+-%d%%; %.4f ms on the cost model)", target, candidate.id, ms, 100 * off,
                       "within" if within else "outside", 100 * TARGET_TOLERANCE, candidate.latency_ms)


def _finish(ctx: SearchContext, outcome: SearchOutcome, records: list[Candidate], test_metrics: dict[str, float],
            clock: StageClock, started: float, workers: BaselineWorkers) -> list[Candidate]:
    """Rank 0's part after the search: candidates.csv, finalisation, measurements, baselines, the report."""
    run_dir = ctx.run_dir
    write_results(ctx, records, test_metrics)  # the searched front is on disk while finalisation runs
    clock.start("finalisation")
    budget = ctx.config.search.finalize.run_budget_minutes
    finals = finalize(ctx, records, outcome.evaluator, seconds_left=budget * 60 - clock.elapsed() if budget else None)
    clock.start("measuring the finalised archs")
    # measured beside predicted, for the report: kept out of candidates.csv, which the seed determines
    finalised = list({key: c for c in records if (key := arch_key(c.arch)) in finals}.values())
    _log_against_target(ctx, finalised, measured_beside_predicted(ctx, finalised))
    written = write_results(ctx, records, test_metrics, finals)
    _write_warnings(run_dir, _stages_that_learned_nothing(ctx, records, finals))
    clock.start("baselines")
    evaluate_baselines(ctx, outcome.evaluator, workers)
    clock.start("probe set")
    score_probe(ctx, outcome.evaluator, train=False)  # when the cache holds it (`vpunas probe` trains it)
    clock.save()
    build_report(run_dir, space=ctx.space)
    logger.info("run finished in %.0f s: %d archs, %d on the front; %s", time.perf_counter() - started,
                len(written), sum(c.is_pareto for c in written), run_dir.candidates)
    return written


def _stages_that_learned_nothing(ctx: SearchContext, records: list[Candidate],
                                 finals: dict[str, FinalScores]) -> list[str]:
    """A line for each stage whose archs all end at or below the task's untrained level (a collapsed classifier's
    top-1, bicubic PSNR): a diverging or stalled training (a learning rate far off) whose front would otherwise
    pass for a result."""
    metric, level = ctx.task.metric, ctx.task.untrained_level()
    train, finalize = ctx.config.train, ctx.config.search.finalize
    batch = f"task.batch_size (now {ctx.config.task.batch_size})"
    search_scores = [c.score for c in records]
    final_scores = [f.val for f in finals.values()]
    search_failed = bool(search_scores) and max(search_scores) <= level
    finalize_lr = f"search.finalize.lr (now {finalize.lr:g})" if finalize.lr is not None else "train.lr"
    inherited = ("; its archs start from the supernet's weights, which learned nothing"
                 if search_failed and finalize.init == "inherited" else "")
    stages = [("the search", search_scores, f"look at train.lr (now {train.lr:g}) and {batch}"),
              ("finalisation", final_scores, f"look at {finalize_lr} and {batch}{inherited}")]
    lines = [f"{stage} learned nothing: its best of {len(scores)} archs scores {max(scores):.4g} val {metric}, at "
             f"or below the untrained level {level:.4g}; {advice}"
             for stage, scores, advice in stages if scores and max(scores) <= level]
    for line in lines:
        logger.warning(line)
    return lines


def _write_warnings(run_dir: RunDir, lines: list[str]) -> None:
    if lines:
        atomic_write_text(run_dir.warnings, json.dumps(lines, indent=1) + "\n")
    else:
        run_dir.warnings.unlink(missing_ok=True)


def probe_run(run_dir, overrides: Sequence[str] = (), progress: bool = True) -> dict[str, dict]:
    """`vpunas probe`: the probe set of a run with a trained supernet, trained where the cache lacks it and scored
    on the run's supernet, on the run's device; probe.csv written, report.html rebuilt when the run has finished.
    `overrides` (`probe.archs=N`, `probe.epochs=E`) change the probe set, `device=D` where it trains (a run of a
    GPU probed on a machine without one: `device=cpu`), nothing else of the run."""
    if not run_dir.exists():
        raise FileNotFoundError(f"{run_dir.path} holds no run (no config.yaml)")
    wrong = [o for o in overrides if not o.startswith(("probe.", "device="))]
    if wrong:
        raise ConfigError(f"{wrong[0]}: vpunas probe changes only the probe set (probe.archs=N, probe.epochs=E) and "
                          "where it trains (device=cpu)")
    config = load_config(run_dir.config, list(overrides))
    if config.probe.archs == 0:
        raise ConfigError("probe.archs: 0 means no probe set; give probe.archs=N (N >= 2)")
    ctx = build_context(config, run_dir, resolve_device(config.device), progress)
    supernet = load_trained_supernet(ctx.space, run_dir.supernet_checkpoint, config.train).to(ctx.device)
    evaluator = ArchEvaluator(ctx.space, supernet, ctx.task, ctx.cost_model, config.train.channels_last)
    stats = score_probe(ctx, evaluator, train=True)
    if run_dir.candidates.exists():
        build_report(run_dir, space=ctx.space)
    return stats
