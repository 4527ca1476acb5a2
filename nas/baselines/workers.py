"""Cached baselines trained beside the search, in worker processes: for a GPU.

Small networks leave a GPU mostly idle: a training step of a 28-px net waits on kernel launches, not on the
arithmetic. With `baseline_workers: N` (e.g. `device=cuda baseline_workers=8`), the run starts N worker processes
(spawned) as soon as
its directory exists; they share out the `reference` and `zoo` baselines the cache does not hold yet and train each
exactly as the run's own process would (`nas.baselines.train_cached_baseline`: the same recipe, batches, seed,
and checkpoint under checkpoint/), storing it in the baseline cache, while the run trains and searches its
supernet on the same GPU. The baselines stage waits for them and then finds every network in the cache. On a
CPU the workers share its cores with the search (each takes cores / (N + 1) threads): worth it only where
cores are to spare.

A worker that fails is logged with its exit status, and the baselines it did not finish are trained by the run's
own process, where an error shows as any other. An interrupted run stops its workers (SIGTERM: each checkpoints
its current step, as the run does), and `--resume` continues them.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path

import torch

from ..baseline_entries import ReferenceBaseline, ZooBaseline
from ..config import load_config
from ..context import build_context
from ..rundir import RunDir
from ..search_context import SearchContext
from .cached_networks import CACHED_TYPES, cached_baseline_path, train_cached_baseline

logger = logging.getLogger(__name__)

__all__ = ["BaselineWorkers"]


def _work(run_path: str, baselines: list[ReferenceBaseline | ZooBaseline], threads: int, index: int,
          device: str) -> None:
    """A worker process: the run's context rebuilt from its config.yaml on the run's `device`, then each of
    `baselines` trained and cached."""
    run_dir = RunDir(run_path)
    handler = logging.FileHandler(run_dir.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s baseline-worker-{index} %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    config = load_config(run_dir.config)
    config.threads = threads
    ctx = build_context(config, run_dir, torch.device(device), progress=False)
    for baseline in baselines:
        train_cached_baseline(ctx, baseline)


class BaselineWorkers:
    """The worker processes of a run, started at construction (none where they do not apply); `wait` at the
    baselines stage, `stop` when the run ends otherwise."""

    def __init__(self, ctx: SearchContext):
        self.ctx = ctx
        self.processes: list[tuple[multiprocessing.Process, list[str]]] = []
        wanted = ctx.config.baseline_workers
        if not wanted or not ctx.dist.is_main or ctx.dist.enabled:
            return
        untrained: list[ReferenceBaseline | ZooBaseline] = [
            b for b in ctx.config.baselines
            if b.type in CACHED_TYPES and b.trained_here and not cached_baseline_path(ctx, b).exists()]
        if not untrained:
            return
        count = min(wanted, len(untrained))
        threads = max(1, (os.cpu_count() or 1) // (count + 1))
        spawn = multiprocessing.get_context("spawn")
        for index in range(count):
            share = untrained[index::count]
            process = spawn.Process(target=_work, name=f"baseline-worker-{index}", daemon=False,
                                    args=(str(Path(ctx.run_dir.path)), share, threads, index, str(ctx.device)))
            process.start()
            self.processes.append((process, [b.name for b in share]))
        logger.info("baseline workers: %d processes (%d threads each) train %s beside the search", count, threads,
                    ", ".join(b.name for b in untrained))

    def wait(self) -> None:
        """Until every worker has ended; a failed one is logged (its baselines are then trained in this
        process, from their checkpoints)."""
        for process, names in self.processes:
            process.join()
            if process.exitcode != 0:
                logger.warning("baseline worker %s ended with exit status %s; %s will train in the run's process",
                               process.name, process.exitcode, ", ".join(names))
        self.processes = []

    def stop(self) -> None:
        """SIGTERM to the workers still running (each checkpoints its step and ends), then wait for them."""
        for process, _ in self.processes:
            if process.is_alive():
                process.terminate()
        for process, _ in self.processes:
            process.join()
        self.processes = []
