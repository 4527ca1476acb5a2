"""An accuracy predictor fitted on archs trained alone: ranks archs where the supernet's inherited metric does not.

OFA (Cai et al., 2020) ranks archs with an MLP on the arch encoding, fitted on thousands of subnets; a probe set
(`nas.ranking.probe`) gives tens of archs, each trained from scratch. A Gaussian process suits that size: it
interpolates the few fully trained archs and says how sure it is. Its input is what separates archs of one space: the
inherited metric (what the supernet says), the arch's size (log MACs, log params) and its encoding (the space's genes
scaled to [0, 1]); each standardised, one length scale per input (ARD), a white-noise term for the training noise of the
standalone scores, hyperparameters by marginal likelihood (scikit-learn).

`held_out_predictions` gives each probe arch's prediction from a predictor fitted on the others (leave-one-out):
its rank correlation with the standalone metric is the predictor's honest figure, next to the inherited metric's.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from hw_cost import complexity

__all__ = ["AccuracyPredictor", "arch_features", "held_out_predictions"]


def arch_features(space, arch: dict, inherited: float) -> np.ndarray:
    """The predictor's input of `arch`: inherited metric, log10 MACs, log10 params, genes scaled to [0, 1]."""
    params, macs = complexity(space.blocks(arch))
    genes = space.encode(arch) / np.maximum(space.gene_upper_bounds(), 1)
    return np.concatenate([[inherited, np.log10(max(macs, 1)), np.log10(max(params, 1))], genes]).astype(float)


class AccuracyPredictor:
    """A Gaussian process from `arch_features` rows to the standalone metric."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.model = None

    def fit(self, features: np.ndarray, metric: Sequence[float]) -> "AccuracyPredictor":
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        features = np.asarray(features, dtype=float)
        if len(features) < 3:
            raise ValueError(f"an accuracy predictor needs at least 3 trained archs, got {len(features)}")
        kernel = (ConstantKernel(1.0, (1e-2, 1e2)) * RBF(np.ones(features.shape[1]), (1e-1, 1e3))
                  + WhiteKernel(0.1, (1e-4, 1.0)))
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=3, random_state=self.seed)
        self.model = make_pipeline(StandardScaler(), gp)
        with warnings.catch_warnings():  # a length scale at its bound means "this input does not matter"
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model.fit(features, np.asarray(metric, dtype=float))
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("AccuracyPredictor.predict before fit")
        return self.model.predict(np.atleast_2d(np.asarray(features, dtype=float)))


def held_out_predictions(features: np.ndarray, metric: Sequence[float], seed: int = 0) -> np.ndarray:
    """Each row's prediction by a predictor fitted on all the other rows (leave-one-out)."""
    features, metric = np.asarray(features, dtype=float), np.asarray(metric, dtype=float)
    out = np.empty(len(metric))
    for i in range(len(metric)):
        rest = np.arange(len(metric)) != i
        out[i] = AccuracyPredictor(seed).fit(features[rest], metric[rest]).predict(features[i])[0]
    return out
