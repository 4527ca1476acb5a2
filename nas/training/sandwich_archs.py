"""Which archs the sandwich rule trains at a step: a top arch (the teacher of in-place distillation), a bottom arch,
and random archs.

`SpaceSandwich` spans the whole space: the largest arch, the smallest, uniform draws (BigNAS). `WindowSandwich`
spends the steps where the search looks, as AttentiveNAS trains the front (Wang et al., "AttentiveNAS", CVPR 2021):
its top arch is the largest arch within the search's latency limit (and a cap on its MACs, what it costs to
train), and its random archs are spread evenly over the
latency from the smallest arch to the limit. In a space whose largest arch lies far beyond the limit (the hybrid
space: 234 M MACs against a search up to 88 us on VPU 2.7) the largest arch costs most of every step and teaches
archs the search never looks at; uniform draws pile up in the middle of the latency range, where each choice's
independent values average out.

Both are deterministic: the window's pool is drawn from the run's seed, a step's random archs from (seed, epoch,
step), so a resumed run trains the same archs.
"""
from __future__ import annotations

import logging
from functools import cached_property
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from search_spaces import SearchSpace, arch_key

from ..randomness import RunRandom

logger = logging.getLogger(__name__)

__all__ = ["SandwichArchs", "SpaceSandwich", "WindowSandwich", "largest_within", "size_spread_sample"]


class SandwichArchs(Protocol):
    """The archs of a sandwich step: `top` and `bottom`, fixed, and `random(rng)` draws."""

    top: dict
    bottom: dict

    def random(self, rng: np.random.Generator) -> dict: ...


class SpaceSandwich:
    """The whole space: its largest arch, its smallest, uniform draws."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.top, self.bottom = space.largest(), space.smallest()

    def random(self, rng: np.random.Generator) -> dict:
        return self.space.sample(rng)


def size_spread_sample(space: SearchSpace, rng: np.random.Generator) -> dict:
    """An arch whose choices lean together toward small or large values: a share p is drawn uniformly, then each
    choice's value index from Binomial(values - 1, p). Each choice alone is still uniform over its values (a
    beta-binomial with uniform p), but the archs spread from the smallest corner to the largest instead of piling up
    in the middle as independent uniform choices do."""
    p = rng.random()
    return space.decode([rng.binomial(len(choice.values) - 1, p) for choice in space.choices])


def largest_within(space: SearchSpace, size: Callable[[dict], float],
                   limits: Sequence[tuple[Callable[[dict], float], float]]) -> dict:
    """The largest arch by `size` (e.g. parameters) within every (cost, limit) of `limits` (e.g. latency, MACs),
    greedily: from the space's largest arch, step one choice at a time one value down, each time the step that
    loses the least size per share of the excess costs it removes (each cost's excess over its limit, relative to
    the limit), until the arch fits. The smallest arch when no step gets closer."""

    def excess(arch: dict) -> float:
        return sum(max(0.0, cost(arch) - limit) / limit for cost, limit in limits)

    genes = space.encode(space.largest())
    over, current = excess(space.decode(genes)), size(space.decode(genes))
    while over > 0:
        best = None
        for i in np.flatnonzero(genes > 0):
            step = genes.copy()
            step[i] -= 1
            arch = space.decode(step)
            gained = over - excess(arch)
            if gained <= 0:
                continue  # a choice of a block the arch's depth skips, or one that costs nothing here
            smaller = size(arch)
            loss = (current - smaller) / gained
            if best is None or loss < best[0]:
                best = (loss, step, over - gained, smaller)
        if best is None:
            return space.smallest()
        _, genes, over, current = best
    return space.decode(genes)


class WindowSandwich:
    """The search's latency window (see the module docstring). The top arch has the most parameters within the
    latency limit and, with `top_macs`, within that many MACs (what a step of it costs to train: the arch with the
    most parameters within a latency limit on the NPU can have as many MACs as the space's largest, dense
    convolutions being cheap there). The random archs come from a pool of `size_spread_sample` draws within the
    limit, split into `bins` equal latency bins from the smallest arch's latency to the limit: a step draws a bin,
    then an arch of it.

    Args:
        space / latency_ms / params / macs: the space, an arch's latency on the run's cost model, its parameters
            and MACs.
        limit_ms: the search's latency limit.
        seed: the run's seed (the pool's draws).
        top_macs: the top arch's MACs at most (None: no cap).
        bins / pool: latency bins, and archs drawn for the pool.
    """

    def __init__(self, space: SearchSpace, latency_ms: Callable[[dict], float], params: Callable[[dict], float],
                 macs: Callable[[dict], float], limit_ms: float, seed: int, *, top_macs: Optional[float] = None,
                 bins: int = 8, pool: int = 4096):
        self.space, self._latency_ms, self._params, self._macs = space, latency_ms, params, macs
        self._top_limits = [(latency_ms, limit_ms)] + ([(macs, top_macs)] if top_macs is not None else [])
        self.bottom = space.smallest()
        rng = RunRandom(seed).numpy("sandwich.pool")
        archs: dict[str, tuple[dict, float]] = {}
        for _ in range(pool):
            arch = size_spread_sample(space, rng)
            latency = latency_ms(arch)
            if latency <= limit_ms:
                archs.setdefault(arch_key(arch), (arch, latency))
        low = latency_ms(self.bottom)
        edges = np.linspace(low, max(limit_ms, low), bins + 1)
        self.bins: list[list[dict]] = [[] for _ in range(bins)]
        for arch, latency in archs.values():
            self.bins[min(bins - 1, int(np.searchsorted(edges, latency, side="right")) - 1)].append(arch)
        self.bins = [members for members in self.bins if members] or [[self.bottom]]
        logger.info("sandwich within %.1f us: %d pool archs in %d latency bins", limit_ms * 1e3, len(archs),
                    len(self.bins))

    @cached_property
    def top(self) -> dict:
        """Found when first asked for (a greedy search of the space): a sandwich without fixed archs needs none."""
        top = largest_within(self.space, self._params, self._top_limits)
        logger.info("sandwich top arch: %.1f us, %.2fM MACs", self._latency_ms(top) * 1e3, self._macs(top) / 1e6)
        return top

    def random(self, rng: np.random.Generator) -> dict:
        members = self.bins[rng.integers(len(self.bins))]
        return members[rng.integers(len(members))]
