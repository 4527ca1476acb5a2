"""The cached baselines (`reference`, `zoo`): their networks, their entries in the cache of trained baselines
(`nas.baselines.cache`), and their training when the cache lacks them."""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable

import timm
import torch
import torch.nn as nn

from tasks import Task

from ..baseline_entries import ReferenceBaseline, ZooBaseline
from ..config import ConfigError
from ..search_context import SearchContext
from ..training.evaluation import fed_from_cpu, test_scores
from ..training.supernet_training import TrainConfig
from .cache import BaselineCache, cache_key
from .reference_networks import check_reference, describe_reference, reference_block, reference_network
from .trainer import baseline_recipe, train_from_scratch
from .zoo import ZooError, describe_zoo, resolve_source, zoo_block, zoo_network

logger = logging.getLogger(__name__)

__all__ = ["CachedNetwork", "CacheEntry", "CACHED_TYPES", "cached_network_parts", "reference_parts", "zoo_parts",
           "cache_entry", "cached_baseline_path", "train_cached_baseline", "train_cached_network"]


@dataclasses.dataclass
class CachedNetwork:
    """What a cached baseline (`reference`, `zoo`) is: its identity in the cache, a fresh network, its cost
    block and its description."""

    identity: dict
    fresh: Callable[[], nn.Module]
    block: object
    note: str


def _reference_network(task: Task, baseline: ReferenceBaseline) -> dict:
    """The checked {network[, width]} of a reference baseline (MobileNetV2's width defaults to 1.0)."""
    if task.num_classes < 1:
        raise ConfigError(f"{baseline.where}: type reference needs a classification task")
    try:
        check_reference(baseline.network, baseline.width)
    except ValueError as exc:
        raise ConfigError(f"{baseline.where}.{exc}") from None
    if baseline.network == "mobilenet_v2":
        return {"network": "mobilenet_v2", "width": float(1.0 if baseline.width is None else baseline.width)}
    return {"network": baseline.network}


def reference_parts(task: Task, baseline: ReferenceBaseline) -> CachedNetwork:
    """The network of a `reference` baseline, checked against the run's task."""
    network = _reference_network(task, baseline)
    name, width = network["network"], network.get("width")
    return CachedNetwork(network, lambda: reference_network(name, task.input_shape, task.num_classes, width),
                          reference_block(name, task.input_shape, task.num_classes, width),
                          describe_reference(name, task.input_shape, width))


def _zoo_settings(task: Task, baseline: ZooBaseline) -> dict:
    """The checked {model, source, kwargs[, scale]} of a zoo baseline."""
    model, kwargs = baseline.model, baseline.kwargs or {}
    try:
        if task.scale is not None:  # super-resolution: the networks built here
            if baseline.source is not None:
                raise ZooError("source: super-resolution networks are built in vpunas (fsrcnn, espcn)")
            settings = {"model": model, "source": "vpunas", "kwargs": kwargs, "scale": task.scale}
            zoo_network(model, task.input_shape, task.num_outputs, kwargs=kwargs, scale=task.scale)
        elif task.num_classes >= 1:
            source = resolve_source(model, "auto" if baseline.source is None else baseline.source)
            settings = {"model": model, "source": source, "kwargs": kwargs}
            zoo_network(model, task.input_shape, task.num_classes, source=source, kwargs=kwargs)
        else:
            raise ZooError("type: zoo needs a classification or super-resolution task")
    except ZooError as exc:
        raise ConfigError(f"{baseline.where}.{exc}") from None
    return settings


def zoo_parts(task: Task, baseline: ZooBaseline) -> CachedNetwork:
    """The network of a `zoo` baseline, checked against the run's task (it is built once to be sure)."""
    settings = _zoo_settings(task, baseline)
    model, kwargs, scale = settings["model"], settings["kwargs"], settings.get("scale")
    source = "auto" if scale is not None else settings["source"]
    outputs = task.num_outputs
    identity = {"network": f"zoo-{model}", **settings, "timm": timm.__version__}
    return CachedNetwork(identity,
                          lambda: zoo_network(model, task.input_shape, outputs, source=source, kwargs=kwargs,
                                              scale=scale),
                          zoo_block(model, task.input_shape, outputs, source=source, kwargs=kwargs, scale=scale),
                          describe_zoo(model, task.input_shape, source=source, kwargs=kwargs, scale=scale))


#: cached baseline types -> what their networks are
_CACHED_PARTS = {ReferenceBaseline.type: reference_parts, ZooBaseline.type: zoo_parts}
#: the baseline types cached across runs
CACHED_TYPES = tuple(_CACHED_PARTS)


def cached_network_parts(task: Task, baseline: ReferenceBaseline | ZooBaseline) -> CachedNetwork:
    """The network of a cached baseline (`reference` or `zoo`), checked against the run's task."""
    return _CACHED_PARTS[baseline.type](task, baseline)


@dataclasses.dataclass
class CacheEntry:
    """A `reference` or `zoo` baseline as the cache knows it: its network, recipe (with its budget in words) and
    key."""

    parts: CachedNetwork
    recipe: TrainConfig
    budget: str
    key: dict


def cache_entry(ctx: SearchContext, baseline: ReferenceBaseline | ZooBaseline) -> CacheEntry:
    """A cached baseline's network, the run's recipe for its budget, and its key in the cache."""
    parts, task = cached_network_parts(ctx.task, baseline), ctx.task
    recipe, budget = baseline_recipe(ctx, baseline)
    return CacheEntry(parts, recipe, budget, cache_key(parts.identity, task.input_shape, task.num_outputs,
                                                        ctx.config.task, recipe, ctx.config.seed))


def cached_baseline_path(ctx: SearchContext, baseline: ReferenceBaseline | ZooBaseline):
    """The cache file a `reference` or `zoo` baseline is (or will be) stored in."""
    return BaselineCache().path(cache_entry(ctx, baseline).key)


def train_cached_baseline(ctx: SearchContext, baseline: ReferenceBaseline | ZooBaseline) -> tuple[dict, int]:
    """The scores and training steps of a `reference` or `zoo` baseline: from the cache, or trained now and
    cached."""
    return train_cached_network(ctx, baseline.name, cache_entry(ctx, baseline))


def train_cached_network(ctx: SearchContext, name: str, entry: CacheEntry,
                         label: str | None = None) -> tuple[dict, int]:
    """The scores and training steps of the network `entry` describes (a cached baseline's, a probe arch's): from
    the cache, or trained now (checkpointed under checkpoint/ as `name`) and cached. `label`: what the log calls
    it (default `baselines[<name>]`)."""
    log_label = label or f"baselines[{name}]"
    task, seed, cache = ctx.task, ctx.config.seed, BaselineCache()

    def fresh() -> nn.Module:
        torch.manual_seed(seed)
        return entry.parts.fresh()

    cached = cache.load(entry.key, fresh())
    if cached is not None:
        logger.info("%s: trained weights and scores from the cache (%s)", log_label, cache.path(entry.key))
        return cached.scores, cached.steps
    model, steps = train_from_scratch(ctx, name, fresh(), entry.recipe, label)
    scores = {task.metric: round(float(task.evaluate(fed_from_cpu(model), "val")), 4), **test_scores(task, model)}
    logger.info("%s: trained %d steps; cached in %s", log_label, steps, cache.store(entry.key, model, scores, steps))
    return scores, steps
