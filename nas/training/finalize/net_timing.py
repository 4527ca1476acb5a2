"""Each lockstep net's share of a step, timed while the run budget measures the nets (`LockstepTrainer.time_steps`);
the training itself is never timed per net."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch


class NetClock:
    """Seconds each net's own work took, summed over the steps timed since `start`; off until then."""

    def __init__(self):
        self.seconds: list[float] | None = None

    def start(self, nets: int) -> None:
        self.seconds = [0.0] * nets

    @contextmanager
    def timed(self, i: int, synchronize: torch.device | None = None) -> Iterator[None]:
        """Adds the enclosed work's seconds to net `i` (after waiting for `synchronize`, a CUDA device, if given)."""
        if self.seconds is None:
            yield
            return
        started = time.perf_counter()
        yield
        if synchronize is not None:
            torch.cuda.synchronize(synchronize)
        self.seconds[i] += time.perf_counter() - started
