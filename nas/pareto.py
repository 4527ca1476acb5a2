"""Pareto analysis of (metric, latency) results: higher metric and lower latency are better."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["pareto_mask"]


def pareto_mask(metric: Sequence[float], latency: Sequence[float]) -> np.ndarray:
    """True for each point no other point dominates (at least as good in both, strictly better in one)."""
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    objectives = np.column_stack([-np.asarray(metric, dtype=float), np.asarray(latency, dtype=float)])
    mask = np.zeros(len(objectives), dtype=bool)
    if len(objectives):
        mask[NonDominatedSorting().do(objectives, only_non_dominated_front=True)] = True
    return mask

