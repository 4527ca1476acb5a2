"""Reference models marked beside the front, scored with the same data, metric and cost model.

A baseline is a config entry `{name, type, ...}`; `type` picks how it is obtained:
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
  default 1.0), `resnet18`, `resnet34` or `resnet50`, adapted to the task's input (`nas.reference_networks`:
  grayscale input, total stride 8 for inputs up to 64 px) and trained from scratch exactly as `standalone` is
  (the run's recipe and step budget, or the entry's `epochs:` / `train_steps:`, checkpointed under checkpoint/;
  the schedule is stretched to the entry's budget). The trained weights and scores are cached across runs
  (`nas.baseline_cache`: `$VPUNAS_CACHE`, else ~/.cache/vpunas/baselines), so a run with the same data settings,
  recipe, seed and input shape does not train it again. The network is costed
  whole by the run's cost model (VPUNN costs any network; a latency table only with `cost.measure_missing`).
  For example:

      baselines:
        - {name: mnv2-1.4, type: reference, network: mobilenet_v2, width: 1.4}
        - {name: resnet50, type: reference, network: resnet50}
        - {name: mnv2-0.35-short, type: reference, network: mobilenet_v2, width: 0.35, train_steps: 500}

Tasks with a `scores(model, split)` method (super-resolution: PSNR and SSIM) get every test score recorded.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import re
from typing import Callable

import torch
import torch.nn as nn

from hw_cost import CostModelError
from search_spaces import ArchError, Supernet, arch_key

from .baseline_cache import BaselineCache, cache_key
from .config import ConfigError
from .evaluation import ArchEvaluator, CachedEvaluator, complexity, fed_from_cpu, test_scores
from .reference_networks import check_reference, describe_reference, reference_block, reference_network
from .report import write_csv
from .supernet_training import SupernetTrainer, TrainConfig

logger = logging.getLogger(__name__)

__all__ = ["evaluate_baselines", "check_baselines", "BASELINE_TYPES", "resolve_arch"]


def resolve_arch(space, arch, where: str) -> dict:
    """An arch given as 'largest', 'smallest' or a dict, validated against the space."""
    if arch in ("largest", "smallest"):
        return getattr(space, arch)()
    try:
        return space.validate(arch)
    except ArchError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_keys(spec: dict, valid: set[str]) -> None:
    unknown = set(spec) - valid
    if unknown:
        raise ConfigError(f"baselines[{spec['name']}]: unknown keys {sorted(unknown)} "
                          f"(valid: {', '.join(sorted(valid))})")


def _check_subnet(ctx, spec: dict) -> None:
    _check_keys(spec, {"name", "type", "arch"})
    resolve_arch(ctx.space, spec.get("arch", "largest"), f"baselines[{spec['name']}].arch")


def _subnet(ctx, evaluator: ArchEvaluator, spec: dict) -> dict:
    arch = resolve_arch(ctx.space, spec.get("arch", "largest"), f"baselines[{spec['name']}].arch")
    subnet = evaluator.subnet(arch)
    record = evaluator.evaluate(arch, subnet)
    record.update(test_scores(ctx.task, subnet))
    record["note"] = "subnet with inherited weights"
    return record


class _FixedNetwork(Supernet):
    """A standalone network as a one-arch supernet, so that the supernet trainer's recipe trains it."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def set_active(self, arch: dict) -> None:
        """There is one arch only."""

    def extract(self, arch: dict) -> nn.Module:
        return copy.deepcopy(self.net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class StandaloneTrainer(SupernetTrainer):
    """The supernet recipe (optimizer, schedule, EMA, steps, checkpoints) applied to one network: no sandwich."""

    def step_archs(self, epoch: int, step: int) -> list[dict]:
        return [{}]


def _standalone_network(ctx, spec: dict) -> tuple[dict, nn.Module, list, str]:
    """(arch, freshly initialised network, cost blocks, note) of a standalone baseline."""
    where = f"baselines[{spec['name']}].arch"
    if "arch" not in spec:
        raise ConfigError(f"{where}: a standalone baseline needs an arch (largest, smallest or a dict)")
    torch.manual_seed(ctx.config.seed)
    try:
        arch = resolve_arch(ctx.space, spec["arch"], where)
    except ConfigError:
        if not hasattr(ctx.space, "reference_network") or not isinstance(spec["arch"], dict):
            raise
        try:  # outside the searched ranges: the family builds it directly
            net, blocks = ctx.space.reference_network(spec["arch"])
        except ArchError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return spec["arch"], net, blocks, "reference network outside the space"
    return arch, ctx.space.fresh_network(arch), ctx.space.blocks(arch), "arch of the space"


def _check_standalone(ctx, spec: dict) -> None:
    _check_keys(spec, {"name", "type", "arch", "epochs", "train_steps"})
    _standalone_network(ctx, spec)
    _baseline_recipe(ctx, spec)


def _train_from_scratch(ctx, spec: dict, net: nn.Module, recipe: TrainConfig) -> tuple[nn.Module, int]:
    """`net` trained with `recipe` on the run's batches, checkpointed under checkpoint/ (an interrupted run
    resumes it); returns the weights to evaluate (the EMA when the recipe keeps one) and the steps trained."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec["name"])
    trainer = StandaloneTrainer(ctx.space, _FixedNetwork(net), ctx.task, recipe, ctx.config.seed,
                                ctx.run_dir.checkpoint_dir / f"baseline_{slug}.pt", device=ctx.device)
    trainer.train(progress=ctx.progress)
    return trainer.trained_model.net.eval(), trainer.total_steps


def _standalone(ctx, evaluator: ArchEvaluator, spec: dict) -> dict:
    arch, net, blocks, origin = _standalone_network(ctx, spec)
    model, steps = _train_from_scratch(ctx, spec, net, _baseline_recipe(ctx, spec))
    params, macs = complexity(blocks)
    return {"arch": arch, ctx.task.metric: round(float(ctx.task.evaluate(fed_from_cpu(model), "val")), 4),
            **test_scores(ctx.task, model), "latency_ms": round(ctx.cost_model.latency_ms(blocks), 6),
            "cost_model": ctx.cost_model.name, "params": params, "macs": macs,
            "note": f"{origin}, trained from scratch ({steps} steps, the run's recipe)"}


def _reference_network(ctx, spec: dict) -> dict:
    """The checked {network[, width]} of a reference spec (MobileNetV2's width defaults to 1.0)."""
    where = f"baselines[{spec['name']}]"
    if getattr(ctx.task, "num_classes", 0) < 1:
        raise ConfigError(f"{where}: type reference needs a classification task")
    if "network" not in spec:
        raise ConfigError(f"{where}.network: a reference baseline names its network (e.g. mobilenet_v2, resnet50)")
    try:
        check_reference(spec["network"], spec.get("width"))
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    if spec["network"] == "mobilenet_v2":
        return {"network": "mobilenet_v2", "width": float(spec.get("width", 1.0))}
    return {"network": spec["network"]}


def _baseline_recipe(ctx, spec: dict) -> TrainConfig:
    """The run's recipe, with the entry's own `epochs` or `train_steps` budget when it gives one."""
    where = f"baselines[{spec['name']}]"
    if "epochs" in spec and "train_steps" in spec:
        raise ConfigError(f"{where}: give epochs or train_steps, not both")
    if "train_steps" in spec:
        steps = spec["train_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"{where}.train_steps: expected a whole number >= 1, got {steps!r}")
        return dataclasses.replace(ctx.config.train, epochs=steps / ctx.task.train_batches.steps_per_epoch())
    if "epochs" in spec:
        epochs = spec["epochs"]
        if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0:
            raise ConfigError(f"{where}.epochs: expected a number > 0, got {epochs!r}")
        return dataclasses.replace(ctx.config.train, epochs=float(epochs))
    return ctx.config.train


def _check_reference(ctx, spec: dict) -> None:
    _check_keys(spec, {"name", "type", "network", "width", "epochs", "train_steps"})
    network = _reference_network(ctx, spec)
    _baseline_recipe(ctx, spec)
    block = reference_block(network["network"], ctx.task.input_shape, ctx.task.num_classes, network.get("width"))
    try:
        ctx.cost_model.check_covers([block])
    except CostModelError:
        raise ConfigError(f"baselines[{spec['name']}]: {ctx.cost_model.name} cannot cost a whole "
                          f"{network['network']} (a latency table holds the blocks of a search space); cost the run "
                          "with cost.model: vpunn:..., or set cost.measure_missing: true to measure it here") from None


def _reference(ctx, evaluator: ArchEvaluator, spec: dict) -> dict:
    network = _reference_network(ctx, spec)
    name, width, task, seed = network["network"], network.get("width"), ctx.task, ctx.config.seed
    recipe = _baseline_recipe(ctx, spec)
    cache = BaselineCache()
    key = cache_key(network, task.input_shape, task.num_classes, ctx.config.task, recipe, seed)

    def fresh() -> nn.Module:
        torch.manual_seed(seed)
        return reference_network(name, task.input_shape, task.num_classes, width)

    cached = cache.load(key, fresh())
    if cached is not None:
        logger.info("baselines[%s]: trained weights and scores from the cache (%s)", spec["name"], cache.path(key))
        scores, steps = cached.scores, cached.steps
    else:
        model, steps = _train_from_scratch(ctx, spec, fresh(), recipe)
        scores = {task.metric: round(float(task.evaluate(fed_from_cpu(model), "val")), 4),
                  **test_scores(task, model)}
        logger.info("baselines[%s]: trained %d steps; cached in %s", spec["name"], steps,
                    cache.store(key, model, scores, steps))
    block = reference_block(name, task.input_shape, task.num_classes, width)
    params, macs = complexity([block])
    return {"arch": network, **scores, "latency_ms": round(ctx.cost_model.latency_ms([block]), 6),
            "cost_model": ctx.cost_model.name, "params": params, "macs": macs,
            "note": f"{describe_reference(name, task.input_shape, width)}, trained from scratch ({steps} steps, the "
                    "run's recipe)"}


def _check_bicubic(ctx, spec: dict) -> None:
    _check_keys(spec, {"name", "type"})
    if not hasattr(ctx.task, "bicubic_model"):
        raise ConfigError(f"baselines[{spec['name']}]: type bicubic needs a super-resolution task")


def _bicubic(ctx, evaluator: ArchEvaluator, spec: dict) -> dict:
    task = ctx.task
    # on the device bicubic upscaling is one interpolation layer (the cost model's rule for 'upsample')
    latency = ctx.cost_model.model_latency_ms(nn.Upsample(scale_factor=task.scale, mode="bicubic"),
                                              (1, *task.input_shape))
    model = task.bicubic_model()
    return {"arch": {}, task.metric: round(float(task.evaluate(model, "val")), 4), **test_scores(task, model),
            "latency_ms": round(latency, 6), "cost_model": ctx.cost_model.name, "params": 0, "macs": 0,
            "note": f"bicubic upscaling x{task.scale} (MATLAB imresize kernel)"}


#: type -> (check of a spec, run before any work; scoring)
BASELINE_TYPES: dict[str, tuple[Callable, Callable]] = {"subnet": (_check_subnet, _subnet),
                                                        "standalone": (_check_standalone, _standalone),
                                                        "bicubic": (_check_bicubic, _bicubic),
                                                        "reference": (_check_reference, _reference)}


def check_baselines(ctx) -> None:
    """Every baseline spec valid for the run's task and space (type, keys, arch): a mistake fails before any
    training, not after the search."""
    names = [spec["name"] for spec in ctx.config.baselines]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"baselines: names must be unique; repeated: {', '.join(map(str, repeated))}")
    for spec in ctx.config.baselines:
        kind = spec.get("type", "subnet")
        if kind not in BASELINE_TYPES:
            raise ConfigError(f"baselines[{spec['name']}].type: unknown {kind!r}; valid: {', '.join(BASELINE_TYPES)}")
        BASELINE_TYPES[kind][0](ctx, spec)


def evaluate_baselines(ctx, evaluator: ArchEvaluator) -> list[dict]:
    """Score every configured baseline (journaled, so a resumed run does not repeat them); write baselines.csv."""
    check_baselines(ctx)
    metric = ctx.task.metric
    specs = {spec["name"]: spec for spec in ctx.config.baselines}

    def score(spec: dict) -> dict:
        run = BASELINE_TYPES[spec.get("type", "subnet")][1]
        return dict(run(ctx, evaluator, spec), key=spec["name"], name=spec["name"])

    journal = CachedEvaluator(lambda name: score(specs[name]), ctx.run_dir.baseline_journal, key=lambda name: name)
    rows = [journal(name) for name in specs]
    extra = sorted({k for r in rows for k in r if k.startswith("test_") and k != f"test_{metric}"})
    columns = ["name", metric, f"test_{metric}", *extra, "latency_ms", "cost_model", "params", "macs", "note", "arch"]
    write_csv(ctx.run_dir.baselines, [{c: r.get(c, "") for c in columns} | {"arch": arch_key(r["arch"])} for r in rows],
              columns)
    return rows
