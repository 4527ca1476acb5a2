"""Images/s on one GPU: the supernet's sandwich step, lockstep finalisation and one zoo network, each eager and
(where the project captures it) replayed as a CUDA graph; with --imagenet, the 224-px supernet on a JPEG folder
against timm's mobilenetv3_large_100 trained on the same batches. Every figure comes from this one run.

    python scripts/bench_gpu.py [CONFIG] [overrides ...] [--archs 8] [--steps 50] [--zoo mobilenetv4_conv_small]
    python scripts/bench_gpu.py --imagenet FOLDER [--loader-workers 12] [--seconds 60]

CONFIG defaults to the default run's (configs/fmnist_mobilenet.yaml); overrides as for `vpunas search`
(e.g. task.root=...). FOLDER is an ImageFolder (train/, val/), e.g. made by scripts/make_imagefolder.py. On a
machine without CUDA it runs on the CPU, where nothing is captured (a check of the script, not a figure).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import torch

from nas.baselines.trainer import FixedNetwork, StandaloneTrainer
from nas.config import load_config
from nas.training.finalize import LockstepTrainer
from nas.runtime import keep_freed_memory
from nas.context import build_task_and_space, resolve_device
from nas.training.supernet_training import SupernetTrainer, in_layout
from nas.baselines.zoo import zoo_network

REPO = Path(__file__).resolve().parents[1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_steps(step, batches, warmup: int, steps: int, device: torch.device) -> float:
    """Mean seconds of `step(x, y)` over `steps` batches after `warmup` untimed ones."""
    for x, y in itertools.islice(batches, warmup):
        step(x, y)
    _sync(device)
    started = time.perf_counter()
    for x, y in itertools.islice(batches, steps):
        step(x, y)
    _sync(device)
    return (time.perf_counter() - started) / steps


def _train_batches(task, channels_last: bool):
    """The task's training batches, epoch after epoch, in the memory format training uses."""
    for epoch in itertools.count():
        for _, x, y in task.train_batches(epoch):
            yield in_layout(x, channels_last), y


def _sandwich_step(space, task, config, device: torch.device, checkpoint: Path):
    """`step(x, y)`: one sandwich step of a fresh supernet of `space`, the archs of step 0, 1, ... in turn."""
    torch.manual_seed(0)
    trainer = SupernetTrainer(space, space.build_supernet(), task, config.train, 0, checkpoint, device=device)
    steps = itertools.count()
    return lambda x, y: trainer.train_step(x, y, trainer.step_archs(0, next(steps)))


def _row(what: str, mode: str, seconds: float, images: int) -> None:
    print(f"{what:<34} {mode:<9} {seconds * 1e3:9.2f} ms/step {images / seconds:12.0f} images/s", flush=True)


def bench_small(args, device: torch.device, work: Path) -> None:
    config = load_config(args.config, args.overrides)
    task, space = build_task_and_space(config)
    batch = task.train_batches.batch_size
    print(f"{config.name}: {space.describe()}; batch {batch}; {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'})", flush=True)

    sandwich = _sandwich_step(space, task, config, device, work / "supernet.pt")
    subnets = config.train.archs_per_step
    seconds = _timed_steps(sandwich, _train_batches(task, config.train.channels_last), 5, args.steps, device)
    _row(f"supernet sandwich ({subnets} subnets)", "eager", seconds, batch)

    final = config.search.finalize
    rng = __import__("numpy").random.default_rng(0)
    archs = space.spread_sample(args.archs, rng)
    for graphs in (False, True):
        torch.manual_seed(0)
        recipe = dataclasses.replace(config.train, cuda_graphs=graphs)
        lockstep = LockstepTrainer([space.fresh_network(a) for a in archs], None, task, recipe, final, 0,
                                   work / f"lockstep{graphs}.pt", [str(i) for i in range(len(archs))], device=device)
        step_s, _ = lockstep.time_steps(args.steps)
        mode = "captured" if lockstep.captured is not None else "eager"
        _row(f"finalisation, {len(archs)} archs in lockstep", mode, step_s, lockstep.batches.batch_size * len(archs))
        if graphs and lockstep.captured is None:
            print("  (not captured here: nothing to compare)")

    for graphs in (False, True):
        torch.manual_seed(0)
        net = zoo_network(args.zoo, task.input_shape, task.num_outputs)
        recipe = dataclasses.replace(config.train, cuda_graphs=graphs, ema_decay=0.0)
        standalone = StandaloneTrainer(space, FixedNetwork(net), task, recipe, 0, work / f"zoo{graphs}.pt",
                                       device=device)
        seconds = _timed_steps(lambda x, y: standalone.train_step(x, y, [{}]),
                               _train_batches(task, config.train.channels_last), 5, args.steps, device)
        _row(f"zoo {args.zoo}", "captured" if standalone.captured is not None else "eager", seconds, batch)


class _Utilisation:
    """nvidia-smi's GPU utilisation, sampled each second while inside."""

    def __init__(self):
        self.samples: list[int] = []
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                  "-i", "0"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip().isdigit():
                self.samples.append(int(out.stdout.strip()))

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True) if shutil.which("nvidia-smi") else None
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __str__(self) -> str:
        if not self.samples:
            return "GPU utilisation: not sampled (no nvidia-smi)"
        return (f"GPU utilisation over {len(self.samples)} s (nvidia-smi, each second): mean "
                f"{statistics.mean(self.samples):.0f} %, min {min(self.samples)} %, max {max(self.samples)} %")


def bench_imagenet(args, device: torch.device, work: Path) -> None:
    import timm

    overrides = [f"task.root={args.imagenet}", "task.val_size=1000", f"task.loader_workers={args.loader_workers}",
                 *args.overrides]
    config = load_config(REPO / "configs" / "imagenet_mobilenet.yaml", overrides)
    task, space = build_task_and_space(config)
    batch = task.train_batches.batch_size
    print(f"{config.name} on {args.imagenet}: {space.describe()}; batch {batch}; {args.loader_workers} loader "
          f"workers; {device}", flush=True)

    batches = task.train_batches
    started, count = time.perf_counter(), 0
    for _, x, _ in itertools.islice(batches(0), 20):
        count += len(x)
    print(f"loader alone: {count / (time.perf_counter() - started):.0f} images/s ({args.loader_workers} workers, "
          f"decode + random-resized crop + flip, workers' start included)", flush=True)

    sandwich = _sandwich_step(space, task, config, device, work / "supernet224.pt")
    data = _train_batches(task, config.train.channels_last)
    for x, y in itertools.islice(data, 3):  # warm-up
        sandwich(x, y)
    _sync(device)
    with _Utilisation() as utilisation:
        started, timed = time.perf_counter(), 0
        while time.perf_counter() - started < args.seconds:
            x, y = next(data)
            sandwich(x, y)
            timed += 1
        _sync(device)
        supernet_s = (time.perf_counter() - started) / timed
    subnets = config.train.archs_per_step
    _row(f"supernet 224 px ({subnets} subnets)", "eager", supernet_s, batch)
    print(f"  {timed} steps; {utilisation}", flush=True)

    torch.manual_seed(0)
    net = timm.create_model("mobilenetv3_large_100", num_classes=task.num_outputs).to(device)
    net = net.to(memory_format=torch.channels_last).train()
    optimizer = timm.optim.create_optimizer_v2(net, opt=config.train.opt, lr=config.train.lr,
                                               weight_decay=config.train.weight_decay, momentum=config.train.momentum)

    def timm_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = task.loss(net(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()

    timm_s = _timed_steps(timm_step, data, 3, max(10, timed), device)
    _row("timm mobilenetv3_large_100", "eager", timm_s, batch)
    print(f"supernet / timm images/s: {timm_s / supernet_s:.2f}x a batch; {subnets * timm_s / supernet_s:.2f}x a "
          f"network pass (the supernet's step trains {subnets} subnets on each batch, the largest about "
          f"mobilenetv3_large_100's size)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(REPO / "configs" / "fmnist_mobilenet.yaml"))
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--archs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--zoo", default="mobilenetv4_conv_small")
    parser.add_argument("--imagenet", metavar="FOLDER")
    parser.add_argument("--loader-workers", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    if "=" in args.config:  # overrides only: the default config
        args.overrides.insert(0, args.config)
        args.config = str(REPO / "configs" / "fmnist_mobilenet.yaml")
    keep_freed_memory()
    device = resolve_device("auto")
    with tempfile.TemporaryDirectory() as work:
        if args.imagenet:
            bench_imagenet(args, device, Path(work))
        else:
            bench_small(args, device, Path(work))


if __name__ == "__main__":
    main()
