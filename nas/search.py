"""A whole search run: prepare the run directory, build task / space / cost model, run the strategy, score the
front on the test split, finalise the chosen archs, evaluate baselines, write candidates.csv and the report.

Resuming is the same call with `resume=True`: every phase skips what its checkpoint or journal says is done.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hw_cost import CostModel, load_cost_model
from hw_cost.lut import LutCostModel
from search_spaces import SearchSpace, arch_key, build_space
from tasks import build_task

from .config import ConfigError, RunConfig, config_to_yaml, load_config
from .evaluation import CachedEvaluator
from .finalize import finalize
from .lut_validation import correct_for_this_machine, load_run_correction, measured_beside_predicted
from .pareto import pareto_mask
from .report import build_report, candidate_columns, candidate_rows, read_stage_times, write_csv
from .rundir import RunDir, atomic_write_text
from .runtime import ThreadGovernor

logger = logging.getLogger(__name__)

__all__ = ["SearchContext", "run_search", "prepare_run", "build_context", "build_task_and_space"]


@dataclass
class SearchContext:
    """What a strategy works with."""

    config: RunConfig
    run_dir: RunDir
    task: object
    space: SearchSpace
    cost_model: CostModel
    progress: bool = True


def _probe_threads() -> int:
    """1 or all cores, whichever runs a training step of an inverted-residual block (batch 128, 14x14, expansion
    6: about 0.1 s) faster right now; interleaved, best of three after a warm-up round."""
    cores = os.cpu_count() or 1
    if cores == 1:
        return 1
    nn = torch.nn
    block = nn.Sequential(nn.Conv2d(32, 192, 1), nn.BatchNorm2d(192), nn.ReLU6(),
                          nn.Conv2d(192, 192, 3, padding=1, groups=192), nn.BatchNorm2d(192), nn.ReLU6(),
                          nn.Conv2d(192, 32, 1)).to(memory_format=torch.channels_last)
    x = torch.randn(128, 32, 14, 14).contiguous(memory_format=torch.channels_last)
    timing: dict[int, float] = {}
    previous = torch.get_num_threads()
    for round_ in range(4):
        for threads in (1, cores):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            block(x).sum().backward()
            if round_:
                timing[threads] = min(timing.get(threads, float("inf")), time.perf_counter() - start)
    torch.set_num_threads(previous)
    best = min(timing, key=timing.get)
    logger.info("thread probe: %s -> %d threads", {k: f"{v * 1e3:.0f} ms" for k, v in timing.items()}, best)
    return best


def _first_difference(a, b, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            diff = _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if diff:
                return diff
        return None
    return None if a == b else prefix.rstrip(".")


def prepare_run(config_path: str | Path, overrides: list[str], out: str | Path | None, resume: bool) -> tuple[RunConfig, RunDir]:
    """Resolve the config and the run directory; on resume the config must match the run's own.

    Nothing is written yet: `run_search` creates the directory once data, space and cost model all load.
    """
    config = load_config(config_path, overrides)
    run_dir = RunDir(out if out is not None else Path("runs") / config.name)
    if resume:
        if not run_dir.exists():
            raise ConfigError(f"--resume: {run_dir.path} holds no run (no config.yaml)")
        recorded = load_config(run_dir.config)
        if config.threads == 0:
            config.threads = recorded.threads
        diff = _first_difference(config.to_dict(), recorded.to_dict())
        if diff:
            raise ConfigError(f"--resume: {diff} differs from {run_dir.config}; resume with the same config and "
                              "overrides, or start a new run with --out")
        return recorded, run_dir
    if run_dir.path.exists() and any(run_dir.path.iterdir()):
        raise ConfigError(f"run directory {run_dir.path} exists and is not empty; use --resume to continue it or "
                          "--out for a new one")
    if config.threads == 0:
        config.threads = _probe_threads()
    return config, run_dir


def build_task_and_space(config: RunConfig):
    """The config's task, and its search space shaped by the task's data (input shape, outputs)."""
    task = build_task(config.task, seed=config.seed)
    return task, build_space(config.space, input_shape=task.input_shape, num_outputs=task.num_outputs)


def build_context(config: RunConfig, run_dir: RunDir, progress: bool = True) -> SearchContext:
    torch.set_num_threads(config.threads)
    ThreadGovernor.enabled = config.adapt_threads
    task, space = build_task_and_space(config)
    cost_model = load_cost_model(config.cost.model, **config.cost.options())
    if isinstance(cost_model, LutCostModel):
        load_run_correction(cost_model, run_dir)  # the run's latencies came from the corrected table
    return SearchContext(config, run_dir, task, space, cost_model, progress)


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


def write_results(ctx: SearchContext, records: list[dict], test_metrics: dict[str, float],
                  finals: dict[str, dict] | None = None) -> list[dict]:
    metric = ctx.task.metric
    rows = candidate_rows(records, metric, test_metrics, finals)
    write_csv(ctx.run_dir.candidates, rows, candidate_columns(rows, metric))
    return rows


def run_search(config: RunConfig, run_dir: RunDir, progress: bool = True) -> list[dict]:
    """Run (or resume) the whole search; returns the candidate rows written to candidates.csv."""
    from .baselines import check_baselines, evaluate_baselines
    from .strategies import STRATEGIES

    ctx = build_context(config, run_dir, progress)
    ctx.cost_model.check_covers(ctx.space.all_blocks())
    check_baselines(ctx)
    if not run_dir.exists():
        run_dir.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir.config, config_to_yaml(config))
    handler = _attach_log(run_dir)
    clock = StageClock(run_dir)
    try:
        started = time.perf_counter()
        logger.info("run %s: %s; cost model %s; %d threads", run_dir.path, ctx.space.describe(),
                    ctx.cost_model.name, config.threads)
        if isinstance(ctx.cost_model, LutCostModel):
            clock.start("latency correction")
            correct_for_this_machine(ctx.space, ctx.cost_model, config.cost.correct, config.cost.correction_archs,
                                     config.seed, run_dir)
        clock.start("supernet training and search")
        outcome = STRATEGIES[config.search.strategy][1](ctx)
        records = outcome.evaluate.records
        # the test split scores the front only, after the search (the search itself never looks at it)
        clock.start("test scoring")
        on_front = pareto_mask([r[ctx.task.metric] for r in records], [r["latency_ms"] for r in records])
        test_eval = CachedEvaluator(lambda arch: {"key": arch_key(arch), "test": outcome.evaluator.metric(arch, "test")},
                                    run_dir.test_journal)
        test_metrics = {r["key"]: round(test_eval(r["arch"])["test"], 4) for r, front in zip(records, on_front) if front}
        write_results(ctx, records, test_metrics)  # the searched front is on disk while finalisation runs
        clock.start("finalisation")
        finals = finalize(ctx, records, outcome.evaluator)
        clock.start("measuring the finalised archs")
        # measured beside predicted, for the report: kept out of candidates.csv, which the seed determines
        measured_beside_predicted(ctx, list({r["key"]: r for r in records if r["key"] in finals}.values()))
        rows = write_results(ctx, records, test_metrics, finals)
        clock.start("baselines")
        evaluate_baselines(ctx, outcome.evaluator)
        clock.save()
        build_report(run_dir, space=ctx.space)
        logger.info("run finished in %.0f s: %d archs, %d on the front; %s", time.perf_counter() - started,
                    len(rows), sum(r["is_pareto"] for r in rows), run_dir.candidates)
        return rows
    except KeyboardInterrupt:  # an interrupted session's time counts; an error's does not
        clock.save()
        raise
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
