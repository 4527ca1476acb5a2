"""Training-step time of the supernet running an arch vs the same arch as a standalone module.

    .venv/bin/python scripts/bench_supernet.py [CONFIG] [--steps 20] [--batch 128] [--threads 1]

For the largest and the smallest arch of the config's space, times forward + backward + SGD step on one batch,
alternating supernet and standalone steps so that load on a shared machine hits both alike; prints the
medians and their ratio (target: at most 1.3x).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from nas.config import load_config
from nas.runtime import keep_freed_memory
from nas.context import build_task_and_space
from nas.training.supernet_training import in_layout, to_channels_last


def step_time(model, x, y, optimizer) -> float:
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(Path(__file__).parents[1] / "configs/fmnist_mobilenet.yaml"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the vpunas command does
    torch.manual_seed(0)

    config = load_config(args.config)
    task, space = build_task_and_space(config)
    supernet = space.build_supernet().train()
    if config.train.channels_last:
        to_channels_last(supernet)
    x = in_layout(torch.randn(args.batch, *task.input_shape), config.train.channels_last)
    y = torch.randint(0, task.num_outputs, (args.batch,))
    print(f"{space.describe()}; batch {args.batch}, {args.threads} thread(s), {args.steps} timed steps each, "
          f"channels_last={config.train.channels_last}")
    print(f"{'arch':<10} {'supernet ms':>12} {'standalone ms':>14} {'ratio':>7}")
    for name in ("largest", "smallest"):
        arch = getattr(space, name)()
        supernet.set_active(arch)
        standalone = supernet.extract(arch).train()
        if config.train.channels_last:
            to_channels_last(standalone)
        opt_super = torch.optim.SGD(supernet.parameters(), lr=1e-3, momentum=0.9)
        opt_alone = torch.optim.SGD(standalone.parameters(), lr=1e-3, momentum=0.9)
        for _ in range(3):  # warm-up
            step_time(supernet, x, y, opt_super)
            step_time(standalone, x, y, opt_alone)
        t_super, t_alone = [], []
        for _ in range(args.steps):
            t_super.append(step_time(supernet, x, y, opt_super))
            t_alone.append(step_time(standalone, x, y, opt_alone))
        s, a = statistics.median(t_super) * 1e3, statistics.median(t_alone) * 1e3
        print(f"{name:<10} {s:12.1f} {a:14.1f} {s / a:6.2f}x")


if __name__ == "__main__":
    main()
