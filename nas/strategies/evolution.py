"""Multi-objective evolutionary search: NSGA-II (pymoo) over (task metric, latency[, MACs, params]).

Deb et al., "A Fast and Elitist Multiobjective Genetic Algorithm: NSGA-II", IEEE TEC 2002. Architectures are
integer genes (one choice index per searched decision, `SearchSpace.encode`); crossover is SBX and mutation
polynomial, both rounded to integers with a low distribution index (3) so that a mutation moves a choice, as
pymoo recommends for integer variables. An optional latency limit is
an inequality constraint (constraint-domination). Extra objectives (`extra_objectives`) are minimised beside
latency: MACs stand for the cost on a second device the model will also run on, e.g. the CPU that OpenVINO's
AUTO device runs a model on while the NPU compiles it (on the CPU, latency follows MACs within a few percent in
the default space, see the README).

The strategy is deterministic for a seed and the evaluations it is given. It therefore needs no state of its
own to resume: the run replays it from the start with every finished evaluation served from the journal.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from search_spaces import SearchSpace

logger = logging.getLogger(__name__)

__all__ = ["EvolutionConfig", "EvolutionStrategy", "EXTRA_OBJECTIVES"]

#: record fields an evolution can minimise beside latency
EXTRA_OBJECTIVES = ("macs", "params")


@dataclass
class EvolutionConfig:
    """Args:
        population: archs per generation (the initial one holds the largest and the smallest arch).
        generations: generations including the initial one.
        crossover_prob / crossover_eta: SBX probability and distribution index.
        mutation_eta: polynomial-mutation distribution index (each gene mutates with probability 1/n_genes).
        latency_limit_ms: archs slower than this are infeasible (constraint-domination); None = no limit.
        extra_objectives: record fields minimised beside latency ("macs", "params"); finalisation then spreads
            its archs over the cost range of every objective (`nas.training.finalize.select_spread`).
    """

    population: int = 24
    generations: int = 10
    crossover_prob: float = 0.9
    crossover_eta: float = 3.0
    mutation_eta: float = 3.0
    latency_limit_ms: Optional[float] = None
    extra_objectives: list = field(default_factory=list)

    def __post_init__(self):
        if self.population < 4:
            raise ValueError("population: must be >= 4")
        if self.generations < 1:
            raise ValueError("generations: must be >= 1")
        if not 0 <= self.crossover_prob <= 1:
            raise ValueError("crossover_prob: must be in [0, 1]")
        if self.latency_limit_ms is not None and self.latency_limit_ms <= 0:
            raise ValueError("latency_limit_ms: must be > 0")
        unknown = [o for o in self.extra_objectives if o not in EXTRA_OBJECTIVES]
        if unknown or len(set(self.extra_objectives)) < len(self.extra_objectives):
            raise ValueError(f"extra_objectives: {list(self.extra_objectives)} is not a list of distinct "
                             f"{', '.join(EXTRA_OBJECTIVES)}")

    @property
    def costs(self) -> tuple[str, ...]:
        """The record fields minimised: latency first, then the extra objectives."""
        return ("latency_ms", *self.extra_objectives)


class EvolutionStrategy:
    """NSGA-II as an ask/tell loop around an `evaluate(arch) -> record` function.

    A record holds the metric under `metric` (higher is better) and `latency_ms`.
    """

    def __init__(self, space: SearchSpace, config: EvolutionConfig, metric: str, seed: int):
        self.space, self.config, self.metric, self.seed = space, config, metric, seed

    def _algorithm(self):
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.duplicate import DefaultDuplicateElimination
        from pymoo.operators.crossover.sbx import SBX
        from pymoo.operators.mutation.pm import PM
        from pymoo.operators.repair.rounding import RoundingRepair

        space = self.space
        # genes of archs: two gene vectors are duplicates when they decode to the same arch
        canonical = lambda pop: np.stack([space.encode(space.decode(np.rint(x).astype(np.int64)))
                                          for x in pop.get("X")]).astype(float)
        return NSGA2(pop_size=self.config.population, sampling=self._initial_genes(),
                     crossover=SBX(prob=self.config.crossover_prob, eta=self.config.crossover_eta, vtype=float,
                                   repair=RoundingRepair()),
                     mutation=PM(eta=self.config.mutation_eta, vtype=float, repair=RoundingRepair()),
                     eliminate_duplicates=DefaultDuplicateElimination(func=canonical))

    def _initial_genes(self) -> np.ndarray:
        """Largest, smallest, then distinct random archs (drawn from the seed)."""
        archs = self.space.spread_sample(self.config.population, np.random.default_rng([self.seed, 11]))
        return np.stack([self.space.encode(a) for a in archs]).astype(float)

    def _problem(self):
        from pymoo.core.problem import Problem

        n_constr = 1 if self.config.latency_limit_ms is not None else 0
        return Problem(n_var=len(self.space.choices), n_obj=1 + len(self.config.costs), n_ieq_constr=n_constr,
                       xl=0, xu=self.space.gene_upper_bounds().astype(float), vtype=int)

    def run(self, evaluate: Callable[..., dict] | None = None,
            on_generation: Callable[[int], None] | None = None, *,
            evaluate_generation: Callable[[list[dict], int], list[dict]] | None = None) -> None:
        """Run all generations; `on_generation(g)` follows each. Archs are scored one by one by
        `evaluate(arch, generation=g)`, or a generation's at once by `evaluate_generation(archs, g)` (records in
        the order of `archs`; e.g. spread over processes)."""
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        if (evaluate is None) == (evaluate_generation is None):
            raise TypeError("EvolutionStrategy.run: give either evaluate or evaluate_generation")
        if evaluate_generation is None:
            evaluate_generation = lambda archs, g: [evaluate(arch, generation=g) for arch in archs]
        problem = self._problem()
        algorithm = self._algorithm()
        algorithm.setup(problem, termination=("n_gen", self.config.generations), seed=self.seed, verbose=False)
        generation = 0
        while algorithm.has_next():
            pop = algorithm.ask()
            records = evaluate_generation([self.space.decode(np.rint(x).astype(np.int64)) for x in pop.get("X")],
                                          generation)
            objectives = np.array([[-r[self.metric], *(r[c] for c in self.config.costs)] for r in records],
                                  dtype=float)
            values = {"F": objectives}
            if self.config.latency_limit_ms is not None:
                values["G"] = objectives[:, 1:2] - self.config.latency_limit_ms
            Evaluator().eval(StaticProblem(problem, **values), pop)
            algorithm.tell(infills=pop)
            logger.info("generation %d: %d archs, best %s %.3f", generation, len(records), self.metric,
                        max(r[self.metric] for r in records))
            if on_generation is not None:
                on_generation(generation)
            generation += 1
