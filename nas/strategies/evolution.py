"""Multi-objective evolutionary search: NSGA-II (pymoo) over (task metric, latency[, MACs, params]).

Deb et al., "A Fast and Elitist Multiobjective Genetic Algorithm: NSGA-II", IEEE TEC 2002. Architectures are
integer genes (one choice index per searched decision, `SearchSpace.encode`); crossover is SBX and mutation
polynomial, both rounded to integers with a low distribution index (3) so that a mutation moves a choice, as
pymoo recommends for integer variables. An optional latency limit is
an inequality constraint (constraint-domination). Extra objectives (`extra_objectives`) are minimised beside
latency: MACs stand for the cost on a second device the model will also run on, e.g. the CPU that OpenVINO's
AUTO device runs a model on while the NPU compiles it (on the CPU, latency follows MACs within a few percent in
the default space, see the README).

`Nsga2Loop` is the algorithm; `EvolutionStrategy` (registered as `evolution`) runs it over the run's trained
supernet. The loop is deterministic for a seed and the evaluations it is given. It therefore needs no state of its
own to resume: the run replays it from the start with every finished evaluation served from the journal.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from search_spaces import SearchSpace, arch_key

from ..errors import RunDirError, check_bounds
from ..randomness import RunRandom
from ..records import Candidate
from ..search_context import SearchContext
from .registry import register_strategy
from .sandwich import FrontSettings, SandwichStrategy, trained_supernet_scoring
from .strategy import SearchOutcome

logger = logging.getLogger(__name__)

__all__ = ["EvolutionConfig", "EvolutionStrategy", "Nsga2Loop"]


@dataclass
class EvolutionConfig(FrontSettings):
    """Args:
        population: archs per generation (the initial one holds the largest and the smallest arch).
        generations: generations including the initial one.
        crossover_prob / crossover_eta: SBX probability and distribution index.
        mutation_eta: polynomial-mutation distribution index (each gene mutates with probability 1/n_genes).
        latency_limit_ms / extra_objectives: see `nas.strategies.sandwich.FrontSettings`.
    """

    population: int = 24
    generations: int = 10
    crossover_prob: float = 0.9
    crossover_eta: float = 3.0
    mutation_eta: float = 3.0

    def __post_init__(self):
        super().__post_init__()
        check_bounds(self, at_least={"population": 4, "generations": 1})
        if not 0 <= self.crossover_prob <= 1:
            raise ValueError("crossover_prob: must be in [0, 1]")


class Nsga2Loop:
    """NSGA-II as an ask/tell loop around an `evaluate(arch) -> Candidate` function: its `score` maximised, its
    costs (`config.costs`) minimised. `random` is the run's random streams: the initial archs and pymoo's seed come
    from it.
    """

    def __init__(self, space: SearchSpace, config: EvolutionConfig, random: RunRandom):
        self.space, self.config, self.random = space, config, random

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
        archs = self.space.spread_sample(self.config.population, self.random.numpy("evolution.initial_archs"))
        return np.stack([self.space.encode(a) for a in archs]).astype(float)

    def _problem(self):
        from pymoo.core.problem import Problem

        n_constr = 1 if self.config.latency_limit_ms is not None else 0
        return Problem(n_var=len(self.space.choices), n_obj=1 + len(self.config.costs), n_ieq_constr=n_constr,
                       xl=0, xu=self.space.gene_upper_bounds().astype(float), vtype=int)

    def run(self, evaluate: Callable[..., Candidate] | None = None,
            on_generation: Callable[[int], None] | None = None, *,
            evaluate_generation: Callable[[list[dict], int], list[Candidate]] | None = None) -> None:
        """Run all generations; `on_generation(g)` follows each. Archs are scored one by one by
        `evaluate(arch, generation=g)`, or a generation's at once by `evaluate_generation(archs, g)` (records in
        the order of `archs`; e.g. spread over processes)."""
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        if (evaluate is None) == (evaluate_generation is None):
            raise TypeError("Nsga2Loop.run: give either evaluate or evaluate_generation")
        if evaluate_generation is None:
            evaluate_generation = lambda archs, g: [evaluate(arch, generation=g) for arch in archs]
        problem = self._problem()
        algorithm = self._algorithm()
        algorithm.setup(problem, termination=("n_gen", self.config.generations), seed=self.random.seed, verbose=False)
        generation = 0
        while algorithm.has_next():
            pop = algorithm.ask()
            records = evaluate_generation([self.space.decode(np.rint(x).astype(np.int64)) for x in pop.get("X")],
                                          generation)
            objectives = np.array([[-c.score, *(c.cost(name) for name in self.config.costs)] for c in records],
                                  dtype=float)
            values = {"F": objectives}
            if self.config.latency_limit_ms is not None:
                values["G"] = objectives[:, 1:2] - self.config.latency_limit_ms
            Evaluator().eval(StaticProblem(problem, **values), pop)
            algorithm.tell(infills=pop)
            logger.info("generation %d: %d archs, best %s %.3f", generation, len(records), records[0].metric,
                        max(c.score for c in records))
            if on_generation is not None:
                on_generation(generation)
            generation += 1


@register_strategy
class EvolutionStrategy(SandwichStrategy):
    """Supernet training with the sandwich rule, then NSGA-II over (metric with inherited weights, latency)
    (`Nsga2Loop`).

    With several processes, each generation's new archs are scored spread over them (`CachedEvaluator.
    evaluate_all`); the records, and so the search, are those of one process.

    The search is deterministic for a seed and its evaluations, so a resumed run replays it from the start with
    the finished evaluations served from the journal. The state (`state_dict`: generations finished, arch keys
    of the last one's archs in order) checks that replay: when it reaches the recorded generation, its archs
    must be the recorded ones (else `RunDirError`). Generations the state records as finished are not reported
    to `on_generation` again.
    """

    name = "evolution"
    config_class = EvolutionConfig

    def __init__(self, ctx: SearchContext, on_generation: Optional[Callable[[list[Candidate]], None]] = None):
        super().__init__(ctx, on_generation)
        self.generation = 0  # generations finished
        self.population: list[str] = []  # arch keys of the archs of the last generation, in order
        self._recorded: Optional[dict] = None  # the state of an earlier session, until the replay has passed it

    def state_dict(self) -> dict:
        return {"generation": self.generation, "population": list(self.population)}

    def load_state_dict(self, state: dict) -> None:
        valid = (isinstance(state, dict) and set(state) == {"generation", "population"}
                 and type(state["generation"]) is int and state["generation"] >= 0
                 and isinstance(state["population"], list) and all(isinstance(k, str) for k in state["population"]))
        if not valid:
            raise RunDirError(f"{self.ctx.run_dir.strategy_state}: not a state of the evolution strategy (expected "
                              "{\"generation\": int, \"population\": [arch keys]}); start a new run in another run "
                              "directory")
        # a state of generation 0 finished nothing: no replay to check
        self._recorded = dict(state, population=list(state["population"])) if state["generation"] else None

    @staticmethod
    def _not_replayed(detail: str) -> RunDirError:
        return RunDirError(f"the journal does not replay the recorded search: {detail}; start a new run in another "
                           "run directory")

    def _replayed(self) -> bool:
        """Whether the generation just finished is one the recorded state had finished; at the last of them,
        checks its archs against the state."""
        recorded = self._recorded
        if recorded is None or self.generation > recorded["generation"]:
            return False
        if self.generation == recorded["generation"]:
            replayed, kept = self.population, recorded["population"]
            if replayed != kept:
                first = next((i for i, (a, b) in enumerate(zip(replayed, kept)) if a != b), None)
                differ = (f"{len(replayed)} archs where it records {len(kept)}" if first is None
                          else f"the first difference at position {first} of {len(kept)}")
                raise self._not_replayed(f"generation {self.generation - 1} evaluated other archs than "
                                         f"{self.ctx.run_dir.strategy_state} records ({differ})")
            left = self.settings.generations - self.generation
            logger.info("resumed: generations 0..%d replayed from the journal, %s", self.generation - 1,
                        f"continuing at generation {self.generation}" if left > 0 else "the search had finished")
            self._recorded = None
        return True

    def run(self) -> SearchOutcome:
        from tqdm import tqdm

        ctx = self.ctx
        evaluator, evaluate = trained_supernet_scoring(ctx)
        config: EvolutionConfig = self.settings
        bar = tqdm(total=config.population * config.generations, desc="search", unit="arch",
                   disable=not ctx.progress, dynamic_ncols=True)

        def evaluate_generation(archs: list[dict], generation: int) -> list[Candidate]:
            self.population = [arch_key(arch) for arch in archs]
            return evaluate.evaluate_all(archs, on_record=lambda: bar.update(1), generation=generation)

        def on_generation(generation: int) -> None:
            self.generation = generation + 1
            if not self._replayed():
                self._generation_done(evaluate.records)

        Nsga2Loop(ctx.space, config, ctx.random).run(
            evaluate_generation=evaluate_generation, on_generation=on_generation)
        bar.close()
        if self._recorded is not None:
            raise self._not_replayed(f"{ctx.run_dir.strategy_state} records {self._recorded['generation']} "
                                     f"generations, the search runs {self.generation}")
        logger.info("evolution: %d archs evaluated (%d new in this session)", len(evaluate.records),
                    evaluate.new_evaluations)
        return SearchOutcome(evaluate, evaluator)
