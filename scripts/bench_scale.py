"""Throughput of one process against two (torch.distributed, gloo on the CPU), as `torchrun` runs a search.

    .venv/bin/python scripts/bench_scale.py [CONFIG] [--steps 16] [--archs 8] [--threads 1]

Supernet training: sandwich-rule steps on the config's batches (each process trains on its share of every
batch, gradients and batch-norm statistics synchronised), in images per second. Candidate evaluation: random
archs of the space scored as the evolution scores them (extracted, batch norm recalibrated, val top-1, latency),
spread over the processes, in archs per second. Each measurement starts its processes afresh (after a warm-up
step or arch); `--threads` torch threads per process.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from hw_cost import load_cost_model
from nas.config import load_config
from nas.distributed import Distributed
from nas.training.evaluation import ArchEvaluator
from nas.runtime import keep_freed_memory
from nas.context import build_task_and_space
from nas.training.supernet_training import SupernetTrainer, in_layout


def _batches(task):
    """(epoch, step, images, labels) of the training split, epoch after epoch."""
    for epoch in itertools.count():
        for step, x, y in task.train_batches(epoch):
            yield epoch, step, x, y


def _measure(rank: int, world: int, args: argparse.Namespace, folder: str) -> None:
    """Rank 0 writes {"train_images_per_s", "eval_archs_per_s"} to folder/result.json."""
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the vpunas command does
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                                             world_size=world)
    dist = Distributed(rank=rank, world_size=world)
    config = load_config(args.config)
    task, space = build_task_and_space(config)
    torch.manual_seed(config.seed)
    trainer = SupernetTrainer(space, space.build_supernet(), task, config.train, config.seed,
                              Path(folder) / f"unused{world}.pt", dist=dist)
    batches = _batches(task)
    timed = images = 0.0
    for i in range(args.steps + 1):  # the first step warms up
        epoch, step, x, y = next(batches)
        x = in_layout(x, config.train.channels_last)
        dist.barrier()
        started = time.perf_counter()
        trainer.train_step(x, y, trainer.step_archs(epoch, step))
        if i:
            timed, images = timed + time.perf_counter() - started, images + len(x)
    cost_model = load_cost_model(config.cost.spec, **config.cost.options())
    evaluator = ArchEvaluator(space, trainer.supernet, task, cost_model, config.train.channels_last)
    archs = space.spread_sample(args.archs + world, np.random.default_rng([config.seed, 5]))
    dist.map(evaluator.evaluate, archs[:world])  # one warm-up arch per process
    dist.barrier()
    started = time.perf_counter()
    dist.map(evaluator.evaluate, archs[world:])
    eval_seconds = time.perf_counter() - started
    if dist.is_main:
        result = {"train_images_per_s": images / timed, "eval_archs_per_s": args.archs / eval_seconds}
        (Path(folder) / "result.json").write_text(json.dumps(result))
    if world > 1:
        torch.distributed.destroy_process_group()


def run(world: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_measure, args=(world, args, folder), nprocs=world, join=True)
        return json.loads((Path(folder) / "result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?",
                        default=str(Path(__file__).parents[1] / "configs/fmnist_mobilenet_smoke.yaml"))
    parser.add_argument("--steps", type=int, default=16, help="timed training steps")
    parser.add_argument("--archs", type=int, default=8, help="timed arch evaluations")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args()
    config = load_config(args.config)
    print(f"{args.config}: batch {config.task.batch_size}, {args.steps} timed steps of "
          f"{config.train.archs_per_step} archs; {args.archs} timed arch evaluations "
          f"({config.task.calib_images} calibration, {config.task.eval_images or 'all'} val images); "
          f"{args.threads} thread(s) per process; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    one, two = run(1, args), run(2, args)
    print(f"{'':<28} {'1 process':>10} {'2 processes':>12} {'ratio':>7}")
    for key, label in (("train_images_per_s", "supernet training, img/s"), ("eval_archs_per_s", "evaluation, archs/s")):
        print(f"{label:<28} {one[key]:10.2f} {two[key]:12.2f} {two[key] / one[key]:6.2f}x")


if __name__ == "__main__":
    main()
