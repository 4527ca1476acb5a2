"""The probe set: how well a run's supernet ranks archs, measured against the same archs trained on their own.

A weight-sharing search chooses by the supernet's ranking (an arch's metric with inherited weights), and that ranking is
only as good as its agreement with what the archs reach when trained alone. Fidelity measured within a run's finalised
archs sees a handful of neighbours on the front; a probe set sees the whole space: `archs` archs spread over its latency
range (the smallest, the largest, the rest drawn in turn from equal latency bins of a pool of uniform draws,
`nas.strategies.random_search.sample_archs`; with `probe.within_limit`, over the search's latency window: the
smallest arch and draws within the latency limit), each trained from scratch with the run's recipe (`train`) for the
finalisation's configured epochs (`search.finalize.epochs`, or `probe.epochs`), as standalone baselines are.

The standalone scores are cached across runs like reference baselines (`nas.baselines.cache`, keyed by the space's
settings, the arch, the task's data settings, the recipe and the seed), so a probe set is trained once and rates the
supernet of every later run of that space and recipe. `vpunas probe RUN_DIR` trains what the cache lacks (an
interrupted arch resumes from RUN_DIR/checkpoint) and writes RUN_DIR/probe.csv; a search run writes it itself when
the cache holds every probe arch. The figures are Kendall tau and Spearman rho between a ranking and the standalone
test metric (`probe_figures`), each with a 95 % percentile bootstrap interval over the archs (`scipy.stats.bootstrap`,
paired): for the inherited metric over the whole set and within the search's latency limit (where the search ranks),
for the accuracy predictor's held-out predictions (`nas.ranking.accuracy_predictor`), and for the standalone val
metric, the ceiling that the val split's noise sets for any ranking scored on it.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from typing import Sequence

import numpy as np

from search_spaces import arch_key

from ..baselines.cache import BaselineCache, cache_key
from ..baselines.cached_networks import CachedNetwork, CacheEntry, train_cached_network
from ..baselines.trainer import matched_epochs
from ..randomness import RunRandom
from ..rundir import read_csv, write_csv
from ..search_context import SearchContext
from ..strategies.random_search import RandomConfig, sample_archs
from ..training.evaluation import ArchEvaluator
from ..training.supernet_training import TrainConfig
from .accuracy_predictor import arch_features, held_out_predictions

logger = logging.getLogger(__name__)

__all__ = ["probe_archs", "probe_entries", "standalone_entry", "ranking_stats", "score_probe", "read_probe",
           "probe_figures", "figure_lines", "format_stat", "PROBE_STATS"]


def probe_archs(space, latency_ms, count: int, seed: int, limit_ms: float | None = None) -> list[dict]:
    """`count` distinct archs of `space` from its smallest to its largest, the rest spread evenly over the latency
    range of a pool of uniform draws (deterministic for a seed). With `limit_ms`, over the search's latency window
    instead: the smallest arch, the rest spread over the pool's draws within the limit."""
    ends = [space.smallest()] + ([space.largest()] if limit_ms is None else [])
    keys = {arch_key(a) for a in ends}
    spread = sample_archs(space, RandomConfig(archs=max(2, count), sampling="latency_bins",
                                              bins=max(1, count - len(ends)), latency_limit_ms=limit_ms),
                          latency_ms, RunRandom(seed).numpy("probe.archs"))
    archs = ends + [a for a in spread if arch_key(a) not in keys]
    return sorted(archs[:count], key=latency_ms)


def _recipe(ctx: SearchContext):
    """The run's training recipe for the probe's epochs (default: the finalisation's configured epochs; without
    finalisation, the supernet's)."""
    config, final = ctx.config, ctx.config.search.finalize
    epochs = config.probe.epochs or (final.epochs if final.archs else matched_epochs(config)[0])
    return dataclasses.replace(config.train, epochs=float(epochs))


def probe_entries(ctx: SearchContext) -> list[tuple[dict, CacheEntry]]:
    """The run's probe archs with their cache entries (network, recipe, key)."""
    space, config = ctx.space, ctx.config
    recipe = _recipe(ctx)
    limit = config.search.finalize_scope()[0] if config.probe.within_limit else None
    return [(arch, standalone_entry(ctx, arch, recipe))
            for arch in probe_archs(space, ctx.latency_ms, config.probe.archs, config.seed, limit)]


def standalone_entry(ctx: SearchContext, arch: dict, recipe: TrainConfig) -> CacheEntry:
    """The cache entry of `arch` of the run's space trained alone with `recipe`: the same entry
    whether a probe set or `scripts/train_alone.py` trains it."""
    space, task, config = ctx.space, ctx.task, ctx.config
    identity = {"network": f"probe-{space.family}", "space": dataclasses.asdict(config.space), "arch": arch}
    parts = CachedNetwork(identity, lambda: space.fresh_network(arch), None, "probe arch")
    key = cache_key(identity, task.input_shape, task.num_outputs, config.task, recipe, config.seed)
    return CacheEntry(parts, recipe, f"the run's recipe for {recipe.epochs:g} epochs", key)


def _kendall(x, y) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(x, y).statistic)


def _spearman(x, y) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


#: the figures of `ranking_stats`: name -> statistic of (ranking, truth)
PROBE_STATS = {"kendall_tau": _kendall, "spearman": _spearman}


def ranking_stats(ranking: Sequence[float], truth: Sequence[float], resamples: int = 2000, seed: int = 0) -> dict:
    """Kendall tau and Spearman rho of `ranking` against `truth`, each with the bounds of its 95 % percentile
    bootstrap interval (`<name>_low`, `<name>_high`; resampled archs, paired). NaN where a figure is undefined
    (fewer than 3 archs, no spread)."""
    from scipy.stats import ConstantInputWarning, DegenerateDataWarning, bootstrap

    x, y = np.asarray(ranking, dtype=float), np.asarray(truth, dtype=float)
    out = {"archs": len(x)}
    with warnings.catch_warnings():  # a resample without spread has no figure: NaN, which the interval shows
        warnings.simplefilter("ignore", ConstantInputWarning)
        warnings.simplefilter("ignore", DegenerateDataWarning)
        for name, statistic in PROBE_STATS.items():
            value = statistic(x, y) if len(x) >= 2 else math.nan
            low = high = math.nan
            if len(x) >= 3 and not math.isnan(value):
                interval = bootstrap((x, y), statistic, paired=True, vectorized=False, n_resamples=resamples,
                                     method="percentile", rng=np.random.default_rng(seed)).confidence_interval
                low, high = float(interval.low), float(interval.high)
            out.update({name: value, f"{name}_low": low, f"{name}_high": high})
    return out


def _standalone_scores(ctx: SearchContext, train: bool) -> list[tuple[dict, dict]] | None:
    """(arch, standalone scores) of every probe arch: cached, or (with `train`) trained now and cached; None when
    the cache lacks one and `train` is off."""
    cache = BaselineCache()
    if not train and not any(cache.folder.glob(f"probe-{ctx.space.family}-*.pt")):
        return None  # the usual case at a run's end: no probe set of this family, so no archs to draw and cost
    entries = probe_entries(ctx)
    if not train and not all(cache.path(entry.key).exists() for _, entry in entries):
        return None
    # named by its cache file, so that a checkpoint under RUN_DIR/checkpoint resumes only the same training
    return [(arch, train_cached_network(ctx, cache.path(entry.key).stem, entry,
                                        label=f"probe arch {i + 1} of {len(entries)}")[0])
            for i, (arch, entry) in enumerate(entries)]


def score_probe(ctx: SearchContext, evaluator: ArchEvaluator, train: bool) -> dict | None:
    """The run's probe set scored on its supernet (`evaluator`, inherited weights) beside the standalone scores and
    the accuracy predictor's held-out predictions: RUN_DIR/probe.csv written (by the main process), the figures
    (`probe_figures`) logged and returned. None without a probe set or, without `train`, when the cache lacks a
    probe arch."""
    metric, space = ctx.task.metric, ctx.space
    standalone = _standalone_scores(ctx, train) if ctx.config.probe.archs else None
    if standalone is None:
        return None
    limit, _ = ctx.config.search.finalize_scope()
    rows, features = [], []
    for arch, scores in standalone:
        candidate = evaluator.evaluate(arch)
        features.append(arch_features(space, arch, candidate.score))
        rows.append({"latency_ms": candidate.latency_ms, "within_limit": limit is None or candidate.latency_ms <= limit,
                     "params": candidate.params, "macs": candidate.macs, f"inherited_{metric}": candidate.score,
                     f"standalone_{metric}": scores[metric], f"standalone_test_{metric}": scores.get(f"test_{metric}", ""),
                     "epochs": _recipe(ctx).epochs, "arch": arch_key(arch)})
    if len(rows) >= MIN_PREDICTOR_ARCHS:
        # fitted on val scores: the test split ranks, it never trains or chooses
        held_out = held_out_predictions(np.array(features), [r[f"standalone_{metric}"] for r in rows], ctx.config.seed)
        for row, value in zip(rows, held_out):
            row[f"held_out_predicted_{metric}"] = round(float(value), 4)
    if ctx.dist.is_main:
        write_csv(ctx.run_dir.probe, rows, list(rows[0]))
    figures = probe_figures(rows, metric, ctx.config.probe.resamples, ctx.config.seed)
    logger.info("probe set: %d archs trained from scratch for %g epochs, against their standalone test %s (95 %% "
                "bootstrap intervals):\n%s\n%s", len(rows), _recipe(ctx).epochs, metric,
                "\n".join(f"  {line}" for line in figure_lines(figures)), ctx.run_dir.probe)
    return figures


#: probe archs needed for the accuracy predictor's held-out figure (one left out, the rest fitted)
MIN_PREDICTOR_ARCHS = 5


def probe_figures(rows: Sequence[dict], metric: str, resamples: int = 2000, seed: int = 0,
                  truth: str = "test") -> dict[str, dict]:
    """What ranks the probe archs how well (`ranking_stats`), against their standalone test metric: the test split
    is the largest (Fashion-MNIST: 10,000 images against the 2,500 val images that score candidates), so it ranks
    archs whose accuracies lie within a point of each other with the least noise. Never used to choose anything.
    The figures: the supernet's inherited metric over all probe archs and over those within the search's latency
    limit, the accuracy predictor's held-out predictions where probe.csv has them, and the standalone val metric
    itself: the most a ranking scored on the val images can reach, what the noise of the val split leaves.
    `truth="val"` ranks against the standalone val metric instead (which shares the val split's noise)."""
    truth_column = {"test": f"standalone_test_{metric}", "val": f"standalone_{metric}"}[truth]

    def stats(subset: Sequence[dict], column: str) -> dict:
        return ranking_stats([float(r[column]) for r in subset], [float(r[truth_column]) for r in subset],
                             resamples, seed)

    figures = {"inherited": stats(rows, f"inherited_{metric}")}
    within = [r for r in rows if str(r["within_limit"]) == "True"]
    if 3 <= len(within) < len(rows):
        figures["inherited, within the latency limit"] = stats(within, f"inherited_{metric}")
    if f"held_out_predicted_{metric}" in rows[0]:
        figures["predictor, held out"] = stats(rows, f"held_out_predicted_{metric}")
    if truth == "test":
        figures["standalone val (the val split's own noise)"] = stats(rows, f"standalone_{metric}")
    return figures


def figure_lines(figures: dict[str, dict]) -> list[str]:
    """One line per figure of `probe_figures`."""
    return [f"{name} ({stats['archs']} archs): Kendall tau {format_stat(stats, 'kendall_tau')}, Spearman "
            f"{format_stat(stats, 'spearman')}" for name, stats in figures.items()]


def format_stat(stats: dict, name: str) -> str:
    """'0.612 [0.41, 0.78]' (or 'n/a')."""
    value, low, high = stats[name], stats[f"{name}_low"], stats[f"{name}_high"]
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f}" + ("" if math.isnan(low) else f" [{low:.2f}, {high:.2f}]")


def read_probe(run_dir, metric: str, resamples: int = 2000, seed: int = 0) -> tuple[list[dict], dict] | None:
    """A run's probe.csv and its figures (`probe_figures`), or None when it has none."""
    if not run_dir.probe.exists():
        return None
    rows = read_csv(run_dir.probe)
    return (rows, probe_figures(rows, metric, resamples, seed)) if rows else None
