"""Reference models marked beside the front, scored with the same data, metric and cost model.

A baseline is a config entry `{name, type, ...}`, read into a typed entry when the config loads
(`nas.baseline_entries`); `type` picks how it is obtained:
* `subnet` (default): an arch of the space (`arch: largest | smallest | {...}`) with inherited weights.
* `standalone`: a network trained from scratch with the run's training recipe and step budget (`train` section,
  the same batches), no weight sharing: an arch of the space (`arch: largest | smallest | {...}`), or an arch
  outside the space's ranges for families that build reference networks (e.g. the EDSR-baseline, 16 blocks x
  64 channels); either starts from the fresh weights a network of its size gets (`SearchSpace.fresh_network`),
  as a `scratch` finalisation's archs do. `epochs:` or `train_steps:` in the entry replaces the recipe's budget
  for that network alone (e.g. the epochs of a `scratch` finalisation, so that the baselines train as long as
  the finalised archs). Training checkpoints under checkpoint/, so an interrupted run resumes it.
* `bicubic`: bicubic upscaling (super-resolution tasks), costed as one upsample layer by the cost model.
* `reference` (classification): a torchvision network, `network: mobilenet_v2` (with `width:`, its multiplier,
  default 1.0), `resnet18`, `resnet34` or `resnet50`, adapted to the task's input (`nas.baselines.reference_networks`:
  grayscale input, total stride 8 for inputs up to 64 px) and trained from scratch exactly as `standalone` is.
* `zoo`: a published network by name, `model:` any timm or torchvision model (`source: timm | torchvision`, default
  whichever knows the name, timm first) with its keyword arguments (`kwargs:`), or for super-resolution `fsrcnn` /
  `espcn`; adapted to the task's input as `nas.baselines.zoo` says and trained from scratch exactly as `standalone` is.
  With `measured:` (its test and val figures measured on another machine at the run's recipe, where and when:
  `nas.baseline_entries.ZooBaseline`) it is not trained: the figures are taken, the network built and costed, and
  baselines.csv's `scores_from` says where the figures come from.

Trained baselines (`standalone`, `reference`, `zoo`) train with the run's recipe (`train` section: optimizer,
batch, augmentation, schedule shape) for as long as the longest-trained arch the run hands over (`matched_epochs`:
the supernet's epochs plus the most finalisation epochs an arch can get, or the finalisation's alone when it
trains from scratch), so that a headline compares like with like; `epochs:` or `train_steps:` in the entry sets
its own budget. Training checkpoints under checkpoint/, so an interrupted run resumes it. The trained weights and
scores of `reference` and `zoo` networks are cached across runs (`nas.baselines.cache`: `$VPUNAS_CACHE`, else
~/.cache/vpunas/baselines), so a run with the same data settings, recipe, seed and input shape does not train them
again; on CUDA, `baseline_workers` processes train them beside the search (`nas.baselines.workers`). A network is
costed whole by the run's cost model (VPUNN costs any network; a latency table only with `cost.measure_missing`)
and, for the report's table per NPU generation, by VPUNN on each generation (`NPU_GENERATIONS`). For example:

    baselines:
      - {name: mnv4-s, type: zoo, model: mobilenetv4_conv_small}
      - {name: mnv2-1.4, type: zoo, model: mobilenet_v2, source: torchvision, kwargs: {width_mult: 1.4}}
      - {name: resnet50, type: reference, network: resnet50}
      - {name: mnv2-0.35-short, type: reference, network: mobilenet_v2, width: 0.35, train_steps: 500}

Every test figure a task reports is recorded (`Task.scores`: super-resolution adds SSIM to PSNR).
baselines.csv gives each baseline its `type`, the `epochs` a trained one trained, and its latency on each NPU
generation (`<device>_ms`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch
import torch.nn as nn

from hw_cost import Block, CostModelError, complexity
from search_spaces import ArchError
from tasks import Task
from tasks.super_resolution import BicubicUpsampler

from ..baseline_entries import (BASELINE_ENTRIES, BaselineEntry, BicubicBaseline, ReferenceBaseline,
                                StandaloneBaseline, SubnetBaseline, TrainedBaseline, ZooBaseline)
from ..config import NPU_GENERATIONS, ConfigError
from ..context import npu_generation_model
from ..records import BaselineResult, write_baseline_results
from ..search_context import SearchContext
from ..training.evaluation import ArchEvaluator, CachedEvaluator, fed_from_cpu, scores_on_test
from .cached_networks import cache_entry, reference_parts, train_cached_network, zoo_parts
from .trainer import baseline_recipe, train_from_scratch

__all__ = ["evaluate_baselines", "check_baselines", "resolve_arch", "BASELINE_TYPES", "TRAINED_TYPES"]


def resolve_arch(space, arch, where: str) -> dict:
    """An arch given as 'largest', 'smallest' or a dict, validated against the space."""
    if arch in ("largest", "smallest"):
        return getattr(space, arch)()
    try:
        return space.validate(arch)
    except ArchError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_subnet(ctx: SearchContext, baseline: SubnetBaseline) -> None:
    resolve_arch(ctx.space, baseline.arch, f"{baseline.where}.arch")


def _subnet(ctx: SearchContext, evaluator: ArchEvaluator,
            baseline: SubnetBaseline) -> tuple[BaselineResult, list[Block]]:
    arch = resolve_arch(ctx.space, baseline.arch, f"{baseline.where}.arch")
    subnet = evaluator.subnet(arch)
    c = evaluator.evaluate(arch, subnet)
    return BaselineResult(baseline.name, baseline.type, c.arch, c.metric, c.score, scores_on_test(ctx.task, subnet),
                          c.latency_ms, c.cost_model, c.params, c.macs, "subnet with inherited weights"), \
        ctx.space.blocks(arch)


def _standalone_network(ctx: SearchContext, baseline: StandaloneBaseline) -> tuple[dict, nn.Module, list, str]:
    """(arch, freshly initialised network, cost blocks, note) of a standalone baseline."""
    where = f"{baseline.where}.arch"
    torch.manual_seed(ctx.config.seed)
    try:
        arch = resolve_arch(ctx.space, baseline.arch, where)
    except ConfigError:
        if not isinstance(baseline.arch, dict):
            raise
        try:  # outside the searched ranges: a family that can builds it directly
            built = ctx.space.reference_network(baseline.arch)
        except ArchError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if built is None:
            raise
        net, blocks = built
        return baseline.arch, net, blocks, "reference network outside the space"
    return arch, ctx.space.fresh_network(arch), ctx.space.blocks(arch), "arch of the space"


def _check_standalone(ctx: SearchContext, baseline: StandaloneBaseline) -> None:
    _standalone_network(ctx, baseline)


def _standalone(ctx: SearchContext, evaluator: ArchEvaluator,
                baseline: StandaloneBaseline) -> tuple[BaselineResult, list[Block]]:
    arch, net, blocks, origin = _standalone_network(ctx, baseline)
    recipe, budget = baseline_recipe(ctx, baseline)
    model, steps = train_from_scratch(ctx, baseline.name, net, recipe)
    params, macs = complexity(blocks)
    task = ctx.task
    return BaselineResult(baseline.name, baseline.type, arch, task.metric,
                          round(float(task.evaluate(fed_from_cpu(model), "val")), 4), scores_on_test(task, model),
                          round(ctx.cost_model.latency_ms(blocks), 6), ctx.cost_model.name, params, macs,
                          f"{origin}, trained from scratch ({steps} steps, {budget})", round(recipe.epochs, 3)), blocks


def _check_covered(ctx: SearchContext, baseline: BaselineEntry, block, what: str) -> None:
    try:
        ctx.cost_model.check_covers([block])
    except CostModelError:
        raise ConfigError(f"{baseline.where}: {ctx.cost_model.name} cannot cost a whole {what} (a latency "
                          "table holds the blocks of a search space); cost the run with cost.model: vpunn:..., or set "
                          "cost.measure_missing: true to measure it here") from None


def _check_reference(ctx: SearchContext, baseline: ReferenceBaseline) -> None:
    _check_covered(ctx, baseline, reference_parts(ctx.task, baseline).block, baseline.network)


def _check_zoo(ctx: SearchContext, baseline: ZooBaseline) -> None:
    _check_covered(ctx, baseline, zoo_parts(ctx.task, baseline).block, baseline.model)


def _cached(ctx: SearchContext, evaluator: ArchEvaluator,
            baseline: ReferenceBaseline | ZooBaseline) -> tuple[BaselineResult, list[Block]]:
    entry = cache_entry(ctx, baseline)
    scores, steps = train_cached_network(ctx, baseline.name, entry)  # the cache's: metric and test_<name>
    block = entry.parts.block
    params, macs = complexity([block])
    metric = ctx.task.metric
    test = {k.removeprefix("test_"): v for k, v in scores.items() if k.startswith("test_")}
    return BaselineResult(baseline.name, baseline.type, entry.parts.identity, metric, scores[metric], test,
                          round(ctx.cost_model.latency_ms([block]), 6), ctx.cost_model.name, params, macs,
                          f"{entry.parts.note}, trained from scratch ({steps} steps, {entry.budget})",
                          round(entry.recipe.epochs, 3)), [block]


def _zoo(ctx: SearchContext, evaluator: ArchEvaluator, baseline: ZooBaseline) -> tuple[BaselineResult, list[Block]]:
    """A zoo network trained for the run (or from the cache), or with the figures its entry says were measured
    elsewhere at the run's recipe (`measured`): then it is only built and costed, and `scores_from` says where the
    figures come from."""
    if baseline.measured is None:
        return _cached(ctx, evaluator, baseline)
    parts, metric = zoo_parts(ctx.task, baseline), ctx.task.metric
    params, macs = complexity([parts.block])
    return BaselineResult(baseline.name, baseline.type, parts.identity, metric, baseline.measured.get("val"),
                          {metric: baseline.measured["test"]}, round(ctx.cost_model.latency_ms([parts.block]), 6),
                          ctx.cost_model.name, params, macs,
                          f"{parts.note}, figures measured elsewhere (not trained in this run)",
                          round(float(baseline.measured["recipe"]["epochs"]), 3),
                          scores_from=baseline.provenance), [parts.block]


def _check_bicubic(ctx: SearchContext, baseline: BicubicBaseline) -> None:
    if ctx.task.scale is None:
        raise ConfigError(f"{baseline.where}: type bicubic needs a super-resolution task")


def _bicubic(ctx: SearchContext, evaluator: ArchEvaluator,
             baseline: BicubicBaseline) -> tuple[BaselineResult, list[Block]]:
    task: Task = ctx.task
    # on the device bicubic upscaling is one interpolation layer (the cost model's rule for 'upsample')
    latency = ctx.cost_model.model_latency_ms(nn.Upsample(scale_factor=task.scale, mode="bicubic"),
                                              (1, *task.input_shape))
    model = BicubicUpsampler(task.scale)
    return BaselineResult(baseline.name, baseline.type, {}, task.metric, round(float(task.evaluate(model, "val")), 4),
                          scores_on_test(task, model), round(latency, 6), ctx.cost_model.name, 0, 0,
                          f"bicubic upscaling x{task.scale} (MATLAB imresize kernel)"), \
        [Block("bicubic|x{task.scale}|in" + "x".join(map(str, task.input_shape)), (1, *task.input_shape),
               lambda: nn.Upsample(scale_factor=task.scale, mode="bicubic"))]


#: type (`nas.baseline_entries.BASELINE_ENTRIES`) -> (check of an entry against the run, made before any work;
#: scoring: the result and the cost blocks of the network)
BASELINE_TYPES: dict[str, tuple[Callable, Callable]] = {SubnetBaseline.type: (_check_subnet, _subnet),
                                                        StandaloneBaseline.type: (_check_standalone, _standalone),
                                                        BicubicBaseline.type: (_check_bicubic, _bicubic),
                                                        ReferenceBaseline.type: (_check_reference, _cached),
                                                        ZooBaseline.type: (_check_zoo, _zoo)}
#: types trained from scratch for the run (`matched_epochs`)
TRAINED_TYPES = tuple(kind for kind, cls in BASELINE_ENTRIES.items() if issubclass(cls, TrainedBaseline))


def check_baselines(ctx: SearchContext) -> None:
    """Every baseline valid for the run's task, space and cost model (an arch of the space, a network the task
    trains and the cost model costs): a mistake fails before any training, not after the search. What an entry
    says on its own is checked when the config loads (`nas.baseline_entries.read_baseline_results`)."""
    for baseline in ctx.config.baselines:
        BASELINE_TYPES[baseline.type][0](ctx, baseline)


def _latency_per_generation(ctx: SearchContext) -> Callable[[list[Block]], dict[str, float]]:
    """blocks -> {device: VPUNN latency} for every `NPU_GENERATIONS` device, at the run's precision."""
    models = {}

    def latencies(blocks: list[Block]) -> dict[str, float]:
        out = {}
        for device in NPU_GENERATIONS:
            if device not in models:
                models[device] = npu_generation_model(ctx.config.cost, device)
            out[device] = round(float(models[device].latency_ms(blocks)), 6)
        return out

    return latencies


def evaluate_baselines(ctx: SearchContext, evaluator: ArchEvaluator, workers=None) -> list[BaselineResult]:
    """Score every configured baseline (journaled, so a resumed run does not repeat them); write baselines.csv.
    `workers` (`nas.baselines.workers.BaselineWorkers`), when the run started some, are waited for first: what
    they trained is in the cache then."""
    check_baselines(ctx)
    if workers is not None:
        workers.wait()
    metric = ctx.task.metric
    baselines = {baseline.name: baseline for baseline in ctx.config.baselines}
    per_generation = _latency_per_generation(ctx)

    def score(baseline: BaselineEntry) -> BaselineResult:
        result, blocks = BASELINE_TYPES[baseline.type][1](ctx, evaluator, baseline)
        return replace(result, device_ms=per_generation(blocks))

    journal = CachedEvaluator(lambda name: score(baselines[name]), ctx.run_dir.baseline_journal,
                              key=lambda name: name, encode=BaselineResult.journal_entry,
                              decode=lambda entry: BaselineResult.from_journal(entry, metric))
    results = [journal(name) for name in baselines]
    write_baseline_results(ctx.run_dir.baselines, results, metric, NPU_GENERATIONS)
    return results
