"""The lockstep nets trained side by side: one net per thread on the CPU, each single-threaded, with dropout
masks from generators of their own so that no thread count or schedule changes a net's results."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
import torch.nn as nn

from ...randomness import RunRandom
from ..supernet_training import modules_swapped
from .net_timing import NetClock


class SeededDropout(nn.Dropout):
    """`nn.Dropout` whose masks come from a generator of its own (seeded step by step by `NetThreads`)."""

    def __init__(self, p: float, device: torch.device):
        super().__init__(p)
        self.generator = torch.Generator(device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return torch.zeros_like(x)
        keep = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator)
        return x * keep * (1 / (1 - self.p))


class NetThreads:
    """Runs per-net work of a lockstep step on threads while `side_by_side`, else one net after the other.

    Args:
        device: where the nets train (one thread per net on the CPU, one net at a time on a GPU).
        graphs: the nets' steps are CUDA graph replays, whose dropouts draw from the default CUDA generator.
        clock: times each net's work when started (`NetClock`).
    """

    def __init__(self, device: torch.device, graphs: bool, clock: NetClock):
        self.device, self.graphs, self.clock = device, graphs, clock
        self.workers = 1  # nets at once (the thread governor's setting)
        self._pool: ThreadPoolExecutor | None = None
        self._dropouts: list[list[SeededDropout]] = []  # per net, while side by side

    def nets_at_once(self) -> int:
        """How many nets `side_by_side` trains at once: one per torch thread on the CPU, one on a GPU (it runs one
        net at a time anyway)."""
        return torch.get_num_threads() if self.device.type == "cpu" else 1

    def use_workers(self, n: int) -> None:
        """The thread governor's setting: `n` nets train at once (each on one thread)."""
        self.workers = n

    def each_net(self, fn: Callable[[int], object], indices: Sequence[int]) -> list:
        """`fn(i)` for each net of `indices`, on `workers` threads when there are several; costliest nets (the
        last: they come sorted by latency) first, so the threads finish together."""
        def timed(i: int):
            with self.clock.timed(i):
                return fn(i)

        order = sorted(indices, reverse=True)
        if self._pool is not None and self.workers > 1:
            done = dict(zip(order, self._pool.map(timed, order)))
        else:
            done = {i: timed(i) for i in order}
        return [done[i] for i in indices]

    def started(self, fn: Callable, *args) -> Future:
        """`fn(*args)` on a worker thread when nets train side by side, else done here and now."""
        if self._pool is not None and self.workers > 1:
            return self._pool.submit(fn, *args)
        done = Future()
        done.set_result(fn(*args))
        return done

    @contextmanager
    def side_by_side(self, nets: Sequence[nn.Module]) -> Iterator[None]:
        """Train `nets` on torch's threads one net per thread, each net single-threaded, instead of every net on all
        threads in turn: these small nets leave much of a parallel region idle.
        A net's results then depend on no thread count or schedule. The nets' dropouts draw from generators of
        their own (`seed_dropouts`), as threads sharing torch's generator would draw in no fixed order."""
        cores = self.nets_at_once()
        def seeded(child: nn.Module) -> SeededDropout | None:
            if self.graphs:  # graphs draw from the default generator (`seed_dropouts`)
                return None
            return SeededDropout(child.p, self.device).train(child.training) if type(child) is nn.Dropout else None

        with modules_swapped(nets, seeded) as self._dropouts:
            self._pool, self.workers = ThreadPoolExecutor(cores), cores
            torch.set_num_threads(1)
            try:
                yield
            finally:
                torch.set_num_threads(cores)
                self._pool.shutdown()
                self._pool, self.workers, self._dropouts = None, 1, []

    def seed_dropouts(self, random: RunRandom, epoch: int, step: int) -> None:
        """Seed each net's dropouts for step `step` of epoch `epoch` from the run's stream `finalize.dropout`
        (inside `side_by_side`); captured steps draw from the default CUDA generator, seeded here."""
        if self.graphs:
            torch.cuda.manual_seed(random.seed_of("finalize.dropout", epoch, step))
        for i, dropouts in enumerate(self._dropouts):
            for j, dropout in enumerate(dropouts):
                dropout.generator.manual_seed(random.seed_of("finalize.dropout", epoch, step, i, j))
