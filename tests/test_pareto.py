import numpy as np

from nas.pareto import pareto_mask


def test_pareto_mask():
    metric = [90, 80, 85, 70, 90]
    latency = [2.0, 1.0, 1.5, 1.2, 2.5]
    assert pareto_mask(metric, latency).tolist() == [True, True, True, False, False]


def test_pareto_mask_random_against_brute_force():
    rng = np.random.default_rng(0)
    m, l = rng.random(60), rng.random(60)
    mask = pareto_mask(m, l)
    for i in range(60):
        dominated = any((m[j] >= m[i]) and (l[j] <= l[i]) and (m[j] > m[i] or l[j] < l[i]) for j in range(60))
        assert mask[i] == (not dominated)
