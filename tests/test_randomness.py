"""nas.randomness: every random stream of a run derived from its seed in one place, drawing what it always drew."""
import numpy as np
import pytest
import torch

from nas.randomness import STREAMS, RunRandom


def test_a_stream_is_the_seed_its_counters_and_its_salt():
    random = RunRandom(5)
    # the salts the runs' results were made with (a changed salt changes every run's archs)
    assert np.array_equal(random.numpy("evolution.initial_archs").random(4), np.random.default_rng([5, 11]).random(4))
    assert np.array_equal(random.numpy("sandwich.archs", 2, 9).random(4),
                          np.random.default_rng([5, 2, 9, 7]).random(4))
    seed = int(np.random.SeedSequence([5, 3, 1]).generate_state(1, dtype=np.uint64)[0] >> 1)
    assert torch.equal(torch.rand(3, generator=random.torch("differentiable.arch_gates", 3)),
                       torch.rand(3, generator=torch.Generator().manual_seed(seed)))
    assert not np.array_equal(random.numpy("random.archs").random(4), RunRandom(6).numpy("random.archs").random(4))


def test_an_unknown_stream_is_refused_with_the_valid_ones():
    with pytest.raises(KeyError, match="'colour' is not one of evolution.initial_archs, "):
        RunRandom(0).numpy("colour")
    assert all(isinstance(salt, int) for salt in STREAMS.values())


def test_a_seed_of_a_stream_is_what_its_torch_generator_is_seeded_with():
    random = RunRandom(5)
    assert random.seed_of("finalize.dropout", 2, 9) == int(
        np.random.SeedSequence([5, 2, 9, STREAMS["finalize.dropout"]]).generate_state(1, dtype=np.uint64)[0] >> 1)
    assert random.torch("finalize.dropout", 2, 9).initial_seed() == random.seed_of("finalize.dropout", 2, 9)
    # a net's dropout (one more counter) and another step draw apart from the step's own seed
    seeds = {random.seed_of("finalize.dropout", 2, 9), random.seed_of("finalize.dropout", 2, 9, 0, 0),
             random.seed_of("finalize.dropout", 2, 10), random.seed_of("sandwich.noise", 2, 9)}
    assert len(seeds) == 4 and all(0 <= s < 2 ** 63 for s in seeds)
