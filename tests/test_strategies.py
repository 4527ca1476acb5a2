"""Search strategies as registered classes: the registry, the config sections it decides, and the evolution's
state (its progress, checked when a resumed run replays the search from the journal)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import yaml

from conftest import SMOKE, toy_problem, toy_record
from nas.records import Candidate
from nas.config import ConfigError, config_to_yaml, load_config
from nas.errors import RunDirError
from nas.strategies.evolution import EvolutionConfig, EvolutionStrategy
from nas.strategies.sandwich import FrontSettings
from nas.rundir import RunDir
from nas.search_context import SearchContext
from nas.strategies import STRATEGIES, SearchConfig, SearchStrategy, register_strategy


# ------------------------------------------------------------------------------------------ the registry
def test_the_registry_holds_the_built_in_strategies():
    assert list(STRATEGIES) == ["evolution", "random", "differentiable"]
    # the differentiable search checkpoints its own state (supernet.pt); the others' goes to strategy.json
    assert [name for name, cls in STRATEGIES.items() if cls.persists_state] == ["evolution", "random"]


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_lives_in_its_own_module_and_takes_its_settings_from_its_section(name):
    cls = STRATEGIES[name]
    assert issubclass(cls, SearchStrategy) and cls.name == name
    assert cls.__name__.endswith("Strategy")  # one name per thing: its engine is named otherwise
    modules = {other.__module__ for other in STRATEGIES.values()}
    assert len(modules) == len(STRATEGIES) and cls.__module__.startswith("nas.strategies.")
    config = load_config(SMOKE, [f"search.strategy={name}"])
    assert config.search.strategy_class is cls and config.search.settings() is config.search.strategies[name]
    assert isinstance(config.search.settings(), cls.config_class)
    with pytest.raises(ConfigError, match=f"^search.{name}: unknown key 'colour'"):
        load_config(SMOKE, [f"search.{name}.colour=1"])


@pytest.mark.parametrize("name", [name for name, cls in STRATEGIES.items()
                                  if issubclass(cls.config_class, FrontSettings)])
@pytest.mark.parametrize("override, message", [
    ("extra_objectives=[flops]", r"extra_objectives: \['flops'\] is not a list of distinct macs, params$"),
    ("extra_objectives=[macs, macs]", "extra_objectives: .* is not a list of distinct"),
    ("latency_limit_ms=0", r"latency_limit_ms: must be > 0 \(or null for no limit\)$")])
def test_the_settings_of_every_strategy_over_a_supernet_are_checked_alike(name, override, message):
    """A bad latency limit or extra objective fails when the config loads, in one line naming the key, whichever
    strategy's section holds it (the random search's once passed and failed later)."""
    with pytest.raises(ConfigError, match=f"^search.{name}.{message}"):
        load_config(SMOKE, [f"search.{name}.{override}"])


@dataclass
class LocalSearchConfig:
    steps: int = 10

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError("steps: must be >= 1")


@pytest.fixture
def local_search():
    """A third strategy, registered for one test."""

    @register_strategy
    class LocalSearch(SearchStrategy):
        name = "local_search"
        config_class = LocalSearchConfig

        def run(self):
            raise NotImplementedError

    try:
        yield LocalSearch
    finally:
        del STRATEGIES["local_search"]


def test_a_registered_strategy_is_a_choice_of_the_config(local_search, tmp_path):
    config = load_config(SMOKE, ["search.strategy=local_search", "search.local_search.steps=3"])
    assert config.search.strategy == "local_search" and config.search.settings() == LocalSearchConfig(steps=3)
    assert config.search.settings("evolution") == load_config(SMOKE).search.settings("evolution")
    # a run's config.yaml holds its settings in a sub-section of its name, and reads back the same (resume)
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config))
    assert list(yaml.safe_load(path.read_text())["search"]) == ["strategy", "evolution", "random", "differentiable",
                                                                 "local_search", "finalize"]
    assert load_config(path).to_dict() == config.to_dict()
    for override, message in [("search.local_search.colour=1", "search.local_search: unknown key 'colour'"),
                              ("search.local_search.steps=0", "search.local_search.steps: must be >= 1"),
                              ("search.strategy=nope", "valid: differentiable, evolution, local_search, random")]:
        with pytest.raises(ConfigError, match=message):
            load_config(SMOKE, [override])


def test_what_a_strategy_declares_decides_finalisation_sandwich_and_scale_out(local_search, tmp_path):
    """A strategy's class attributes, not its name, decide: where finalisation picks its archs, whether the
    sandwich settings apply, whether torchrun may run it."""
    from nas.training.finalize import feasible_records

    records = [Candidate({}, str(i), "top1", 80 + i, i + 1.0, "toy", params=0, macs=0, id=i) for i in range(3)]
    limited = ["search.evolution.latency_limit_ms=2", "search.evolution.extra_objectives=[macs]"]
    evolution = load_config(SMOKE, limited).search
    assert evolution.finalize_scope() == (2, ("latency_ms", "macs"))
    assert [c.id for c in feasible_records(records, evolution)] == [0, 1]
    local = load_config(SMOKE, [*limited, "search.strategy=local_search"]).search
    assert local.strategy_class is local_search and local.finalize_scope() == (None, ("latency_ms",))
    assert len(feasible_records(records, local)) == 3
    with pytest.raises(ConfigError, match="train.distill: False would be ignored"):
        load_config(SMOKE, ["search.strategy=local_search", "train.distill=false"])
    local_search.uses_sandwich = True  # a strategy that trains with the sandwich rule takes the settings
    assert not load_config(SMOKE, ["search.strategy=local_search", "train.distill=false"]).train.distill
    assert [name for name, cls in STRATEGIES.items() if cls.scales_out] == ["evolution", "random"]


def test_an_unregistered_strategy_is_no_choice():
    with pytest.raises(ConfigError, match="search.strategy: unknown 'local_search'; valid: differentiable, evolution, random$"):
        load_config(SMOKE, ["search.strategy=local_search"])
    with pytest.raises(ConfigError, match="search: unknown key 'local_search'"):
        load_config(SMOKE, ["search.local_search.steps=3"])


def test_register_strategy_refuses_what_it_cannot_run():
    before = dict(STRATEGIES)

    class Unnamed(SearchStrategy):
        config_class = LocalSearchConfig

    class Reserved(Unnamed):
        name = "finalize"

    class Taken(Unnamed):
        name = "evolution"

    class NoSettings(SearchStrategy):
        name = "no_settings"
        config_class = dict

    for cls, error in [(dict, TypeError), (Unnamed, ValueError), (Reserved, ValueError), (Taken, ValueError),
                       (NoSettings, TypeError)]:
        with pytest.raises(error, match="register_strategy"):
            register_strategy(cls)
    assert register_strategy(EvolutionStrategy) is EvolutionStrategy  # registering the same class again is harmless
    assert STRATEGIES == before


# ------------------------------------------------------------------------------------------ the evolution's state
class _ToyEvaluator:
    """Scores archs by `toy_record` (no supernet)."""

    def __init__(self, *args, **kwargs):
        pass

    evaluate = staticmethod(toy_record)


@pytest.fixture
def toy_evolution(monkeypatch):
    """`make(run_dir, on_generation, generations)`: an `EvolutionStrategy` of the toy problem of test_evolution,
    journaled in `run_dir`."""
    import nas.strategies.sandwich

    monkeypatch.setattr(nas.strategies.sandwich, "train_supernet", lambda ctx: SimpleNamespace(trained_model=None))
    monkeypatch.setattr(nas.strategies.sandwich, "ArchEvaluator", _ToyEvaluator)

    def make(run_dir: RunDir, on_generation=None, generations: int = 4) -> EvolutionStrategy:
        config = SimpleNamespace(seed=0, train=SimpleNamespace(channels_last=False),
                                 search=SearchConfig(strategies={"evolution": EvolutionConfig(population=8, generations=generations)}))
        ctx = SearchContext(config, run_dir, SimpleNamespace(metric="score"), toy_problem()[0], None,
                            progress=False)
        return EvolutionStrategy(ctx, on_generation)

    return make


def _assert_state_of(state: dict, records: list[Candidate]) -> None:
    """`state` is the progress after its generation: the archs of that generation, the new ones in the order
    they were evaluated."""
    generation = state["generation"] - 1
    keys = {c.key for c in records}
    new = [c.key for c in records if c.generation == generation]
    population = state["population"]
    assert len(population) == 8 and set(population) <= keys and new
    assert [k for k in population if k in new] == new


def test_the_evolution_state_is_its_progress_and_a_resume_replays_it(toy_evolution, tmp_path, caplog):
    run_dir = RunDir(tmp_path)
    states, reported = [], []

    def on_generation(records):
        reported.append(len(records))
        states.append(json.loads(json.dumps(strategy.state_dict())))  # JSON, as run_search keeps it

    strategy = toy_evolution(run_dir, on_generation)
    assert strategy.state_dict() == {"generation": 0, "population": []}
    records = strategy.run().evaluate.records
    assert [s["generation"] for s in states] == [1, 2, 3, 4] and strategy.state_dict() == states[-1]
    assert reported == sorted(reported) and reported[-1] == len(records)
    for state in states:
        _assert_state_of(state, records)

    # resumed after two generations: those are replayed from the journal, and reported no more
    caplog.set_level(logging.INFO)
    resumed_reports = []
    resumed = toy_evolution(run_dir, lambda records: resumed_reports.append(len(records)))
    resumed.load_state_dict(states[1])
    outcome = resumed.run()
    assert "resumed: generations 0..1 replayed from the journal, continuing at generation 2" in caplog.text
    assert outcome.evaluate.new_evaluations == 0 and outcome.evaluate.records == records
    # generations 2 and 3 (their records were in the journal already)
    assert resumed_reports == [len(records)] * 2 and resumed.state_dict() == states[-1]


@pytest.mark.parametrize("tamper, message", [
    (lambda s: dict(s, population=s["population"][::-1]), "generation 2 evaluated other archs than .*strategy.json "
                                                          r"records \(the first difference at position 0 of 8\)"),
    (lambda s: dict(s, population=s["population"][:-1]), r"\(8 archs where it records 7\)"),
    (lambda s: dict(s, generation=1), r"generation 0 evaluated other archs"),
    (lambda s: dict(s, generation=5), "records 5 generations, the search runs 3"),
])
def test_a_state_the_journal_does_not_replay_is_refused(toy_evolution, tmp_path, tamper, message):
    run_dir = RunDir(tmp_path)
    first = toy_evolution(run_dir, generations=3)
    first.run()
    reported = []
    resumed = toy_evolution(run_dir, lambda records: reported.append(records), generations=3)
    resumed.load_state_dict(tamper(first.state_dict()))
    with pytest.raises(RunDirError, match="^the journal does not replay the recorded search: .*" + message):
        resumed.run()
    assert not reported  # the run directory is left as it was


@pytest.mark.parametrize("state", [[], {"generation": 1}, {"generation": "1", "population": []},
                                   {"generation": -1, "population": []}, {"generation": True, "population": []},
                                   {"generation": 1, "population": [1]},
                                   {"generation": 1, "population": [], "seed": 0}])
def test_a_malformed_evolution_state_is_refused(toy_evolution, tmp_path, state):
    with pytest.raises(RunDirError, match="strategy.json: not a state of the evolution strategy"):
        toy_evolution(RunDir(tmp_path)).load_state_dict(state)


def test_a_run_records_the_evolution_state(smoke_run):
    """The smoke run's checkpoint/strategy.json: its three generations, the last one's archs."""
    state = json.loads(smoke_run.strategy_state.read_text())
    assert state["generation"] == 3
    _assert_state_of(state, [Candidate.from_journal(entry, "top1") for entry in smoke_run.journal])
