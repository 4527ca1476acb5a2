"""Pareto analysis of (metric, latency) results: higher metric and lower latency are better."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["pareto_mask", "front_at_latency"]


def pareto_mask(metric: Sequence[float], latency: Sequence[float]) -> np.ndarray:
    """True for each point no other point dominates (at least as good in both, strictly better in one)."""
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    objectives = np.column_stack([-np.asarray(metric, dtype=float), np.asarray(latency, dtype=float)])
    mask = np.zeros(len(objectives), dtype=bool)
    if len(objectives):
        mask[NonDominatedSorting().do(objectives, only_non_dominated_front=True)] = True
    return mask


def front_at_latency(metric: Sequence[float], latency: Sequence[float], budget_ms: float) -> float | None:
    """The best metric on the front within a latency budget (None when nothing is that fast)."""
    metric, latency = np.asarray(metric, dtype=float), np.asarray(latency, dtype=float)
    ok = latency <= budget_ms
    return float(metric[ok].max()) if ok.any() else None
