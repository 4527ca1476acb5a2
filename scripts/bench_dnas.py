"""Time of one differentiable search step vs one plain supernet training step, measured in one run.

    .venv/bin/python scripts/bench_dnas.py [CONFIG] [--steps 10] [--threads 1]

A search step is a weight step plus an architecture step (`DifferentiableSearch.weight_step` + `arch_step`,
each one forward + backward of the relaxed supernet); a plain step is `SupernetTrainer.train_step` with the
sandwich rule (largest, smallest and `train.sandwich_random` random archs). Both run on the same batch of the
config's training data, alternating so that load on a shared machine hits both alike. Prints the median CPU
time (time.process_time) of each, per relaxation, and their ratio (target: at most 2.5x).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hw_cost import load_cost_model
from nas.config import load_config
from nas.runtime import keep_freed_memory
from nas.strategies.differentiable import RELAXATIONS, DifferentiableConfig, DifferentiableSearch
from nas.context import build_task_and_space
from nas.training.supernet_training import SupernetTrainer


def cpu_time(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(Path(__file__).parents[1] / "configs/fmnist_mobilenet.yaml"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the vpunas command does

    config = load_config(args.config)
    task, space = build_task_and_space(config)
    cost_model = load_cost_model(config.cost.model, **config.cost.options())
    _, x, y = next(task.train_batches(0))
    if config.train.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        plain = SupernetTrainer(space, space.build_supernet(), task, config.train, config.seed, Path(tmp) / "x.pt")
    archs = plain.step_archs(0, 0)
    print(f"{space.describe()}; batch {len(x)}, {args.threads} thread(s), {args.steps} timed steps each; "
          f"plain step = sandwich rule over {len(archs)} archs")
    print(f"{'relaxation':<11} {'search step ms':>15} {'plain step ms':>14} {'ratio':>7}")
    for relaxation in RELAXATIONS:
        search_config = DifferentiableConfig(relaxation=relaxation, warmup_epochs=0)
        dnas = DifferentiableSearch(space, task, cost_model, config.train, search_config, config.seed)

        def search_step(step: int) -> None:
            dnas.weight_step(x, y, dnas.sample_gates(step, 0))
            dnas.arch_step(x, y, dnas.sample_gates(step, 1))

        for step in range(2):  # warm-up
            search_step(step)
            plain.train_step(x, y, archs)
        t_search, t_plain = [], []
        for step in range(args.steps):
            t_search.append(cpu_time(lambda: search_step(step)))
            t_plain.append(cpu_time(lambda: plain.train_step(x, y, archs)))
        s, p = statistics.median(t_search) * 1e3, statistics.median(t_plain) * 1e3
        print(f"{relaxation:<11} {s:15.1f} {p:14.1f} {s / p:6.2f}x")


if __name__ == "__main__":
    main()
