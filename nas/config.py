"""Run configs: YAML files mapped onto the dataclasses of the components they configure.

Sections with a `type` (task, space) are checked against the dataclass registered for that name; `search` holds
a sub-section per registered strategy (`nas.strategies.STRATEGIES`, `SearchConfig`); the others are fixed
dataclasses. Unknown keys, wrong types and missing files fail with one line naming the key. Relative paths (data
roots, latency tables) are resolved against the config file's folder.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from hw_cost import CostModelError, CostModelSpec
from search_spaces import SPACES, SpaceConfig
from tasks import TASKS, TaskConfig

from .baseline_entries import BaselineEntry, check_measured_recipes, read_baselines
from .errors import ConfigError, check_bounds
from .rundir import RunDir, load_checkpoint
from .strategies import STRATEGIES, SearchConfig
from .training.finalize import FinalizeConfig
from .training.supernet_training import SANDWICH_SETTINGS, TrainConfig

__all__ = ["ConfigError", "RunConfig", "CostConfig", "ProbeConfig", "load_config", "config_to_yaml", "first_difference",
           "supernet_source", "RUN_DEVICES", "NPU_GENERATIONS"]

#: values of the top-level `device` key
RUN_DEVICES = ("auto", "cpu", "cuda")

#: the NPU generations a run's archs and network baselines are costed on, by VPUNN
NPU_GENERATIONS = ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0")


@dataclass
class CostConfig:
    """Args:
        model: "vpunn:VPU_2_7", "vpunn:VPU_2_0", "vpunn:VPU_4_0", "vpunn:NPU_5_0" (fast variants
            "vpunn:VPU_2_7.fast", "vpunn:VPU_2_0.fast") or "lut:path.json".
        dtype: inference precision for VPUNN ("uint8" or "fp16"); a LUT carries its own.
        model_dir: folder of the VPUNN model files (default: $VPUNAS_VPUNN_DIR, else the files shipped in
            hw_cost/vpunn/models).
        measure_missing: measure blocks missing from a LUT on this machine instead of failing.
        correct: a LUT is checked at the run's start against `correction_archs` whole networks measured here
            (seconds) and corrected to them when its error exceeds 10 % ("auto"); "always" corrects it whatever its
            error, "never" uses it as measured, unchecked (`nas.latency.lut_validation.correct_for_this_machine`).
        correction_archs: networks measured for that check (the largest, the smallest, random ones).
    """

    model: str = "vpunn:VPU_2_7"
    dtype: str = "uint8"
    model_dir: Optional[str] = None
    measure_missing: bool = False
    correct: str = "auto"
    correction_archs: int = 8

    def __post_init__(self):
        try:
            lut = self.spec.is_table
        except CostModelError as exc:
            raise ValueError(f"model: {exc}") from None
        if self.dtype not in ("uint8", "fp16"):
            raise ValueError(f"dtype: {self.dtype!r} is not one of uint8, fp16")
        if lut and (self.dtype != "uint8" or self.model_dir):
            raise ValueError("dtype and model_dir configure VPUNN; a latency table carries its own precision")
        if self.measure_missing and not lut:
            raise ValueError("measure_missing applies to latency tables (lut:), not to VPUNN")
        if self.correct not in ("auto", "always", "never"):
            raise ValueError(f"correct: {self.correct!r} is not one of auto, always, never")
        if self.correct == "always" and not lut:
            raise ValueError("correct: always applies to latency tables (lut:); VPUNN predicts the NPU, not this "
                             "machine")
        check_bounds(self, at_least={"correction_archs": 3})

    @property
    def spec(self) -> CostModelSpec:
        """`model` read into its kind and argument (checked when the config loads)."""
        return CostModelSpec.parse(self.model)

    def options(self) -> dict:
        """Keyword options of `hw_cost.load_cost_model` for the run's cost model."""
        if self.spec.is_table:
            return {"measure_missing": self.measure_missing}
        return self.vpunn_options()

    def vpunn_options(self) -> dict:
        """Keyword options of a VPUNN model of the run (its own, or one of `NPU_GENERATIONS` beside a table)."""
        return {"dtype": self.dtype, **({"model_dir": self.model_dir} if self.model_dir else {})}


@dataclass
class ProbeConfig:
    """The probe set that rates the supernet's ranking (`nas.ranking.probe`).

    Args:
        archs: archs of the probe set (0: no probe set).
        epochs: epochs each is trained from scratch with the run's recipe (`train`); None = the finalisation's
            (`search.finalize.epochs`; the supernet's and finalisation's most epochs without finalisation).
        resamples: bootstrap resamples of the intervals.
        within_limit: spread the archs over the search's latency window (from the smallest arch to the largest
            within the latency limit) instead of the whole space: where the search ranks.
    """

    archs: int = 24
    epochs: Optional[float] = None
    resamples: int = 2000
    within_limit: bool = False

    def __post_init__(self):
        if self.archs < 0 or self.archs == 1:
            raise ValueError("archs: must be 0 (no probe set) or >= 2")
        if self.epochs is not None and not self.epochs > 0:
            raise ValueError("epochs: must be > 0 (or null for the finalised archs' epochs)")
        check_bounds(self, at_least={"resamples": 100})


@dataclass
class _TopLevel:
    name: str = "run"
    seed: int = 0
    threads: int = 0
    adapt_threads: bool = True
    device: str = "auto"
    baseline_workers: int = 0
    supernet_from: Optional[str] = None
    probe: Any = None
    task: Any = None
    space: Any = None
    train: Any = None
    search: Any = None
    cost: Any = None
    baselines: Any = None


def _task_configs() -> dict[str, type]:
    return {name: kind.config_class for name, kind in TASKS.items()}


def _search_config(raw: Any):
    """The `search` section: `strategy`, one sub-section per registered strategy (`nas.strategies.STRATEGIES`),
    `finalize` (see `SearchConfig`)."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"search: expected a mapping, got {type(raw).__name__}")
    valid = ["strategy", *STRATEGIES, "finalize"]
    unknown = [k for k in raw if k not in valid]
    if unknown:
        raise ConfigError(f"search: unknown key '{unknown[0]}' (valid: {', '.join(valid)}); a strategy's settings "
                          f"go in the sub-section of its name, e.g. search.evolution.{unknown[0]}")
    strategy = raw.get("strategy", "evolution")
    if strategy not in STRATEGIES:
        raise ConfigError(f"search.strategy: unknown {strategy!r}; valid: {', '.join(sorted(STRATEGIES))}")
    settings = {name: _structured(cls.config_class, raw.get(name), f"search.{name}")
                for name, cls in STRATEGIES.items()}
    return SearchConfig(strategy=strategy, strategies=settings,
                        finalize=_structured(FinalizeConfig, raw.get("finalize"), "search.finalize"))


@dataclass
class RunConfig:
    """A resolved run config: every section is an instance of its component's dataclass.

    Args:
        name: the run's name (default output folder runs/<name>).
        seed: seeds data splits, training, search; the same seed and threads give the same results.
        threads: torch intra-op threads; 0 = pick by a short probe (recorded in the run's config.yaml).
        baselines: reference models marked on the front, e.g. {name: largest, arch: largest}
            (`nas.baseline_entries`).
        adapt_threads: training drops to 1 thread while another process slows it down (`nas.runtime.
            ThreadGovernor`, logged); false keeps `threads` fixed, for bit-identical results on a busy machine.
        device: where supernet training, evaluation, finalisation and the baselines run: "cpu", "cuda", or "auto"
            (CUDA when torch finds a device; resolved when the run starts and recorded in its config.yaml).
        baseline_workers: processes that train the cached baselines (reference, zoo) beside the search from the
            run's start, sharing a GPU that small nets leave idle (`nas.baselines.workers`); 0 = none: they train
            one after another after finalisation (on a CPU the search needs its cores).
        supernet_from: the folder of a run whose trained supernet this run takes instead of training its own
            (OFA's "train once, search many"): its task, space, train section and seed must be this run's
            (`supernet_source`); None = train one.
        probe: the probe set that rates the supernet's ranking against archs trained alone (`nas.ranking.probe`).
    """

    name: str
    seed: int
    threads: int
    task: TaskConfig
    space: SpaceConfig
    train: TrainConfig
    search: SearchConfig
    cost: CostConfig
    baselines: list[BaselineEntry] = field(default_factory=list)
    adapt_threads: bool = True
    device: str = "auto"
    baseline_workers: int = 0
    supernet_from: Optional[str] = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value):
    if isinstance(value, SearchConfig):  # every strategy's settings in a sub-section of its name
        return {k: _plain(v) for k, v in value.sections().items()}
    if isinstance(value, BaselineEntry):  # as the config wrote it
        return _plain(value.to_dict())
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def config_to_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=None, width=110)


def _structured(cls: type, raw: Any, where: str):
    """Instance of dataclass `cls` from a raw mapping; one-line ConfigError naming the key on failure."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), OmegaConf.create(raw)))
    except ConfigKeyError as exc:
        owner = getattr(exc, "object_type", None) or cls
        valid = ", ".join(f.name for f in dataclasses.fields(owner)) if dataclasses.is_dataclass(owner) else ""
        key = str(exc).splitlines()[0].split("'")[1] if "'" in str(exc) else exc.full_key
        raise ConfigError(f"{where}: unknown key '{key}'" + (f" (valid: {valid})" if valid else "")) from None
    except OmegaConfBaseException as exc:
        msg = str(exc).splitlines()[0]
        key = f"{where}.{exc.full_key}" if exc.full_key else where
        raise ConfigError(f"{key}: {msg}") from None
    except ValueError as exc:  # a dataclass's own __post_init__ check
        raise ConfigError(f"{where}.{exc}") from None


def _dispatch(raw: Any, where: str, type_key: str, registry: dict[str, type], default: str):
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    name = raw.get(type_key, default)
    if name not in registry:
        raise ConfigError(f"{where}.{type_key}: unknown {name!r}; valid: {', '.join(sorted(registry))}")
    return _structured(registry[name], {**raw, type_key: name}, where)


def _apply_overrides(raw: dict, overrides: list[str]) -> dict:
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value")
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = _child_section(node, part, key)
        if isinstance(node, list):
            node, parts[-1] = _list_slot(node, parts[-1], key)
        try:
            node[parts[-1]] = yaml.safe_load(value) if value != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {key}: value is not valid YAML ({exc.problem})") from None
    return raw


def _list_slot(node: list, part: str, key: str) -> tuple[list, int]:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override {key}: {part} is not an index of a list of {len(node)}")
    return node, int(part)


def _child_section(node: dict | list, part: str, key: str) -> dict | list:
    """The section or list `part` of `node` (a list's item by its index: space.stages.0.depths=[1, 2]), made
    if absent."""
    if isinstance(node, list):
        node, part = _list_slot(node, part, key)
        child = node[part]
    else:
        child = node.setdefault(part, {})
    if not isinstance(child, (dict, list)):
        raise ConfigError(f"override {key}: {part} is not a section")
    return child


def _resolve_path(value: str, base: Path) -> str:
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else (base / path).resolve())


def load_space_config(raw: Any) -> SpaceConfig:
    """The space section's dataclass (by its `type`, default mobilenet) from a raw mapping."""
    return _dispatch(raw, "space", "type", {name: family.config_class for name, family in SPACES.items()}, "mobilenet")


def _read_raw(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """A config file's mapping, on top of the config its `base` key names (a path relative to its folder):
    mappings merge key by key, any other value (a list too) replaces the base's."""
    if not path.is_file():
        raise ConfigError(f"config file {path} not found" + (f" (the base of {chain[-1]})" if chain else ""))
    if path.resolve() in chain:
        raise ConfigError(f"{path}: its base chain comes back to it")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected the path of a config file, got {base!r}")
    return _merged(_read_raw(path.parent / base, (*chain, path.resolve())), raw)


def _merged(base: dict, top: dict) -> dict:
    """`top` over `base`, mapping into mapping; a section that names another `type` than the base's replaces it
    (its keys belong to another component: a hybrid space over a MobileNet one)."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        same_kind = isinstance(value, dict) and isinstance(below, dict) and value.get("type", below.get("type")) == \
            below.get("type")
        out[key] = _merged(below, value) if same_kind else value
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read, override, validate and resolve a run config (see `_read_raw` for a config's `base`)."""
    path = Path(path)
    raw = _apply_overrides(_read_raw(path), list(overrides or []))
    top = _structured(_TopLevel, raw, "config")
    base = path.parent.resolve()
    task = _dispatch(top.task, "task", "type", _task_configs(), "classification")
    if task.root:
        task.root = _resolve_path(task.root, base)
    space = load_space_config(top.space)
    search = _search_config(top.search)
    cost = _structured(CostConfig, top.cost, "cost")
    if cost.spec.is_table:  # a file, named relative to the config
        cost.model = str(dataclasses.replace(cost.spec, argument=_resolve_path(cost.spec.argument, base)))
    if cost.model_dir:
        cost.model_dir = _resolve_path(cost.model_dir, base)
    baselines = read_baselines(top.baselines)
    if top.threads < 0:
        raise ConfigError("threads: must be >= 0 (0 = pick by a probe)")
    if top.device not in RUN_DEVICES:
        raise ConfigError(f"device: unknown {top.device!r}; valid: {', '.join(RUN_DEVICES)}")
    if isinstance(top.baseline_workers, bool) or top.baseline_workers < 0:
        raise ConfigError("baseline_workers: must be a whole number >= 0")
    train = _structured(TrainConfig, top.train, "train")
    probe = _structured(ProbeConfig, top.probe, "probe")
    if not search.strategy_class.uses_sandwich:
        for name in SANDWICH_SETTINGS:
            if getattr(train, name) != getattr(TrainConfig, name):
                raise ConfigError(f"train.{name}: {getattr(train, name)} would be ignored: it sets the supernet "
                                  f"training's sandwich rule, which search.strategy={search.strategy} does not "
                                  f"use; leave it at {getattr(TrainConfig, name)}")
    config = RunConfig(name=top.name, seed=top.seed, threads=top.threads, task=task, space=space, train=train,
                       search=search, cost=cost, baselines=baselines, adapt_threads=top.adapt_threads,
                       device=top.device, baseline_workers=top.baseline_workers,
                       supernet_from=_resolve_path(top.supernet_from, base) if top.supernet_from else None,
                       probe=probe)
    check_measured_recipes(config)
    return config


def first_difference(a, b, prefix: str = "") -> str | None:
    """The dotted key of the first difference between two config mappings (None: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            diff = first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if diff:
                return diff
        return None
    return None if a == b else prefix.rstrip(".")


#: what must equal between a run and the run whose supernet it takes (`supernet_from`)
_SUPERNET_DEFINING = ("seed", "task", "space", "train")


def supernet_source(config: RunConfig) -> Path:
    """The trained supernet checkpoint of `config.supernet_from`, checked to be one this run would train: the
    same seed, task, space and training recipe (ConfigError naming the first difference otherwise)."""
    source = RunDir(config.supernet_from)
    where = f"supernet_from: {source.path}"
    if not source.exists():
        raise ConfigError(f"{where} holds no run (no config.yaml)")
    if not config.search.strategy_class.uses_sandwich:
        raise ConfigError(f"supernet_from: search.strategy={config.search.strategy} trains a supernet of its own")
    theirs, ours = load_config(source.config).to_dict(), config.to_dict()
    diff = first_difference({k: ours[k] for k in _SUPERNET_DEFINING}, {k: theirs[k] for k in _SUPERNET_DEFINING})
    if diff:
        raise ConfigError(f"{where} trained another supernet: its {diff} differs from this run's")
    checkpoint = source.supernet_checkpoint
    if not checkpoint.is_file():
        raise ConfigError(f"{where} has no trained supernet ({checkpoint} missing)")
    steps = load_checkpoint(checkpoint, mmap=True)["global_step"]
    if steps == 0:
        raise ConfigError(f"{where}: its supernet has not trained a step")
    return checkpoint
