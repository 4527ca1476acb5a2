"""ResNet-style space: residual blocks with elastic depth, bottleneck expansion and width (Once-for-All ResNet50).

Cai et al., "Once-for-All: Train One Network and Specialize it for Efficient Deployment", ICLR 2020
(https://arxiv.org/abs/1908.09791), OFA-ResNet50. A fixed stem (a chain of 3x3 convs, optionally a 3x3 max
pool) is followed by stages of residual blocks. Per stage the depth (the first `depth` blocks run) and a width
multiplier of the stage's base width are searched, per block the expansion ratio: the block's middle width is
`make_divisible(out_width * ratio)` (OFA's rule), so it scales with the stage's active width. Every choice
slices one max-size weight (`elastic.py`); batch norms are channel-sliced.

Blocks are `bottleneck` (1x1 -> 3x3 -> 1x1, stride on the 3x3 as in ResNet v1.5 / OFA) or `basic`
(3x3 -> 3x3). The shortcut is the identity where every arch gives the block equal input and output shapes (a
stride-1 block inside a stage); elsewhere it is a projection, a 1x1 conv with the block's stride + batch norm
(ResNet's "option B"). OFA projects through a 2x2 average pool then a 1x1 conv; a strided 1x1 conv is one
device layer instead of two and keeps the shapes of odd-sized maps (7x7 -> 4x4) equal to the main branch's
without ceil-mode pooling.

An arch: {"depth": [d per stage], "width": [multiplier per stage], "expand": [[ratio per active block] per stage]}.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from hw_cost import Block

from .base import ArchBox, ArchError, ArchStage, Choice, SearchSpace, Supernet, numbers_text, register_space
from .elastic import ElasticBatchNorm2d, ElasticConv2d, ElasticLinear, make_divisible
from .common import (ClassifierHead, ConvBnAct, StageConfig, StemBlocksHead, active_blocks, init_weights,
                    stage_assignment)
from .relaxed import CostTerm, RelaxedSupernet, prefix_masks

__all__ = ["ResNetSpaceConfig", "ResNetSpace", "ResNetSupernet", "RelaxedResNet", "ResidualBlock", "BLOCK_TYPES"]

#: per block type, its body convs as (kernel size, carries the block's stride); every conv but the last
#: outputs the block's middle width, the last its output width
BLOCK_TYPES: dict[str, tuple[tuple[int, bool], ...]] = {
    "bottleneck": ((1, False), (3, True), (1, False)),
    "basic": ((3, True), (3, False)),
}


def _ofa_resnet50_stages() -> list[StageConfig]:
    return [StageConfig(256, 1, [2, 3, 4]), StageConfig(512, 2, [2, 3, 4]), StageConfig(1024, 2, [4, 5, 6]),
            StageConfig(2048, 2, [2, 3, 4])]


@dataclass
class ResNetSpaceConfig:
    """The defaults are OFA-ResNet50's space for 224x224 inputs (configs for small images set their own).

    Args:
        block: residual block type, one of `BLOCK_TYPES` (bottleneck or basic).
        stem_widths: the fixed stem, a chain of 3x3 conv + BN + ReLU of these widths; the first conv has
            `stem_stride`.
        stem_pool: a 3x3 max pool with stride 2 after the stem convs.
        stages: the searched stages: base output width (at multiplier 1.0), stride of the first block, depths.
        width_mults: per-stage width multipliers of the base width (OFA: 0.65, 0.8, 1.0).
        expand_ratios: per-block middle width as a fraction of the block's output width (OFA's bottleneck:
            0.2, 0.25, 0.35; basic blocks suit ratios near 1).
        dropout: before the classifier.
        channel_divisor: every searched width is rounded to a multiple of this. The choices of each stage must
            give distinct widths (the space refuses a config where two choices build the same network).
    """

    type: str = "resnet"
    block: str = "bottleneck"
    stem_widths: list[int] = field(default_factory=lambda: [32, 32, 64])
    stem_stride: int = 2
    stem_pool: bool = True
    stages: list[StageConfig] = field(default_factory=_ofa_resnet50_stages)
    width_mults: list[float] = field(default_factory=lambda: [0.65, 0.8, 1.0])
    expand_ratios: list[float] = field(default_factory=lambda: [0.2, 0.25, 0.35])
    dropout: float = 0.0
    channel_divisor: int = 8


# ------------------------------------------------------------------------------------------ static modules
class ResidualBlock(nn.Module):
    """A ResNet block: body convs (see `BLOCK_TYPES`), identity or projection shortcut, add, ReLU.

    Args:
        in_channels / out_channels / mid_channels: input, output and middle widths.
        block_type: a key of `BLOCK_TYPES`.
        stride: of the strided body conv and of the projection.
        projection: a 1x1 conv + BN shortcut instead of the identity.
    """

    def __init__(self, in_channels: int, out_channels: int, *, block_type: str, mid_channels: int, stride: int,
                 projection: bool):
        super().__init__()
        layout = BLOCK_TYPES[block_type]
        widths = [in_channels] + [mid_channels] * (len(layout) - 1) + [out_channels]
        self.body = nn.Sequential(*(
            ConvBnAct(widths[i], widths[i + 1], k, stride=stride if strided else 1,
                      act_layer=nn.ReLU if i < len(layout) - 1 else None)
            for i, (k, strided) in enumerate(layout)))
        self.shortcut = (ConvBnAct(in_channels, out_channels, 1, stride=stride, act_layer=None) if projection
                         else nn.Identity())
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.shortcut(x))


def build_stem(in_channels: int, widths: list[int], stride: int, pool: bool) -> nn.Sequential:
    """The fixed stem: 3x3 conv + BN + ReLU per width (the first with `stride`), then an optional max pool."""
    layers = []
    for i, width in enumerate(widths):
        layers.append(ConvBnAct(in_channels, width, 3, stride=stride if i == 0 else 1, act_layer=nn.ReLU))
        in_channels = width
    if pool:
        layers.append(nn.MaxPool2d(3, 2, 1))
    return nn.Sequential(*layers)


class ResNet(StemBlocksHead):
    """A standalone network of the space: stem, blocks, head."""


# ------------------------------------------------------------------------------------------ elastic modules
class ElasticResidualBlock(nn.Module):
    """A residual block whose output and middle widths are set by `set_active`; its input width is its input's."""

    def __init__(self, in_channels: int, out_channels: int, mid_channels: int, *, block_type: str, stride: int,
                 projection: bool):
        super().__init__()
        self.block_type, self.stride, self.projection = block_type, stride, projection
        layout = BLOCK_TYPES[block_type]
        widths = [in_channels] + [mid_channels] * (len(layout) - 1) + [out_channels]
        self.convs = nn.ModuleList(ElasticConv2d(widths[i], widths[i + 1], k, stride=stride if strided else 1)
                                   for i, (k, strided) in enumerate(layout))
        self.bns = nn.ModuleList(ElasticBatchNorm2d(w) for w in widths[1:])
        self.acts = nn.ModuleList([nn.ReLU() for _ in layout[:-1]] + [nn.Identity()])
        if projection:
            self.shortcut_conv = ElasticConv2d(in_channels, out_channels, 1, stride=stride)
            self.shortcut_bn = ElasticBatchNorm2d(out_channels)
        self.act = nn.ReLU()
        self.active = (in_channels, mid_channels, out_channels)

    def set_active(self, in_channels: int, mid_channels: int, out_channels: int) -> None:
        self.active = (in_channels, mid_channels, out_channels)

    def _widths(self) -> list[int]:
        _, mid, out = self.active
        return [mid] * (len(self.convs) - 1) + [out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for conv, bn, act, width in zip(self.convs, self.bns, self.acts, self._widths()):
            h = act(bn(conv(h, out_channels=width)))
        shortcut = self.shortcut_bn(self.shortcut_conv(x, out_channels=self.active[2])) if self.projection else x
        return self.act(h + shortcut)

    def extract(self) -> ResidualBlock:
        in_ch, mid, out = self.active
        block = ResidualBlock(in_ch, out, block_type=self.block_type, mid_channels=mid, stride=self.stride,
                              projection=self.projection)
        for layer, conv, bn, c_in, c_out in zip(block.body, self.convs, self.bns, [in_ch] + self._widths(),
                                                self._widths()):
            layer[0] = conv.export(c_in, c_out, conv.max_kernel)
            layer[1] = bn.export(c_out)
        if self.projection:
            block.shortcut[0] = self.shortcut_conv.export(in_ch, out, 1)
            block.shortcut[1] = self.shortcut_bn.export(out)
        return block


class ElasticClassifierHead(nn.Module):
    """Global average pooling, dropout, and a linear classifier whose input width follows its input."""

    def __init__(self, in_channels: int, num_classes: int, *, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = ElasticLinear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x.mean((2, 3))))

    def extract(self, in_channels: int) -> ClassifierHead:
        head = ClassifierHead(in_channels, 0, self.classifier.out_features, dropout=self.dropout.p, act_layer=nn.ReLU)
        head.classifier = self.classifier.export(in_channels)
        return head


class ResNetSupernet(Supernet):
    def __init__(self, space: "ResNetSpace"):
        super().__init__()
        cfg = space.config
        self.space = space
        self.stem = build_stem(space.input_shape[0], cfg.stem_widths, cfg.stem_stride, cfg.stem_pool)
        self.stages = nn.ModuleList()
        in_ch = cfg.stem_widths[-1]
        for s, stage in enumerate(cfg.stages):
            out_ch = max(space.stage_widths(s))
            blocks = nn.ModuleList()
            for b in range(max(stage.depths)):
                blocks.append(ElasticResidualBlock(in_ch, out_ch, space.max_mid_width(s), block_type=cfg.block,
                                                   stride=stage.stride if b == 0 else 1,
                                                   projection=space.has_projection(s, b)))
                in_ch = out_ch
            self.stages.append(blocks)
        self.head = ElasticClassifierHead(in_ch, space.num_outputs, dropout=cfg.dropout)
        self.apply(init_weights)
        self.depths: list[int] = []
        self.out_width = in_ch
        self.set_active(space.largest())

    def set_active(self, arch: dict) -> None:
        arch = self.space.validate(arch)
        self.depths = list(arch["depth"])
        in_ch = self.space.config.stem_widths[-1]
        for s, (blocks, ratios) in enumerate(zip(self.stages, arch["expand"])):
            out_ch = self.space.width(s, arch["width"][s])
            for block, ratio in zip(blocks, ratios):
                block.set_active(in_ch, self.space.mid_width(out_ch, ratio), out_ch)
                in_ch = out_ch
        self.out_width = in_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in active_blocks(self.stages, self.depths):
            x = block(x)
        return self.head(x)

    def extract(self, arch: dict) -> ResNet:
        self.set_active(arch)
        blocks = [block.extract() for block in active_blocks(self.stages, self.depths)]
        net = ResNet(copy.deepcopy(self.stem), blocks, self.head.extract(self.out_width))
        return net.train(self.training)


# ------------------------------------------------------------------------------------------ the supernet under gates
class RelaxedResNet(RelaxedSupernet):
    """The ResNet-style space under gates: channel masks for width and expansion, depth mixing.

    FBNetV2 channel search (Wan et al., CVPR 2020, https://arxiv.org/abs/2004.05565): every conv runs at its largest
    width and its output (after batch norm and activation) is multiplied by a gate-weighted mask. A stage's output
    mask is the sum over width multipliers of gate x prefix mask; a block's middle mask depends on the stage width
    AND the block's expansion (OFA: mid = make_divisible(width * ratio)), so it is the sum over both choices of the
    product of their gates times the prefix mask of that middle width. With one-hot gates the masked net computes
    exactly the sliced subnet. Per stage the output is mixed over the searched depths.

    The interface differentiable search runs it through: `search_spaces.relaxed.RelaxedSupernet`.
    """

    def __init__(self, space: ResNetSpace, supernet):
        super().__init__(space, supernet)
        self.depths = self.stage_depths()
        for s, blocks in enumerate(supernet.stages):
            widths = space.stage_widths(s)
            self.register_buffer(f"out_mask_{s}", prefix_masks(widths, max(widths)), persistent=False)
            max_mid = space.max_mid_width(s)
            mids = prefix_masks([space.mid_width(w, r) for w in widths for r in space.ratios], max_mid)
            self.register_buffer(f"mid_mask_{s}", mids.view(len(widths), len(space.ratios), max_mid),
                                 persistent=False)

    def _block(self, block, x: torch.Tensor, mid_mask: torch.Tensor, out_mask: torch.Tensor) -> torch.Tensor:
        h = x
        masks = [mid_mask] * (len(block.convs) - 1) + [out_mask]
        for conv, bn, act, mask in zip(block.convs, block.bns, block.acts, masks):
            h = act(bn(conv(h))) * mask
        shortcut = block.shortcut_bn(block.shortcut_conv(x)) * out_mask if block.projection else x
        return block.act(h + shortcut)

    def forward(self, x: torch.Tensor, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        net = self.supernet
        x = net.stem(x)
        for s, blocks in enumerate(net.stages):
            width_gate = gates[f"s{s}.width"]
            out_mask = (width_gate @ getattr(self, f"out_mask_{s}")).view(1, -1, 1, 1)

            def block(b: int, h: torch.Tensor) -> torch.Tensor:
                mid_mask = torch.einsum("w,r,wrc->c", width_gate, gates[f"s{s}.b{b}.expand"],
                                        getattr(self, f"mid_mask_{s}")).view(1, -1, 1, 1)
                return self._block(blocks[b], h, mid_mask, out_mask)

            x = self.depth_mixed(s, x, gates, block)
        return net.head(x)

    def cost_terms(self) -> list[CostTerm]:
        largest = self.space.blocks(self.space.largest())
        last = len(self.supernet.stages) - 1
        terms = [CostTerm((), lambda values: largest[:1]), self.block_term(-1, (f"s{last}.width",))]

        def labels(s: int, b: int) -> tuple[str, ...]:
            widths = (f"s{s}.width",) + ((f"s{s - 1}.width",) if b == 0 and s > 0 else ())
            return widths + (f"s{s}.b{b}.expand",)

        return terms + self.stage_block_terms(1, labels)


# ------------------------------------------------------------------------------------------ the space
@register_space("resnet", ResNetSpaceConfig)
class ResNetSpace(SearchSpace):
    """ResNet-style space (see the module docstring). Config: `ResNetSpaceConfig`."""

    relaxed_class = RelaxedResNet

    def __init__(self, config: ResNetSpaceConfig, *, input_shape, num_outputs: int):
        super().__init__(input_shape, num_outputs)
        self.config = config
        self._check_config()
        self.mults = tuple(sorted(float(m) for m in config.width_mults))
        self.ratios = tuple(sorted(float(r) for r in config.expand_ratios))
        for s in range(len(config.stages)):
            widths = self.stage_widths(s)
            if len(set(widths)) < len(widths):
                raise ArchError(f"space.stages[{s}].width: multipliers {list(self.mults)} give widths {widths}, "
                                "not distinct (raise the width, lower channel_divisor or drop a multiplier)")
            for out in widths:
                mids = [self.mid_width(out, r) for r in self.ratios]
                if len(set(mids)) < len(mids):
                    raise ArchError(f"space.expand_ratios: {list(self.ratios)} give middle widths {mids} at stage "
                                    f"{s}'s width {out}, not distinct (change the ratios, raise the width or lower "
                                    "channel_divisor)")

    def _check_config(self) -> None:
        cfg = self.config
        if cfg.block not in BLOCK_TYPES:
            raise ArchError(f"space.block: {cfg.block!r} is not one of {sorted(BLOCK_TYPES)}")
        if not cfg.stem_widths or min(cfg.stem_widths) < 1:
            raise ArchError(f"space.stem_widths: needs at least one width >= 1, got {cfg.stem_widths}")
        if cfg.stem_stride < 1:
            raise ArchError(f"space.stem_stride: must be >= 1, got {cfg.stem_stride}")
        if not cfg.stages:
            raise ArchError("space.stages: at least one stage is needed")
        for i, stage in enumerate(cfg.stages):
            if not stage.depths or min(stage.depths) < 1:
                raise ArchError(f"space.stages[{i}].depths: needs at least one depth >= 1, got {stage.depths}")
            if stage.width < 1 or stage.stride < 1:
                raise ArchError(f"space.stages[{i}]: width and stride must be >= 1, got {stage.width}, {stage.stride}")
        for key in ("width_mults", "expand_ratios"):
            values = getattr(cfg, key)
            if not values or min(values) <= 0 or len(set(values)) < len(values):
                raise ArchError(f"space.{key}: needs distinct values > 0, got {values}")
        if cfg.channel_divisor < 1:
            raise ArchError(f"space.channel_divisor: must be >= 1, got {cfg.channel_divisor}")

    # ------------------------------------------------------------------ widths (the one place they are computed)
    def width(self, stage: int, mult: float) -> int:
        """Output width of `stage` at width multiplier `mult`."""
        return make_divisible(self.config.stages[stage].width * mult, self.config.channel_divisor)

    def stage_widths(self, stage: int) -> list[int]:
        return [self.width(stage, m) for m in self.mults]

    def mid_width(self, out_width: int, ratio: float) -> int:
        """Middle width of a block with output width `out_width` and expansion `ratio` (OFA's rule)."""
        return make_divisible(out_width * ratio, self.config.channel_divisor)

    def max_mid_width(self, stage: int) -> int:
        return max(self.mid_width(w, r) for w in self.stage_widths(stage) for r in self.ratios)

    def has_projection(self, stage: int, block: int) -> bool:
        """Whether block `block` of `stage` needs a projection shortcut: unless every arch gives it equal input
        and output shapes (stride 1, and its input width tied to its output width or both fixed and equal)."""
        stride = self.config.stages[stage].stride if block == 0 else 1
        if stride != 1:
            return True
        if block > 0:
            return False
        inputs = {self.config.stem_widths[-1]} if stage == 0 else set(self.stage_widths(stage - 1))
        return not (len(inputs) == 1 and inputs == set(self.stage_widths(stage)))

    def stage_input_sizes(self) -> list[tuple[int, int]]:
        """(H, W) of each stage's input; the maps keep these sizes whatever the arch."""
        cfg = self.config
        ceil = lambda v, s: -(-v // s)
        h, w = ceil(self.input_shape[1], cfg.stem_stride), ceil(self.input_shape[2], cfg.stem_stride)
        if cfg.stem_pool:
            h, w = ceil(h, 2), ceil(w, 2)
        sizes = []
        for stage in cfg.stages:
            sizes.append((h, w))
            h, w = ceil(h, stage.stride), ceil(w, stage.stride)
        return sizes + [(h, w)]

    # ------------------------------------------------------------------ choices and arch dicts
    def _build_choices(self) -> list[Choice]:
        choices = []
        for s, stage in enumerate(self.config.stages):
            choices.append(Choice(f"s{s}.depth", tuple(sorted(stage.depths))))
            choices.append(Choice(f"s{s}.width", self.mults))
            for b in range(max(stage.depths)):
                choices.append(Choice(f"s{s}.b{b}.expand", self.ratios))
        return choices

    def arch_from_assignment(self, values: dict[str, Any]) -> dict:
        n = len(self.config.stages)
        depth = [int(values[f"s{s}.depth"]) for s in range(n)]
        return {"depth": depth, "width": [float(values[f"s{s}.width"]) for s in range(n)],
                "expand": [[float(values[f"s{s}.b{b}.expand"]) for b in range(d)] for s, d in enumerate(depth)]}

    def assignment_from_arch(self, arch: dict) -> dict[str, Any]:
        return stage_assignment(arch, ("depth", "width", "expand"), [s.depths for s in self.config.stages],
                                per_stage=("width",), per_block={"expand": lambda s: self.ratios[0]})

    def build_supernet(self) -> ResNetSupernet:
        return ResNetSupernet(self)

    # ------------------------------------------------------------------ cost blocks
    def _stem_block(self) -> Block:
        cfg = self.config
        c, h, w = self.input_shape
        widths = "-".join(map(str, cfg.stem_widths))
        return Block(f"stem|in{c}x{h}x{w}|out{widths}|k3|s{cfg.stem_stride}|{'pool' if cfg.stem_pool else 'nopool'}",
                     (1, c, h, w), lambda: build_stem(c, cfg.stem_widths, cfg.stem_stride, cfg.stem_pool))

    def _residual_block(self, stage: int, block: int, in_ch: int, out_ch: int, ratio: float) -> Block:
        h, w = self.stage_input_sizes()[stage] if block == 0 else self.stage_input_sizes()[stage + 1]
        stride = self.config.stages[stage].stride if block == 0 else 1
        mid, projection, kind = self.mid_width(out_ch, ratio), self.has_projection(stage, block), self.config.block
        return Block(f"{kind}|e{ratio:g}|in{in_ch}x{h}x{w}|mid{mid}|out{out_ch}|s{stride}|"
                     f"{'proj' if projection else 'id'}", (1, in_ch, h, w),
                     lambda: ResidualBlock(in_ch, out_ch, block_type=kind, mid_channels=mid, stride=stride,
                                           projection=projection))

    def _head_block(self, in_ch: int) -> Block:
        h, w = self.stage_input_sizes()[-1]
        return Block(f"head|in{in_ch}x{h}x{w}|out{self.num_outputs}", (1, in_ch, h, w),
                     lambda: ClassifierHead(in_ch, 0, self.num_outputs, dropout=self.config.dropout,
                                            act_layer=nn.ReLU))

    def blocks(self, arch: dict) -> list[Block]:
        arch = self.validate(arch)
        out = [self._stem_block()]
        in_ch = self.config.stem_widths[-1]
        for s, (mult, ratios) in enumerate(zip(arch["width"], arch["expand"])):
            out_ch = self.width(s, mult)
            for b, ratio in enumerate(ratios):
                out.append(self._residual_block(s, b, in_ch, out_ch, ratio))
                in_ch = out_ch
        return out + [self._head_block(in_ch)]

    def all_blocks(self) -> list[Block]:
        # a block's cost depends on its position (first or later in its stage), its input width (the previous
        # stage's width for a first block), its stage's width and its ratio: every combination, once
        blocks = [self._stem_block()]
        inputs = [self.config.stem_widths[-1]]
        for s, stage in enumerate(self.config.stages):
            widths = self.stage_widths(s)
            for out_ch in widths:
                for ratio in self.ratios:
                    blocks += [self._residual_block(s, 0, in_ch, out_ch, ratio) for in_ch in inputs]
                    if max(stage.depths) > 1:
                        blocks.append(self._residual_block(s, 1, out_ch, out_ch, ratio))
            inputs = widths
        blocks += [self._head_block(c) for c in inputs]
        return list({b.key: b for b in blocks}.values())

    @classmethod
    def arch_summary(cls, arch: dict) -> str:
        return (f"depth {'-'.join(map(str, arch['depth']))}; width x{numbers_text(arch['width'])}; "
                f"expand {'|'.join(numbers_text(e) for e in arch['expand'])}")

    @classmethod
    def arch_stages(cls, arch: dict, config: ResNetSpaceConfig) -> list[ArchStage]:
        """A box per block, as tall as its stage's width multiplier times its expansion."""
        top, mult_top = max(config.expand_ratios), max(config.width_mults)
        out = []
        for s, (depth, mult, ratios, stage) in enumerate(zip(arch["depth"], arch["width"], arch["expand"],
                                                             config.stages)):
            scale = mult / mult_top
            boxes = [ArchBox(f"e{e:g}", scale * e / top) for e in ratios]
            most = max(stage.depths)
            boxes += [ArchBox("", scale, ghost=True) for _ in range(most - depth)]
            width = make_divisible(stage.width * mult, config.channel_divisor)
            out.append((f"stage {s + 1} · width x{mult:g} = {width} ch · depth {depth}/{most}", boxes))
        return out
