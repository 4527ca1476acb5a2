"""Reference models marked beside the front, scored with the same data, metric and cost model.

A baseline is a config entry `{name, type, ...}`; `type` picks how it is obtained:
* `subnet` (default): an arch of the space (`arch: largest | smallest | {...}`) with inherited weights.
"""
from __future__ import annotations

import logging
from typing import Callable

from search_spaces import ArchError, arch_key

from .config import ConfigError
from .evaluation import ArchEvaluator, CachedEvaluator
from .report import write_csv

logger = logging.getLogger(__name__)

__all__ = ["evaluate_baselines", "BASELINE_TYPES", "resolve_arch"]


def resolve_arch(space, arch, where: str) -> dict:
    """An arch given as 'largest', 'smallest' or a dict, validated against the space."""
    if arch in ("largest", "smallest"):
        return getattr(space, arch)()
    try:
        return space.validate(arch)
    except ArchError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _subnet(ctx, evaluator: ArchEvaluator, spec: dict) -> dict:
    unknown = set(spec) - {"name", "type", "arch"}
    if unknown:
        raise ConfigError(f"baselines[{spec['name']}]: unknown keys {sorted(unknown)} (valid: name, type, arch)")
    arch = resolve_arch(ctx.space, spec.get("arch", "largest"), f"baselines[{spec['name']}].arch")
    record = evaluator.evaluate(arch)
    record[f"test_{ctx.task.metric}"] = round(evaluator.metric(arch, "test"), 4)
    record["note"] = "subnet with inherited weights"
    return record


BASELINE_TYPES: dict[str, Callable] = {"subnet": _subnet}


def evaluate_baselines(ctx, evaluator: ArchEvaluator) -> list[dict]:
    """Score every configured baseline (journaled, so a resumed run does not repeat them); write baselines.csv."""
    metric = ctx.task.metric
    specs = {spec["name"]: spec for spec in ctx.config.baselines}

    def score(spec: dict) -> dict:
        kind = spec.get("type", "subnet")
        if kind not in BASELINE_TYPES:
            raise ConfigError(f"baselines[{spec['name']}].type: unknown {kind!r}; valid: {', '.join(BASELINE_TYPES)}")
        return dict(BASELINE_TYPES[kind](ctx, evaluator, spec), key=spec["name"], name=spec["name"])

    journal = CachedEvaluator(lambda name: score(specs[name]), ctx.run_dir.baseline_journal, key=lambda name: name)
    rows = [journal(name) for name in specs]
    columns = ["name", metric, f"test_{metric}", "latency_ms", "cost_model", "params", "macs", "note", "arch"]
    write_csv(ctx.run_dir.baselines, [{c: r.get(c, "") for c in columns} | {"arch": arch_key(r["arch"])} for r in rows],
              columns)
    return rows
