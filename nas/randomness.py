"""The random streams of a run, all derived from its seed in one place (`RunRandom`, `STREAMS`).

A stream is named in `STREAMS` with its salt; the generator of a stream at counters (an epoch, a step) is seeded by
`SeedSequence([seed, *counters, salt])`, so each stream is independent of the others and of how far the others
have been drawn, and a resumed run draws the same numbers from the step it resumes at. The salts are part of every
run's results: changing one changes the archs a run draws.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["RunRandom", "STREAMS"]

#: the named streams and their salts. Two streams share a salt where they have always done so (the runs' results
#: depend on it): the evolution's initial archs and the differentiable search's split of the training images (never
#: in one run), and the random search's archs and the probe set's (the same latency-binned sampler).
STREAMS: dict[str, int] = {
    "evolution.initial_archs": 11,  # the first generation beyond the largest and the smallest arch
    "random.archs": 31,  # the archs of the random strategy
    "probe.archs": 31,  # the probe set that rates the supernet's ranking
    "differentiable.split": 11,  # the training images of weight steps vs architecture steps
    "differentiable.weight_gates": 0,  # the gates of a weight step, by (step)
    "differentiable.arch_gates": 1,  # the gates of an architecture step, by (step)
    "sandwich.archs": 7,  # the random archs of a supernet training step, by (epoch, step)
    "sandwich.pool": 41,  # the pool of archs a supernet trained within a latency window draws from
    "lut_correction.archs": 23,  # the networks measured to check a latency table on this machine
    "sandwich.noise": 53,  # torch's own draws (dropout) in a supernet training step, by (epoch, step)
    "finalize.dropout": 59,  # each finalised net's dropouts in a lockstep step, by (epoch, step[, net, dropout])
    "differentiable.arch_batches": 61,  # the order of the architecture steps' batches
    "differentiable.noise": 67,  # torch's own draws in a search step, by (epoch, step)
    "differentiable.finetune_noise": 71,  # torch's own draws in a fine-tuning step, by (epoch, step)
}


class RunRandom:
    """The random streams of a run of seed `seed` (see the module docstring)."""

    def __init__(self, seed: int):
        self.seed = seed

    def _entropy(self, stream: str, counters: tuple[int, ...]) -> list[int]:
        if stream not in STREAMS:
            raise KeyError(f"random stream {stream!r} is not one of {', '.join(STREAMS)}")
        return [self.seed, *counters, STREAMS[stream]]

    def numpy(self, stream: str, *counters: int) -> np.random.Generator:
        """A numpy generator of `stream` at `counters` (e.g. epoch, step)."""
        return np.random.default_rng(self._entropy(stream, counters))

    def seed_of(self, stream: str, *counters: int) -> int:
        """A seed (a non-negative int63) of `stream` at `counters`, for what takes a seed: torch's global
        generators, a module's own generator, a batch order."""
        return int(np.random.SeedSequence(self._entropy(stream, counters)).generate_state(1, dtype=np.uint64)[0] >> 1)

    def torch(self, stream: str, *counters: int) -> torch.Generator:
        """A torch generator (CPU) of `stream` at `counters`."""
        return torch.Generator().manual_seed(self.seed_of(stream, *counters))
