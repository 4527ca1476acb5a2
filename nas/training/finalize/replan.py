"""Holding finalisation to the run budget while it trains: the plan's timing (`PlanTiming`) models a lockstep
step, and `Replanner` compares the steps' wall time with it as the training goes, shortening the schedules of the
archs still training when the run would end past its budget (a machine slower than when the plan was timed, e.g.
beside another busy process)."""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

#: re-plan this often: a twentieth of an epoch, the default run's half a minute
CHECKS_PER_EPOCH = 20
#: the pace is that of the steps of this many checks back (of the session), so that one slow stretch (a
#: checkpoint, a burst of other work) does not cut the plan for good
PACE_CHECKS = 4


def planned_seconds(net_steps: Sequence[int], net_seconds: Sequence[float], step_seconds: float,
                    workers: int, start: int = 0) -> float:
    """Training time of a lockstep plan whose nets stop at `net_steps`, from step `start` on. A step costs its
    nets' work shared among `workers` threads (the longest net's at least), plus what else a step of all nets
    took beyond theirs (`step_seconds` as timed with all of them: loading the batch, waiting on threads)."""
    def busy(seconds: Sequence[float]) -> float:
        return max(sum(seconds) / workers, max(seconds))

    rest = max(0.0, step_seconds - busy(net_seconds))
    total, done = 0.0, start
    for end in sorted(s for s in set(net_steps) if s > start):
        training = [c for c, steps in zip(net_seconds, net_steps) if steps >= end]
        total += (end - done) * (rest + busy(training))
        done = end
    return total


@dataclass
class PlanTiming:
    """What a budgeted plan was fitted to, kept with the plan so that every session of the run re-plans alike.

    Args:
        step_seconds: one lockstep step of all the plan's nets.
        net_seconds: each net's own work in it.
        workers: nets that train at once (threads).
        scoring_seconds: scoring the finalised archs after their training.
        after_seconds: the run's stages after finalisation (the baselines' scoring, the report).
    """

    step_seconds: float
    net_seconds: list[float]
    workers: int
    scoring_seconds: float
    after_seconds: float

    def training_seconds(self, net_steps: Sequence[int], start: int = 0) -> float:
        return planned_seconds(net_steps, self.net_seconds, self.step_seconds, self.workers, start)


class Replanner:
    """Every `every` steps of a lockstep training, the pace of the steps of the last `PACE_CHECKS` checks (their
    wall time over what `timing` gives them) predicts the time the rest of the schedules and the scoring after
    them take; when the run would end after `ends_at` (a `time.perf_counter()` reading), the schedules of the
    nets still training shrink by one factor, each to no fewer steps than it has trained, until it would not
    (all of them stop where they are if nothing else fits). The plan keeps its shape: the split of the time by
    step cost.

    `record(net_steps)` is called with each new schedule once the training's checkpoint holds it."""

    def __init__(self, timing: PlanTiming, ends_at: float, every: int, record: Callable[[list[int]], None]):
        self.timing, self.ends_at, self.every, self.record = timing, ends_at, max(1, every), record
        self._checks: deque[tuple[float, int, float]] = deque(maxlen=PACE_CHECKS + 1)

    def start(self, global_step: int) -> None:
        """A session's training starts at `global_step`: its pace is timed from here."""
        self._checks.clear()
        self._checks.append((time.perf_counter(), global_step, 0.0))

    def shortened(self, net_steps: Sequence[int], global_step: int) -> list[int] | None:
        """The nets' new schedules (steps) at `global_step` when the run is late; None when it is on time or no
        check is due."""
        if global_step - self._checks[-1][1] < self.every:
            return None
        now, from_step = time.perf_counter(), self._checks[-1][1]
        modelled = (self.timing.training_seconds(net_steps, from_step)
                    - self.timing.training_seconds(net_steps, global_step))  # the steps since the last check
        self._checks.append((now, global_step, modelled))
        (since, _, _), *windows = self._checks  # each check's modelled seconds are those of the steps before it
        pace = (now - since) / max(sum(m for _, _, m in windows), 1e-9)
        seconds_left = self.ends_at - now - pace * (self.timing.scoring_seconds + self.timing.after_seconds)

        def fits(steps: Sequence[int]) -> bool:
            return pace * self.timing.training_seconds(steps, global_step) <= seconds_left

        def scaled(factor: float) -> list[int]:
            return [s if s <= global_step else max(global_step, math.floor(s * factor)) for s in net_steps]

        if fits(net_steps):
            return None
        low, high = 0.0, 1.0  # scaled(high) does not fit
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if fits(scaled(middle)) else (low, middle)
        shortened = scaled(low)
        return None if shortened == list(net_steps) else shortened
