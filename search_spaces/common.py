"""What the classification families share: static building blocks (conv-BN-activation, the classifier head,
weight initialisation), stage configs and their checks, the expanded width of an inverted residual, and an arch's
assignment in a family of stages."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from .base import ArchError
from .elastic import make_divisible

__all__ = ["StageConfig", "ConvBnAct", "ClassifierHead", "ShortcutBlock", "StemBlocksHead", "init_weights",
           "stage_assignment", "active_blocks", "expanded_width", "check_stage_depths", "kernel_choices",
           "stage_expand_ratios"]


@dataclass
class StageConfig:
    """One stage: output width, stride of its first block, and the depths searched."""

    width: int = 32
    stride: int = 1
    depths: list[int] = field(default_factory=lambda: [2, 3, 4])


class ConvBnAct(nn.Sequential):
    """Conv + batch norm + optional activation, padding k // 2."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1, groups: int = 1,
                 act_layer: type[nn.Module] | None = nn.ReLU6):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, kernel_size // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out_channels),
            act_layer() if act_layer is not None else nn.Identity())


class ClassifierHead(nn.Module):
    """Optional 1x1 conv, global average pooling, dropout, linear classifier."""

    def __init__(self, in_channels: int, head_width: int, num_classes: int, *, dropout: float,
                 act_layer: type[nn.Module]):
        super().__init__()
        self.conv = ConvBnAct(in_channels, head_width, 1, act_layer=act_layer) if head_width else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(head_width or in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.conv(x).mean((2, 3))))


class ShortcutBlock(nn.Module):
    """A block of a standalone network whose input is added to the output of its `body` where the block keeps
    its resolution and width (an inverted residual's shortcut)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.use_shortcut = stride == 1 and in_channels == out_channels

    def body(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return x + out if self.use_shortcut else out


class StemBlocksHead(nn.Module):
    """A standalone classification network: stem, a sequence of blocks, head."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], head: nn.Module):
        super().__init__()
        self.stem, self.blocks, self.head = stem, nn.Sequential(*blocks), head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def init_weights(m: nn.Module) -> None:
    """Kaiming-normal convs (fan out), small-normal linear layers with zero bias (use with `Module.apply`)."""
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    elif isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0, 0.01)
        nn.init.zeros_(m.bias)


def stage_assignment(arch: dict, keys: Sequence[str], stage_depths: Sequence[Sequence[int]], *,
                     per_stage: Sequence[str] = (), per_block: dict[str, Callable[[int], Any]]) -> dict[str, Any]:
    """The assignment of `arch` in a family of stages, whose arch has exactly the keys `keys`: a list per stage of
    `depth` (choice `s{s}.depth`, one of `stage_depths[s]`), of each key of `per_stage` (`s{s}.<key>`) and of each
    key of `per_block`, a list of the stage's depth of values (`s{s}.b{b}.<key>`; a block past the depth takes
    `per_block[key](s)`). Keys outside these (a stem's, a head's) are the family's to assign. Raises ArchError
    naming the field."""
    missing, extra = set(keys) - set(arch), set(arch) - set(keys)
    if missing or extra:
        raise ArchError(f"arch keys must be {', '.join(keys)} (missing {sorted(missing)}, unknown {sorted(extra)})")
    n = len(stage_depths)
    for key in ("depth", *per_stage, *per_block):
        if not isinstance(arch[key], list) or len(arch[key]) != n:
            raise ArchError(f"arch.{key}: expected a list of {n} stages")
    values = {}
    for s, depths in enumerate(stage_depths):
        depth = arch["depth"][s]
        if depth not in depths:
            raise ArchError(f"arch.depth[{s}]: {depth!r} is not one of {sorted(depths)}")
        values[f"s{s}.depth"] = depth
        for key in per_stage:
            values[f"s{s}.{key}"] = arch[key][s]
        for key, unused in per_block.items():
            if not isinstance(arch[key][s], list) or len(arch[key][s]) != depth:
                raise ArchError(f"arch.{key}[{s}]: expected {depth} values (the stage depth)")
            for b in range(max(depths)):
                values[f"s{s}.b{b}.{key}"] = arch[key][s][b] if b < depth else unused(s)
    return values


def active_blocks(stages: Sequence[Sequence[nn.Module]], depths: Sequence[int]) -> list[nn.Module]:
    """The blocks of a supernet's `stages` that an arch of stage depths `depths` runs: the first `depths[s]` of each
    stage's."""
    return [block for blocks, depth in zip(stages, depths) for block in blocks[:depth]]


def expanded_width(in_channels: int, expand_ratio: int, divisor: int) -> int:
    """An inverted residual's expanded width: the input width itself at ratio 1, else the input width times the
    ratio rounded to `divisor`."""
    return in_channels if expand_ratio == 1 else make_divisible(in_channels * expand_ratio, divisor)


def check_stage_depths(stages: Sequence) -> None:
    """Raise ArchError unless there is a stage and each searches at least one depth, all >= 1."""
    if not stages:
        raise ArchError("space.stages: at least one stage is needed")
    for i, stage in enumerate(stages):
        if not stage.depths or min(stage.depths) < 1:
            raise ArchError(f"space.stages[{i}].depths: needs at least one depth >= 1, got {stage.depths}")


def kernel_choices(kernel_sizes: Sequence[int]) -> tuple[int, ...]:
    """The searched kernel sizes, ascending; ArchError unless there are some, all odd."""
    if not kernel_sizes or any(k % 2 == 0 or k < 1 for k in kernel_sizes):
        raise ArchError(f"space.kernel_sizes: odd sizes only, got {kernel_sizes}")
    return tuple(sorted(set(kernel_sizes)))


def stage_expand_ratios(ratios: Sequence[int], stages: Sequence) -> list[tuple[int, ...]]:
    """Per stage, its expansion ratios ascending: the stage's own `expand_ratios`, else the space's `ratios`;
    ArchError unless each set has some, all >= 1 (1: the expanded width is the input width)."""
    def checked(values, where: str) -> tuple[int, ...]:
        if not values or any(e < 1 for e in values):
            raise ArchError(f"{where}: ratios must be >= 1, got {values}")
        return tuple(sorted(set(values)))

    space_ratios = checked(ratios, "space.expand_ratios")
    return [space_ratios if stage.expand_ratios is None
            else checked(stage.expand_ratios, f"space.stages[{i}].expand_ratios") for i, stage in enumerate(stages)]
