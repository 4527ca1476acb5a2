import dataclasses
import json

import numpy as np
import pytest

from nas.training.evaluation import journaled_candidates
from nas.randomness import RunRandom
from nas.strategies.evolution import EvolutionConfig, Nsga2Loop
from nas.rundir import EvaluationJournal
from conftest import toy_problem, toy_record
from search_spaces import arch_key

SPACE, TARGET = toy_problem()


def run(seed, limit=None, generations=12, evaluate=None, extra=()):
    seen = []

    def evaluate_and_log(arch, generation):
        seen.append((generation, arch_key(arch)))
        return (evaluate or toy_record)(arch)

    config = EvolutionConfig(population=16, generations=generations, latency_limit_ms=limit,
                             extra_objectives=list(extra))
    Nsga2Loop(SPACE, config, RunRandom(seed)).run(evaluate_and_log)
    return seen


def test_seeded_runs_are_identical_and_seeds_differ():
    assert run(0) == run(0)
    assert run(0) != run(1)


def test_initial_population_holds_largest_and_smallest():
    first = {key for gen, key in run(3, generations=1)}
    assert arch_key(SPACE.largest()) in first and arch_key(SPACE.smallest()) in first
    assert len(first) == 16


def test_finds_the_known_optimum():
    found = {key for _, key in run(0, generations=30)}
    assert arch_key(TARGET) in found


def test_latency_limit_steers_the_population():
    limit = 8.0
    seen = run(0, limit=limit, generations=10)
    latency = {key: toy_record(SPACE.validate(json.loads(key))).latency_ms for _, key in seen}
    first = [latency[k] <= limit for g, k in seen if g == 0]
    last = [latency[k] <= limit for g, k in seen if g == 9]
    assert np.mean(last) > np.mean(first)
    assert np.mean(last) >= 0.8


def test_replay_from_journal_repeats_no_evaluation(tmp_path):
    journal = EvaluationJournal(tmp_path / "evals.jsonl")
    calls = []
    cached = _journaled(lambda arch: calls.append(1) or toy_record(arch), journal)
    first = run(5, evaluate=lambda arch: cached(arch))
    n_calls = len(calls)
    assert n_calls == len({k for _, k in first})  # each distinct arch evaluated once
    replay_cache = _journaled(lambda arch: pytest.fail("evaluated again"), journal)
    assert run(5, evaluate=lambda arch: replay_cache(arch)) == first
    assert [c.id for c in replay_cache.records] == list(range(n_calls))


def _journaled(evaluate, journal):
    return journaled_candidates(evaluate, journal, "score")


def test_truncated_journal_line_is_dropped(tmp_path):
    journal = EvaluationJournal(tmp_path / "evals.jsonl")
    journal.append({"key": "a", "id": 0})
    with open(journal.path, "a") as f:
        f.write('{"key": "b", "i')  # killed mid-write
    assert journal.load() == [{"key": "a", "id": 0}]
    assert journal.path.read_text().count("\n") == 1
    with open(journal.path, "w") as f:
        f.write('{"bad"\n{"key": "a"}\n')
    with pytest.raises(ValueError, match="line 1 is corrupt"):
        journal.load()


def test_an_extra_objective_is_minimised_beside_latency():
    """A second cost that conflicts with latency (it falls as the first gene, and the latency, rise) pulls the
    population its way only when it is an objective."""
    top = SPACE.gene_upper_bounds()[0]

    def with_macs(arch):
        return dataclasses.replace(toy_record(arch), macs=float(top - SPACE.encode(arch)[0]))

    def mean_last_macs(extra):
        seen = run(0, generations=10, evaluate=with_macs, extra=extra)
        return np.mean([with_macs(SPACE.validate(json.loads(k))).macs for g, k in seen if g == 9])

    assert mean_last_macs(["macs"]) < mean_last_macs([])
    with pytest.raises(ValueError, match="extra_objectives"):
        EvolutionConfig(extra_objectives=["flops"])
    with pytest.raises(ValueError, match="extra_objectives"):
        EvolutionConfig(extra_objectives=["macs", "macs"])
