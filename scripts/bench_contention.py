"""Supernet training beside a busy process: steps/s alone, beside it with a fixed thread count, and beside it
with the thread governor (`nas.runtime.ThreadGovernor`, on by default), as ratios measured in one run.

    .venv/bin/python scripts/bench_contention.py [CONFIG] [--steps 40] [--threads N]

The neighbour is one process spinning on one core (another job on a shared machine). Target: with
the governor, training beside it is at most 2x slower than alone.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from nas.config import load_config
from nas.runtime import keep_freed_memory
from nas.context import build_task_and_space
from nas.training.supernet_training import SupernetTrainer


class _Enough(Exception):
    pass


def step_times(trainer: SupernetTrainer, steps: int, governed: bool, at_step: dict | None = None) -> list[float]:
    """Wall time of each of `steps` steps of the real training loop; `at_step[i]()` runs after step i."""
    times, last = [], [time.perf_counter()]

    def on_step(_):
        now = time.perf_counter()
        times.append(now - last[0])
        if len(times) in (at_step or {}):
            at_step[len(times)]()
        last[0] = time.perf_counter()
        if len(times) == steps:
            raise _Enough

    try:
        trainer.train(progress=False, on_step=on_step, adapt_threads=governed)
    except _Enough:
        pass
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(Path(__file__).parents[1] / "configs/fmnist_mobilenet.yaml"))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per setting")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    config = load_config(args.config, ["train.epochs=100"])  # a schedule that outlasts the timed steps
    task, space = build_task_and_space(config)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = SupernetTrainer(space, space.build_supernet(), task, config.train, config.seed,
                                  Path(tmp) / "supernet.pt")
        trainer.config.checkpoint_every = 10 ** 9  # time the steps, not the checkpoints
        print(f"{space.describe()}; batch {config.task.batch_size}, {args.threads} threads, "
              f"{os.cpu_count()} cores")
        alone = statistics.median(step_times(trainer, args.steps, governed=False)[3:])
        neighbours = []
        start_neighbour = lambda: neighbours.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        try:  # the neighbour arrives once the governor has measured the machine's pace
            pace_steps = 5 + 10 + 5
            governed_times = step_times(trainer, pace_steps + 20 + args.steps, governed=True,
                                        at_step={pace_steps: start_neighbour})
            governed = statistics.median(governed_times[-args.steps:])
            fixed = statistics.median(step_times(trainer, max(6, args.steps // 4), governed=False)[2:])
        finally:
            for process in neighbours:
                process.kill()
    print(f"{'setting':<36} {'ms/step':>8} {'steps/s':>8} {'vs alone':>9}")
    for name, seconds in (("alone", alone), ("beside a busy process, fixed threads", fixed),
                          ("beside a busy process, governed", governed)):
        print(f"{name:<36} {seconds * 1e3:8.0f} {1 / seconds:8.2f} {seconds / alone:8.2f}x")


if __name__ == "__main__":
    main()
