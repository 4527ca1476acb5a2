"""Which archs finalisation trains: spread over the cost range of the front, within the search's scope."""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from search_spaces import arch_key

from ...records import Candidate


def select_spread(records: Sequence[Candidate], n: int, costs: Sequence[str] = ("latency_ms",)) -> list[Candidate]:
    """`n` distinct archs for finalisation, spread over the cost range of the front (sorted by latency); `costs`
    name the candidates' costs (`Candidate.cost`), their scores are the metric.

    The ends of the front of the metric against each cost (latency, then a search's extra objectives, e.g.
    MACs) come first: its cheapest arch and its best. Then, place by place, the widest gap between the chosen
    archs on any cost's log scale (the largest cost ratio between neighbours, where a user's model that the
    finalised front should beat can fall) gets an arch inside it, preferring the middle half of the gap: of the
    better half of those archs by inherited metric, the cheapest on the other costs (with one cost, the best).
    Costs that rise together (latency and MACs) so share their places instead of each picking archs at the same
    levels. When no gap has an arch left, the remaining places go to the other archs in order of non-dominated
    layer (over the metric and all costs), then metric.

    Inherited metrics rank archs only to within their noise (the ranking fidelity of docs/results.md), so an
    arch behind the front is as good a candidate, and a front with a gap in cost still gets archs in the
    gap. Costs disagree about archs (dense convolutions suit the VPU's DPU, depthwise ones the CPU, for which MACs
    stand): a gap in MACs gets the VPU's fastest arch there, a gap in VPU latency the one of fewest MACs, so the
    chosen archs span both trade-offs rather than one kind of arch taking every gap.
    """
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    unique = list({arch_key(c.arch): c for c in records}.values())
    if n <= 0 or not unique:
        return []
    score = np.array([c.score for c in unique], dtype=float)
    log_cost = np.log(np.array([[c.cost(name) for name in costs] for c in unique], dtype=float))
    chosen: list[int] = []
    for j in range(len(costs)):
        front = NonDominatedSorting().do(np.stack([-score, log_cost[:, j]], axis=1), only_non_dominated_front=True)
        cheapest = min(front, key=lambda i: (log_cost[i, j], -score[i], i))
        best = max(front, key=lambda i: (score[i], -log_cost[i, j], -i))
        chosen += [int(i) for i in dict.fromkeys((cheapest, best)) if i not in chosen]  # one arch may be both
    chosen = chosen[:n]
    empty: set[tuple] = set()
    while len(chosen) < n:
        gaps = [(right - left, left, right, j) for j in range(len(costs))
                for left, right in itertools.pairwise(sorted(set(log_cost[chosen, j])))
                if (left, right, j) not in empty]
        if not gaps:
            break
        width, left, right, j = max(gaps)
        inside = [i for i in range(len(unique)) if i not in chosen and left < log_cost[i, j] < right]
        if not inside:
            empty.add((left, right, j))
            continue
        pool = [i for i in inside if abs(log_cost[i, j] - (left + right) / 2) <= width / 4] or inside
        better_half = [i for i in pool if score[i] >= np.median(score[pool])]
        chosen.append(min(better_half, key=lambda i: (log_cost[i].sum() - log_cost[i, j], -score[i],
                                                      log_cost[i, j], i)))
    layers = NonDominatedSorting().do(np.stack([-score, *log_cost.T], axis=1))
    layer_of = {int(i): depth for depth, layer in enumerate(layers) for i in layer}
    rest = sorted((i for i in range(len(unique)) if i not in chosen), key=lambda i: (layer_of[i], -score[i], i))
    chosen += rest[:n - len(chosen)]
    return sorted((unique[i] for i in chosen), key=lambda c: (c.latency_ms, c.id))


def feasible_records(records: Sequence[Candidate], search) -> list[Candidate]:
    """The records finalisation may choose from (`SearchConfig.finalize_candidates`: e.g. the differentiable
    search's derived arch alone) within the latency limit of the search (`SearchConfig.finalize_scope`): archs it
    treated as infeasible are not worth finalisation time."""
    limit, _ = search.finalize_scope()
    return [c for c in search.finalize_candidates(list(records)) if limit is None or c.latency_ms <= limit]


def ranking_fidelity(inherited: Sequence[float], final: Sequence[float]) -> float | None:
    """Kendall tau between inherited-weight and finalised metrics (None for fewer than 2 archs or no spread)."""
    from scipy.stats import kendalltau

    if len(inherited) < 2:
        return None
    tau = kendalltau(inherited, final).statistic
    return None if math.isnan(tau) else float(tau)

