"""Random search over a space: the baseline a search strategy has to beat at equal budget.

Random sampling is a strong baseline for weight-sharing NAS (Li & Talwalkar, "Random Search and Reproducibility
for Neural Architecture Search", 2019; Yang et al., "NAS evaluation is frustratingly hard", 2020). Two samplers:
`uniform` draws archs uniformly from the space (each choice independently); `latency_bins` first draws a pool of
uniform archs, splits its latency range into equal bins and takes archs from the bins in turn, so that fast and slow
archs are as common as middle ones (uniform sampling of a MobileNet space piles up in the middle of the latency
range, where a front has few points). Both keep only archs within the latency limit, as a constrained search's front
does, and never draw an arch twice. Deterministic for a random stream, so a resumed run draws the same archs.
`sample_archs` draws them; `RandomStrategy` (registered as `random`) scores them on the run's trained supernet.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from search_spaces import SearchSpace, arch_key

from ..errors import check_bounds
from .registry import register_strategy
from .sandwich import FrontSettings, SandwichStrategy, trained_supernet_scoring
from .strategy import SearchOutcome

logger = logging.getLogger(__name__)

__all__ = ["RandomConfig", "RandomStrategy", "sample_archs", "SAMPLERS"]

SAMPLERS = ("uniform", "latency_bins")


@dataclass
class RandomConfig(FrontSettings):
    """Args:
        archs: archs scored with inherited weights (the default evolution's budget: 20 x 8 = 160).
        sampling: "uniform" (from the space) or "latency_bins" (equal shares of the latency range).
        bins: latency bins of `latency_bins`.
        pool: uniform archs drawn per arch to fill the bins of `latency_bins`.
        latency_limit_ms / extra_objectives: see `nas.strategies.sandwich.FrontSettings` (archs slower than the
            limit are not drawn).
    """

    archs: int = 160
    sampling: str = "uniform"
    bins: int = 8
    pool: int = 10

    def __post_init__(self):
        super().__post_init__()
        check_bounds(self, at_least={"archs": 2, "bins": 1, "pool": 1})
        if self.sampling not in SAMPLERS:
            raise ValueError(f"sampling: {self.sampling!r} is not one of {', '.join(SAMPLERS)}")


def _distinct_uniform(space: SearchSpace, n: int, rng: np.random.Generator,
                      accept: Callable[[dict], bool]) -> list[dict]:
    """Up to `n` distinct archs drawn uniformly and accepted by `accept` (fewer when the space runs out)."""
    seen, archs = set(), []
    for _ in range(50 * n):
        arch = space.sample(rng)
        key = arch_key(arch)
        if key not in seen:
            seen.add(key)
            if accept(arch):
                archs.append(arch)
                if len(archs) == n:
                    break
    return archs


def sample_archs(space: SearchSpace, config: RandomConfig, latency_ms: Callable[[dict], float],
                 rng: np.random.Generator) -> list[dict]:
    """The archs a random search of `config` scores, in order, drawn from `rng`."""
    limit = config.latency_limit_ms
    latency_of: dict[str, float] = {}

    def feasible(arch: dict) -> bool:
        latency_of[arch_key(arch)] = latency_ms(arch)
        return limit is None or latency_of[arch_key(arch)] <= limit

    if config.sampling == "uniform":
        return _distinct_uniform(space, config.archs, rng, feasible)
    pool = _distinct_uniform(space, config.pool * config.archs, rng, feasible)
    latencies = np.array([latency_of[arch_key(a)] for a in pool])
    edges = np.linspace(latencies.min(), latencies.max(), config.bins + 1)
    bin_of = np.clip(np.searchsorted(edges, latencies, side="right") - 1, 0, config.bins - 1)
    members = [list(rng.permutation(np.flatnonzero(bin_of == b))) for b in range(config.bins)]
    chosen = []
    for b in itertools.cycle(range(config.bins)):
        if len(chosen) == config.archs or not any(members):
            break
        if members[b]:
            chosen.append(pool[members[b].pop()])
    return chosen


@register_strategy
class RandomStrategy(SandwichStrategy):
    """Supernet training with the sandwich rule (as the evolution's), then `archs` random archs scored on inherited
    weights (`sample_archs`): the baseline of `scripts/bench_search.py`. One generation; a resumed run draws the
    same archs and serves the scored ones from the journal."""

    name = "random"
    config_class = RandomConfig

    def run(self) -> SearchOutcome:
        from tqdm import tqdm

        ctx = self.ctx
        evaluator, evaluate = trained_supernet_scoring(ctx)
        archs = sample_archs(ctx.space, self.settings, ctx.latency_ms, ctx.random.numpy("random.archs"))
        with tqdm(total=len(archs), desc="random search", unit="arch", disable=not ctx.progress,
                  dynamic_ncols=True) as bar:
            evaluate.evaluate_all(archs, on_record=lambda: bar.update(1), generation=0)
        self._generation_done(evaluate.records)
        logger.info("random search (%s): %d archs evaluated (%d new in this session)", self.settings.sampling,
                    len(evaluate.records), evaluate.new_evaluations)
        return SearchOutcome(evaluate, evaluator)
