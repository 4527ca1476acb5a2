"""Search strategies as registered classes: each turns a `SearchContext` into evaluated architectures.

A strategy is a `SearchStrategy` subclass registered under its `name` with `register_strategy`
(`STRATEGIES[name]` is the class). Its `config_class` is the settings dataclass of the `search.<name>`
sub-section: the config's `search` section (`SearchConfig`) names the strategy that runs and holds every registered
strategy's settings in a sub-section of its name, so that one override (`search.strategy=differentiable`) switches
strategy; `search.finalize` is common to all of them.

`nas.run.run_search` creates the strategy of the config, loads the state it recorded in
RUN_DIR/checkpoint/strategy.json into it on resume (`state_dict` / `load_state_dict`; a strategy that checkpoints
itself sets `persists_state = False`), and writes candidates.csv and that state after each generation
(the `on_generation` callback).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, is_dataclass
from typing import Any, Callable, ClassVar, Optional

import torch

from search_spaces import arch_key

from ..errors import RunDirError
from ..rundir import RunDir, atomic_copy
from ..training.evaluation import ArchEvaluator, CachedEvaluator
from ..training.finalize import FinalizeConfig
from ..training.supernet_training import SupernetTrainer
from .differentiable import DifferentiableConfig, DifferentiableSearch
from .evolution import EvolutionConfig, EvolutionStrategy
from .random_search import RandomConfig, sample_archs

logger = logging.getLogger(__name__)

__all__ = ["STRATEGIES", "SearchStrategy", "register_strategy", "EvolutionSearch", "RandomSearch",
           "DifferentiableSearchStrategy", "SearchConfig", "SearchOutcome", "train_supernet"]


@dataclass
class SearchOutcome:
    """`evaluate.records`: every evaluated arch in id order; `evaluator`: scores further archs (test, baselines)."""

    evaluate: CachedEvaluator
    evaluator: ArchEvaluator


class SearchStrategy(ABC):
    """A search strategy of a run.

    Class attributes: `name` (its key in `STRATEGIES` and the `search.<name>` sub-section of its settings),
    `config_class` (the dataclass of those settings), `persists_state` (whether `run_search` keeps `state_dict()`
    in RUN_DIR/checkpoint/strategy.json, as JSON; False for a strategy that checkpoints itself).

    Args:
        ctx: the run's `nas.context.SearchContext`.
        on_generation: `on_generation(records)` after each generation (search epoch), with every record so far
            (the run writes candidates.csv and the strategy's state there); None: nothing.
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    persists_state: ClassVar[bool] = True
    #: torchrun may run it in several processes (its supernet training and scoring are data-parallel)
    scales_out: ClassVar[bool] = False
    #: its supernet training follows the sandwich rule (`train.sandwich_random`, `train.distill`)
    uses_sandwich: ClassVar[bool] = False

    @classmethod
    def finalize_scope(cls, settings) -> tuple[Optional[float], tuple[str, ...]]:
        """(latency limit in ms or None, the costs its front spreads over) of a search with these settings: where
        finalisation chooses its archs."""
        return None, ("latency_ms",)

    @classmethod
    def finalize_candidates(cls, settings, records: list[dict]) -> list[dict]:
        """The records of a search with these settings that finalisation may choose from (default: all)."""
        return records

    @classmethod
    def latency_target_ms(cls, settings, space, cost_model) -> Optional[float]:
        """The latency a search with these settings aims its archs at, in ms on `cost_model` (None: no target;
        the run measures each finalised arch against a target and logs how far off it is)."""
        return None

    def __init__(self, ctx, on_generation: Optional[Callable[[list[dict]], None]] = None):
        self.ctx, self.on_generation = ctx, on_generation

    @property
    def settings(self):
        """This strategy's settings: the config's `search.<name>` sub-section, a `config_class` instance."""
        return self.ctx.config.search.settings(self.name)

    @abstractmethod
    def run(self) -> SearchOutcome:
        """Run (or, on resume, finish) the search."""

    def state_dict(self) -> dict:
        """The state a resumed run needs beyond the run directory's journals and checkpoints (none by default)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take the state `state_dict()` gave in an earlier session of the run, before `run()`."""

    def _generation_done(self, records: list[dict]) -> None:
        if self.on_generation is not None:
            self.on_generation(records)


#: the registered strategies by name (`register_strategy`)
STRATEGIES: dict[str, type[SearchStrategy]] = {}

#: keys of the `search` section that are not strategies (and `SearchConfig.extra`)
_RESERVED = ("strategy", "finalize", "extra")


def register_strategy(cls: type[SearchStrategy]) -> type[SearchStrategy]:
    """Class decorator: registers a `SearchStrategy` subclass under its `name`, so that `search.strategy=<name>`
    runs it and `search.<name>` holds its settings (`config_class`)."""
    if not (isinstance(cls, type) and issubclass(cls, SearchStrategy)):
        raise TypeError(f"register_strategy: {cls!r} is not a SearchStrategy subclass")
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
        raise ValueError(f"register_strategy: {cls.__name__} needs a class attribute `name`, an identifier other "
                         f"than {', '.join(_RESERVED)}")
    if not is_dataclass(getattr(cls, "config_class", None)):
        raise TypeError(f"register_strategy: {cls.__name__}.config_class must be a dataclass (its settings)")
    if STRATEGIES.get(name, cls) is not cls:
        raise ValueError(f"register_strategy: {name!r} is taken by {STRATEGIES[name].__name__}")
    STRATEGIES[name] = cls
    return cls


def train_supernet(ctx) -> SupernetTrainer:
    """Train (or finish training) the run's supernet; returns the trainer holding the weights. With
    `supernet_from`, the other run's trained supernet is copied in first (checked to be trained alike when the run
    was prepared: `nas.config.supernet_source`), so that nothing is trained again."""
    if ctx.config.supernet_from and not ctx.run_dir.supernet_checkpoint.exists():
        source = RunDir(ctx.config.supernet_from).supernet_checkpoint
        atomic_copy(source, ctx.run_dir.supernet_checkpoint)
        logger.info("supernet: taken from %s", source)
    torch.manual_seed(ctx.config.seed)  # the initial weights
    trainer = SupernetTrainer(ctx.space, ctx.space.build_supernet(), ctx.task, ctx.config.train, ctx.config.seed,
                              ctx.run_dir.supernet_checkpoint, dist=ctx.dist, device=ctx.device)
    trainer.train(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
    return trainer


class _SandwichSearch(SearchStrategy):
    """A search over a supernet trained by the sandwich rule, whose settings give a latency limit
    (`latency_limit_ms`) and the costs its front spreads over (`costs`)."""

    scales_out = uses_sandwich = True

    @classmethod
    def finalize_scope(cls, settings) -> tuple[Optional[float], tuple[str, ...]]:
        return settings.latency_limit_ms, settings.costs


@register_strategy
class EvolutionSearch(_SandwichSearch):
    """Supernet training with the sandwich rule, then NSGA-II over (metric with inherited weights, latency)
    (`nas.strategies.evolution.EvolutionStrategy`).

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

    def __init__(self, ctx, on_generation: Optional[Callable[[list[dict]], None]] = None):
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
                              "{\"generation\": int, \"population\": [arch keys]}); start a new run with --out")
        # a state of generation 0 finished nothing: no replay to check
        self._recorded = dict(state, population=list(state["population"])) if state["generation"] else None

    @staticmethod
    def _not_replayed(detail: str) -> RunDirError:
        return RunDirError(f"the journal does not replay the recorded search: {detail}; start a new run with --out")

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
        evaluator, evaluate = _trained_supernet_scoring(ctx)
        config: EvolutionConfig = self.settings
        bar = tqdm(total=config.population * config.generations, desc="search", unit="arch",
                   disable=not ctx.progress, dynamic_ncols=True)

        def evaluate_generation(archs: list[dict], generation: int) -> list[dict]:
            self.population = [arch_key(arch) for arch in archs]
            return evaluate.evaluate_all(archs, on_record=lambda: bar.update(1), generation=generation)

        def on_generation(generation: int) -> None:
            self.generation = generation + 1
            if not self._replayed():
                self._generation_done(evaluate.records)

        EvolutionStrategy(ctx.space, config, ctx.task.metric, ctx.config.seed).run(
            evaluate_generation=evaluate_generation, on_generation=on_generation)
        bar.close()
        if self._recorded is not None:
            raise self._not_replayed(f"{ctx.run_dir.strategy_state} records {self._recorded['generation']} "
                                     f"generations, the search runs {self.generation}")
        logger.info("evolution: %d archs evaluated (%d new in this session)", len(evaluate.records),
                    evaluate.new_evaluations)
        return SearchOutcome(evaluate, evaluator)


def _trained_supernet_scoring(ctx) -> tuple[ArchEvaluator, CachedEvaluator]:
    """The run's supernet trained (`train_supernet`), and its journaled scoring of archs on inherited weights."""
    trainer = train_supernet(ctx)
    evaluator = ArchEvaluator(ctx.space, trainer.trained_model, ctx.task, ctx.cost_model, ctx.config.train.channels_last)
    return evaluator, CachedEvaluator(evaluator.evaluate, ctx.run_dir.journal, dist=ctx.dist)


@register_strategy
class RandomSearch(_SandwichSearch):
    """Supernet training with the sandwich rule (as the evolution's), then `archs` random archs scored on inherited
    weights (`nas.strategies.random_search.sample_archs`): the baseline of `scripts/bench_search.py`. One generation; a
    resumed run draws the same archs and serves the scored ones from the journal."""

    name = "random"
    config_class = RandomConfig

    def run(self) -> SearchOutcome:
        from tqdm import tqdm

        ctx = self.ctx
        evaluator, evaluate = _trained_supernet_scoring(ctx)
        latency = lambda arch: ctx.cost_model.latency_ms(ctx.space.blocks(arch))  # noqa: E731
        archs = sample_archs(ctx.space, self.settings, latency, ctx.config.seed)
        with tqdm(total=len(archs), desc="random search", unit="arch", disable=not ctx.progress,
                  dynamic_ncols=True) as bar:
            evaluate.evaluate_all(archs, on_record=lambda: bar.update(1), generation=0)
        self._generation_done(evaluate.records)
        logger.info("random search (%s): %d archs evaluated (%d new in this session)", self.settings.sampling,
                    len(evaluate.records), evaluate.new_evaluations)
        return SearchOutcome(evaluate, evaluator)


@register_strategy
class DifferentiableSearchStrategy(SearchStrategy):
    """The differentiable strategy of a run: search, fine-tune, then score each search epoch's derived arch
    (`nas.strategies.differentiable.DifferentiableSearch`).

    candidates.csv gets one row per search epoch (`generation` = epoch, `expected_latency_ms` = E[latency] at
    its end); the last row is the derived arch. All rows are scored with the final (fine-tuned) weights, the
    weights `vpunas export` uses, so `on_generation` follows the scoring of each epoch's arch, after the search.

    The state is that of the `DifferentiableSearch` it drives (weights, logits, optimizers, trajectory), which
    checkpoints itself by step in RUN_DIR/checkpoint/supernet.pt and resumes from it (`persists_state` False).
    """

    name = "differentiable"
    config_class = DifferentiableConfig
    persists_state = False

    @classmethod
    def finalize_candidates(cls, settings: DifferentiableConfig, records: list[dict]) -> list[dict]:
        """The derived arch (the last epoch's row) alone, unless `finalize_every_epoch`: an early epoch's arch is
        a search not yet finished, not a result."""
        return records if settings.finalize_every_epoch else records[-1:]

    @classmethod
    def latency_target_ms(cls, settings: DifferentiableConfig, space, cost_model) -> Optional[float]:
        return settings.target_latency_ms(space, cost_model)

    def __init__(self, ctx, on_generation: Optional[Callable[[list[dict]], None]] = None):
        super().__init__(ctx, on_generation)
        self.search = DifferentiableSearch(ctx.space, ctx.task, ctx.cost_model, ctx.config.train, self.settings,
                                           ctx.config.seed, ctx.run_dir.supernet_checkpoint)

    def state_dict(self) -> dict:
        return self.search.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.search.load_state_dict(state)

    def run(self) -> SearchOutcome:
        ctx, search = self.ctx, self.search
        search.run(progress=ctx.progress, adapt_threads=ctx.config.adapt_threads)
        evaluator = ArchEvaluator(ctx.space, search.supernet, ctx.task, ctx.cost_model, ctx.config.train.channels_last)
        measured: dict[str, dict] = {}

        def score(entry: dict) -> dict:
            key = arch_key(entry["arch"])
            if key not in measured:  # the trajectory often derives the same arch for several epochs
                measured[key] = evaluator.evaluate(entry["arch"])
            return dict(measured[key], key=f"epoch{entry['epoch']}",
                        expected_latency_ms=round(entry["expected_latency_ms"], 6))

        evaluate = CachedEvaluator(score, ctx.run_dir.journal, key=lambda entry: f"epoch{entry['epoch']}")
        for record in evaluate.records:
            measured.setdefault(arch_key(record["arch"]), {k: v for k, v in record.items() if k not in
                                                           ("key", "id", "generation", "expected_latency_ms")})
        for entry in search.trajectory:
            new = evaluate.new_evaluations
            evaluate(entry, generation=entry["epoch"])
            if evaluate.new_evaluations > new:  # an epoch scored in an earlier session was reported there
                self._generation_done(evaluate.records)
        final = evaluate.records[-1]
        logger.info("derived arch (id %d): %s %.4f, latency %.4f ms on %s (E[latency] %.4f ms)", final["id"],
                    ctx.task.metric, final[ctx.task.metric], final["latency_ms"], final["cost_model"],
                    final["expected_latency_ms"])
        return SearchOutcome(evaluate, evaluator)


@dataclass
class SearchConfig:
    """The `search` section of a run config.

    Args:
        strategy: the strategy that runs (a key of `STRATEGIES`).
        strategies: the settings of every registered strategy, by name (in a config file, each is a sub-section
            of its name: `search.evolution.population`); a strategy not given takes its defaults.
        finalize: training of the chosen archs after the search, whatever the strategy (`FinalizeConfig`).
    """

    strategy: str = "evolution"
    strategies: dict[str, Any] = field(default_factory=dict)
    finalize: FinalizeConfig = field(default_factory=FinalizeConfig)

    def __post_init__(self):
        for name, cls in STRATEGIES.items():
            self.strategies.setdefault(name, cls.config_class())

    def sections(self) -> dict[str, Any]:
        """The section as a config file holds it: `strategy`, each strategy's settings, `finalize`."""
        return {"strategy": self.strategy, **self.strategies, "finalize": self.finalize}

    def settings(self, name: Optional[str] = None):
        """The settings of strategy `name` (default: the strategy that runs)."""
        return self.strategies[self.strategy if name is None else name]

    @property
    def strategy_class(self) -> type[SearchStrategy]:
        """The registered class of the strategy that runs."""
        return STRATEGIES[self.strategy]

    def finalize_scope(self) -> tuple[Optional[float], tuple[str, ...]]:
        """The running strategy's `SearchStrategy.finalize_scope` with its settings."""
        return self.strategy_class.finalize_scope(self.settings())

    def finalize_candidates(self, records: list[dict]) -> list[dict]:
        """The running strategy's `SearchStrategy.finalize_candidates` with its settings."""
        return self.strategy_class.finalize_candidates(self.settings(), records)

    def latency_target_ms(self, space, cost_model) -> Optional[float]:
        """The running strategy's `SearchStrategy.latency_target_ms` with its settings."""
        return self.strategy_class.latency_target_ms(self.settings(), space, cost_model)
