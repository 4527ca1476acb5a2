"""How far a latency table can be trusted: its sums against whole networks measured on the same device."""
from __future__ import annotations

import logging

import numpy as np

from hw_cost.lut import LatencyTable, LutCostModel
from hw_cost.profiler import MeasureSettings, OpenVinoProfiler
from search_spaces import SearchSpace

logger = logging.getLogger(__name__)

__all__ = ["validate_table"]


def validate_table(space: SearchSpace, table: LatencyTable, settings: MeasureSettings, n_archs: int,
                   seed: int = 0) -> dict:
    """Measure `n_archs` archs (largest, smallest, random) as whole networks and compare with the table's sums.

    Returns the Kendall rank correlation, the mean absolute percentage error and the per-arch figures.
    """
    from scipy.stats import kendalltau

    rng = np.random.default_rng([seed, 23])
    archs = [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(max(0, n_archs - 2))]
    supernet = space.build_supernet().eval()
    profiler = OpenVinoProfiler(settings)
    model = LutCostModel(table)
    predicted, measured = [], []
    for arch in archs[:n_archs]:
        predicted.append(model.latency_ms(space.blocks(arch)))
        measured.append(profiler.measure(supernet.extract(arch), (1, *space.input_shape)).median_ms)
    predicted, measured = np.array(predicted), np.array(measured)
    tau = float(kendalltau(predicted, measured).statistic) if len(archs) > 2 else float("nan")
    error = np.abs(predicted - measured) / measured * 100
    logger.info("LUT check: tau %.3f, mean |error| %.1f%%", tau, error.mean())
    return {"archs": len(predicted), "kendall_tau": round(tau, 4), "mean_abs_pct_error": round(float(error.mean()), 2),
            "predicted_ms": np.round(predicted, 4).tolist(), "measured_ms": np.round(measured, 4).tolist()}
