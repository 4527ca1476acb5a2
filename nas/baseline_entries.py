"""The `baselines:` entries of a run config as typed entries, one dataclass per `type`, read when the config loads.

`read_baselines` checks what an entry says on its own (its type, keys, budget, a unique name) with one line naming
the entry (`baselines[<name>]...`), and `check_measured_recipes` a zoo entry's figures measured elsewhere against
the run's recipe, when the whole config has loaded; what an entry means for the run's task, space and cost model
(an arch of the space, a network the task can train, a block the cost model can cost) is checked when the run
starts (`nas.baselines.check_baselines`). `nas.baselines.scoring` says what each type is and how it is scored.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Real
from typing import Any, ClassVar, Optional, Union

from .errors import ConfigError

__all__ = ["BaselineEntry", "TrainedBaseline", "SubnetBaseline", "StandaloneBaseline", "BicubicBaseline",
           "ReferenceBaseline", "ZooBaseline", "BASELINE_ENTRIES", "MEASURED_RECIPE", "read_baselines",
           "matched_epochs", "check_measured_recipes"]

#: what a zoo entry's `measured.recipe` gives at least: the settings that decide its figures most (`batch_size`
#: and the task's other settings are `task`'s, `seed` the run's, `epochs` the entry's budget, the rest `train`'s)
MEASURED_RECIPE = ("epochs", "batch_size", "opt", "lr", "weight_decay", "seed")


def matched_epochs(config) -> tuple[float, str]:
    """(epochs, in words) of the longest training an arch the run hands over can get: the supernet's epochs
    (`train.epochs`, when finalisation starts from the inherited weights) plus finalisation's most epochs
    (`max_epochs` under a run budget, else `epochs`; none without finalisation). Known from the config alone, so a
    trained baseline's budget, and its cache entry, do not depend on the machine's speed; a budget that shortens
    finalisation on a slow machine only widens the baselines' lead."""
    final = config.search.finalize
    supernet = config.train.epochs if final.init == "inherited" or not final.archs else 0.0
    most = (max(final.epochs, final.max_epochs) if final.run_budget_minutes else final.epochs) if final.archs else 0.0
    parts = ([f"{supernet:g} supernet"] if supernet else []) + ([f"{most:g} finalisation"] if most else [])
    return supernet + most, f"as long as the longest-trained finalised arch: {' + '.join(parts)} epochs"


@dataclass(frozen=True, kw_only=True)
class BaselineEntry:
    """A baseline marked beside the front.

    Args:
        name: its name in baselines.csv and the report (unique within a run).
        written: the keys the config gave it, in their order: the run's config.yaml records the entry as written
            (`to_dict`), a `type` left out included. An entry made in code writes its name, its type and the
            values that are not the defaults.
    """

    type: ClassVar[str]
    #: its arch is one of the space's family (a report draws it as the family draws its archs)
    family_arch: ClassVar[bool] = False
    name: str
    written: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.written:
            given = [f.name for f in dataclasses.fields(self)
                     if f.name not in ("name", "written") and getattr(self, f.name) != f.default]
            object.__setattr__(self, "written", ("name", "type", *given))

    @property
    def where(self) -> str:
        """How errors name the entry."""
        return f"baselines[{self.name}]"

    def to_dict(self) -> dict:
        """The entry's mapping as the config wrote it."""
        return {key: self.type if key == "type" else getattr(self, key) for key in self.written}

    def _check(self) -> None:
        """ConfigError (one line) when the entry's own values do not fit its type."""


@dataclass(frozen=True, kw_only=True)
class SubnetBaseline(BaselineEntry):
    """`subnet` (the default type): an arch of the space (`largest`, `smallest` or a mapping) with the supernet's
    weights."""

    type: ClassVar[str] = "subnet"
    family_arch: ClassVar[bool] = True
    arch: Union[str, dict] = "largest"


@dataclass(frozen=True, kw_only=True)
class TrainedBaseline(BaselineEntry):
    """A network trained from scratch with the run's recipe (`train`) for `nas.baselines.matched_epochs`, or for
    the entry's own `epochs` or `train_steps` (one of them, not both)."""

    epochs: Optional[float] = None
    train_steps: Optional[int] = None

    @property
    def trained_here(self) -> bool:
        """The run trains the network (or takes it from the cache of trained baselines)."""
        return True

    def _check(self) -> None:
        if self.epochs is not None and self.train_steps is not None:
            raise ConfigError(f"{self.where}: give epochs or train_steps, not both")
        steps, epochs = self.train_steps, self.epochs
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ConfigError(f"{self.where}.train_steps: expected a whole number >= 1, got {steps!r}")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or
                                   not epochs > 0):
            raise ConfigError(f"{self.where}.epochs: expected a number > 0, got {epochs!r}")


@dataclass(frozen=True, kw_only=True)
class StandaloneBaseline(TrainedBaseline):
    """`standalone`: an arch of the space, or one outside its ranges for families that build reference networks
    (`SearchSpace.reference_network`), trained from scratch."""

    type: ClassVar[str] = "standalone"
    family_arch: ClassVar[bool] = True
    arch: Union[str, dict, None] = None

    def _check(self) -> None:
        if self.arch is None:
            raise ConfigError(f"{self.where}.arch: a standalone baseline needs an arch (largest, smallest or a dict)")
        super()._check()


@dataclass(frozen=True, kw_only=True)
class BicubicBaseline(BaselineEntry):
    """`bicubic`: bicubic upscaling, for super-resolution tasks."""

    type: ClassVar[str] = "bicubic"


@dataclass(frozen=True, kw_only=True)
class ReferenceBaseline(TrainedBaseline):
    """`reference`: a torchvision network adapted to the task's input (`nas.baselines.reference_networks`), for
    classification tasks; `width`: MobileNetV2's multiplier (default 1.0)."""

    type: ClassVar[str] = "reference"
    network: Optional[str] = None
    width: Optional[float] = None

    def _check(self) -> None:
        if self.network is None:
            raise ConfigError(f"{self.where}.network: a reference baseline names its network (e.g. mobilenet_v2, "
                              "resnet50)")
        super()._check()


@dataclass(frozen=True, kw_only=True)
class ZooBaseline(TrainedBaseline):
    """`zoo`: a published network by name (`nas.baselines.zoo`): any timm or torchvision classifier (`source`:
    timm, torchvision or, left out, whichever knows the name, timm first), or for super-resolution fsrcnn / espcn;
    `kwargs`: its keyword arguments."""

    type: ClassVar[str] = "zoo"
    model: Optional[str] = None
    source: Optional[str] = None
    kwargs: Optional[dict] = None
    measured: Optional[dict] = None

    def _check(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"{self.where}.model: a zoo baseline names its model (e.g. mobilenetv4_conv_small, "
                              "resnet50, or fsrcnn / espcn for super-resolution)")
        if self.kwargs is not None and not isinstance(self.kwargs, dict):
            raise ConfigError(f"{self.where}.kwargs: expected a mapping of keyword arguments, got {self.kwargs!r}")
        if self.measured is not None:
            self._check_measured()
        super()._check()

    def _check_measured(self) -> None:
        """`measured`: the network's figures measured on another machine with the run's data, recipe and seed,
        which the run takes instead of training it: `test` (and optionally `val`), the task's metric on each
        split; `machine` and `date` where and when; `recipe` what it was trained with (`MEASURED_RECIPE` at
        least, any other `train` or `task` setting besides; checked against the run's by
        `check_measured_recipes`)."""
        where, measured = f"{self.where}.measured", self.measured
        if not isinstance(measured, dict):
            raise ConfigError(f"{where}: expected a mapping (test, val, machine, date, recipe), got {measured!r}")
        unknown = set(measured) - {"test", "val", "machine", "date", "recipe"}
        missing = [key for key in ("test", "machine", "date", "recipe") if key not in measured]
        if unknown or missing:
            raise ConfigError(f"{where}: " + (f"unknown keys {sorted(unknown)}" if unknown else
                                              f"missing {', '.join(missing)}") +
                              " (it takes test, val, machine, date, recipe)")
        for key in ("test", "val"):
            value = measured.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, Real):
                raise ConfigError(f"{where}.{key}: expected the figure as a number, got {value!r}")
        for key in ("machine", "date"):
            if not isinstance(measured[key], str) or not measured[key].strip():
                raise ConfigError(f"{where}.{key}: expected text (a date in quotes), got {measured[key]!r}")
        recipe = measured["recipe"]
        if not isinstance(recipe, dict):
            raise ConfigError(f"{where}.recipe: expected a mapping of the settings it was trained with, got "
                              f"{recipe!r}")
        absent = [key for key in MEASURED_RECIPE if key not in recipe]
        if absent:
            raise ConfigError(f"{where}.recipe: missing {', '.join(absent)} (it gives at least "
                              f"{', '.join(MEASURED_RECIPE)})")
        if self.train_steps is not None:
            raise ConfigError(f"{self.where}.train_steps: a measured network trains nothing here; its budget is "
                              "measured.recipe.epochs")

    @property
    def trained_here(self) -> bool:
        return self.measured is None

    @property
    def provenance(self) -> str:
        """Where the measured figures come from, in words (empty when the run trains the network)."""
        if self.measured is None:
            return ""
        recipe = ", ".join(f"{key} {value}" for key, value in self.measured["recipe"].items())
        return f"measured on {self.measured['machine']}, {self.measured['date']} ({recipe})"


def _run_setting(config, entry: ZooBaseline, key: str):
    """The run's value of the recipe setting `key` for `entry`: its epochs, the seed, or a `train` or `task`
    setting; KeyError when `key` is none of them."""
    if key == "epochs":
        return float(entry.epochs) if entry.epochs is not None else matched_epochs(config)[0]
    if key == "seed":
        return config.seed
    for section in (config.train, config.task):
        if key in {field.name for field in dataclasses.fields(section)}:
            return getattr(section, key)
    raise KeyError(key)


def _same_setting(measured, run) -> bool:
    """A measured recipe's setting equals the run's; numbers by value (YAML reads `4e-5` as text)."""
    if isinstance(run, Real) and not isinstance(run, bool) and not isinstance(measured, bool):
        try:
            return float(measured) == float(run)
        except (TypeError, ValueError):
            return False
    return measured == run


def check_measured_recipes(config) -> None:
    """Every zoo entry's figures measured elsewhere (`ZooBaseline.measured`) at the run's recipe: ConfigError
    (one line naming the entry and the first setting that differs) otherwise, since a figure trained otherwise
    does not compare with the run's archs."""
    for entry in config.baselines:
        if not isinstance(entry, ZooBaseline) or entry.measured is None:
            continue
        for key, value in entry.measured["recipe"].items():
            try:
                run = _run_setting(config, entry, key)
            except KeyError:
                raise ConfigError(f"{entry.where}.measured.recipe.{key}: not a setting of the run's recipe (epochs, "
                                  "seed, or a train or task setting)") from None
            if not _same_setting(value, run):
                raise ConfigError(f"{entry.where}.measured.recipe.{key}: the figures were measured at {value!r}, "
                                  f"this run's recipe has {run!r}; a figure is used only at the run's recipe")


#: `type` -> its entry
BASELINE_ENTRIES: dict[str, type[BaselineEntry]] = {cls.type: cls for cls in (
    SubnetBaseline, StandaloneBaseline, BicubicBaseline, ReferenceBaseline, ZooBaseline)}


def _entry(raw: dict) -> BaselineEntry:
    where = f"baselines[{raw['name']}]"
    kind = raw.get("type", SubnetBaseline.type)
    if kind not in BASELINE_ENTRIES:
        raise ConfigError(f"{where}.type: unknown {kind!r}; valid: {', '.join(BASELINE_ENTRIES)}")
    cls = BASELINE_ENTRIES[kind]
    valid = {"type", *(f.name for f in dataclasses.fields(cls) if f.name != "written")}
    unknown = set(raw) - valid
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (valid: {', '.join(sorted(valid))})")
    entry = cls(**{k: v for k, v in raw.items() if k != "type"}, written=tuple(raw))
    entry._check()
    return entry


def read_baselines(raw: Any) -> list[BaselineEntry]:
    """The `baselines:` list as typed entries (None: none); ConfigError (one line) naming the entry at fault."""
    raw = raw or []
    if not isinstance(raw, list) or not all(isinstance(b, dict) and "name" in b for b in raw):
        raise ConfigError("baselines: expected a list of mappings, each with a name")
    names = [b["name"] for b in raw]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"baselines: names must be unique; repeated: {', '.join(map(str, repeated))}")
    return [_entry(b) for b in raw]
