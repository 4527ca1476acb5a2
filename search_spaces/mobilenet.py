"""MobileNet-style space: inverted-residual blocks with elastic kernel, expansion and depth (Once-for-All).

Cai et al., "Once-for-All: Train One Network and Specialize it for Efficient Deployment", ICLR 2020
(https://arxiv.org/abs/1908.09791). Per block the kernel size (shared weights, centre crop) and the expansion
ratio (channel slicing) are searched, per stage the depth (the first `depth` blocks run, deeper ones are
skipped). Stage widths and strides are configured, so the same code serves 28x28 and 224x224 inputs. An expansion
ratio of 1 drops the block's expand conv (MobileNetV2's t=1 block; its depthwise and project convs are weights of
its own, see `ElasticInvertedResidual`): at 28x28 that conv is the costliest layer of a small arch on the CPU; a
stage may search its own ratios (`MobileNetStageConfig.expand_ratios`).

MobileNetV3 (Howard et al., "Searching for MobileNetV3", ICCV 2019, https://arxiv.org/abs/1905.02244) adds two
per-stage settings: squeeze-excite after the depthwise conv (`se`; its reduce width follows the active expanded
width, as in OFA's MobileNetV3 space) and the stage's activation (`activation`: relu early, hardswish later).

An arch: {"depth": [d per stage], "kernel": [[k per active block] per stage],
"expand": [[e per active block] per stage]}.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from hw_cost import Block

from .base import ArchBox, ArchError, ArchStage, Choice, SearchSpace, Supernet, numbers_text, register_space
from .common import (ClassifierHead, ConvBnAct, ShortcutBlock, StageConfig, StemBlocksHead, active_blocks,
                     check_stage_depths, expanded_width, init_weights, kernel_choices, stage_assignment,
                     stage_expand_ratios)
from .elastic import ElasticBatchNorm2d, ElasticConv2d, make_divisible
from .relaxed import CostTerm, RelaxedSupernet, centred_kernel_masks, prefix_masks

__all__ = ["MobileNetStageConfig", "MobileNetSpaceConfig", "MobileNetSpace", "MobileNetSupernet", "InvertedResidual",
           "SqueezeExcite", "MobileNet", "RelaxedMobileNet", "se_width"]

ACTIVATIONS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish}


@dataclass
class MobileNetStageConfig(StageConfig):
    """A stage. Args:
        expand_ratios: replace the space's ratios for its blocks (None = the space's).
        se: squeeze-excite in each of its blocks (MobileNetV3).
        activation: of its blocks (relu, relu6 or hardswish; None = the space's).
    """

    expand_ratios: Optional[list[int]] = None
    se: bool = False
    activation: Optional[str] = None


def se_width(channels: int) -> int:
    """The squeeze-excite reduce width for `channels` expanded channels: a quarter, rounded to 8 (MobileNetV3)."""
    return make_divisible(channels // 4, 8)


@dataclass
class MobileNetSpaceConfig:
    """Args:
        stem_width / stem_stride: the fixed 3x3 stem conv.
        first_width: a fixed depthwise-separable block after the stem (MobileNetV2's first block); 0 = none.
        first_activation: that block's activation (None = `activation`; MobileNetV3 uses relu there).
        stages: the searched stages.
        kernel_sizes / expand_ratios: per-block choices (odd kernels; ratios of the block's input width, 1 = no
            expand conv); a stage may give its own expand_ratios.
        head_width: 1x1 conv before global pooling; 0 = none.
        activation: relu, relu6 or hardswish: of the stem, the head and every stage that names none.
        channel_divisor: expanded widths are rounded to multiples of this (16 suits the VPU's channel tiling).
    """

    type: str = "mobilenet"
    stem_width: int = 16
    stem_stride: int = 1
    first_width: int = 16
    first_activation: Optional[str] = None
    stages: list[MobileNetStageConfig] = field(default_factory=lambda: [
        MobileNetStageConfig(24, 2), MobileNetStageConfig(40, 2), MobileNetStageConfig(80, 1),
        MobileNetStageConfig(96, 1)])
    kernel_sizes: list[int] = field(default_factory=lambda: [3, 5, 7])
    expand_ratios: list[int] = field(default_factory=lambda: [3, 4, 6])
    head_width: int = 256
    dropout: float = 0.1
    activation: str = "relu6"
    channel_divisor: int = 8


# ------------------------------------------------------------------------------------------ static modules
class SqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-excite: global average pool, 1x1 reduce, ReLU, 1x1 expand, hard sigmoid, and the
    input scaled channel-wise by the result."""

    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.act = nn.ReLU()
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.act(self.reduce(x.mean((2, 3), keepdim=True)))))


class InvertedResidual(ShortcutBlock):
    """MobileNetV2 block: 1x1 expand, k x k depthwise, optional squeeze-excite (MobileNetV3), 1x1 project;
    identity shortcut when shapes allow."""

    def __init__(self, in_channels: int, out_channels: int, *, kernel_size: int, mid_channels: int, stride: int,
                 act_layer: type[nn.Module] = nn.ReLU6, se: bool = False):
        super().__init__(in_channels, out_channels, stride)
        self.expand = (ConvBnAct(in_channels, mid_channels, 1, act_layer=act_layer)
                       if mid_channels != in_channels else nn.Identity())
        self.depthwise = ConvBnAct(mid_channels, mid_channels, kernel_size, stride=stride, groups=mid_channels,
                                   act_layer=act_layer)
        self.se = SqueezeExcite(mid_channels, se_width(mid_channels)) if se else nn.Identity()
        self.project = ConvBnAct(mid_channels, out_channels, 1, act_layer=None)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.se(self.depthwise(self.expand(x))))


class MobileNet(StemBlocksHead):
    """A standalone network of the space: stem, blocks, head."""


# ------------------------------------------------------------------------------------------ elastic modules
class ElasticSqueezeExcite(nn.Module):
    """Squeeze-excite over the active expanded channels (OFA's DynamicSE): the reduce width follows them
    (`se_width`), and both 1x1 convs use the leading slices of the largest block's weights."""

    def __init__(self, max_channels: int):
        super().__init__()
        self.reduce = ElasticConv2d(max_channels, se_width(max_channels), 1, bias=True)
        self.act = nn.ReLU()
        self.expand = ElasticConv2d(se_width(max_channels), max_channels, 1, bias=True)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = x.shape[1]
        s = self.act(self.reduce(x.mean((2, 3), keepdim=True), out_channels=se_width(channels)))
        return x * self.gate(self.expand(s, out_channels=channels))

    def export(self, channels: int) -> SqueezeExcite:
        se = SqueezeExcite(channels, se_width(channels))
        se.reduce = self.reduce.export(channels, se_width(channels), 1)
        se.expand = self.expand.export(se_width(channels), channels, 1)
        return se


class ElasticDepthwiseProject(nn.Module):
    """What follows a block's expansion: k x k depthwise conv, BN, activation, optional squeeze-excite, 1x1
    project, BN, on the leading `channels` of its weights that the active width needs."""

    def __init__(self, channels: int, out_channels: int, *, kernel_size: int, stride: int,
                 act_layer: type[nn.Module], se: bool):
        super().__init__()
        self.out_channels = out_channels
        self.dw_conv = ElasticConv2d(channels, channels, kernel_size, stride=stride, depthwise=True)
        self.dw_bn = ElasticBatchNorm2d(channels)
        self.use_se = se
        self.se = ElasticSqueezeExcite(channels) if se else nn.Identity()
        self.project_conv = ElasticConv2d(channels, out_channels, 1)
        self.project_bn = ElasticBatchNorm2d(out_channels)
        self.act = act_layer()

    def forward(self, h: torch.Tensor, kernel_size: int) -> torch.Tensor:
        h = self.se(self.act(self.dw_bn(self.dw_conv(h, kernel_size=kernel_size))))
        return self.project_bn(self.project_conv(h, out_channels=self.out_channels))

    def export_into(self, block: InvertedResidual, channels: int, kernel_size: int) -> None:
        block.depthwise[0] = self.dw_conv.export(channels, channels, kernel_size)
        block.depthwise[1] = self.dw_bn.export(channels)
        if self.use_se:
            block.se = self.se.export(channels)
        block.project[0] = self.project_conv.export(channels, self.out_channels, 1)
        block.project[1] = self.project_bn.export(self.out_channels)


class ElasticInvertedResidual(nn.Module):
    """An inverted-residual block whose kernel and expansion are chosen per forward by `set_active`.

    Ratios above 1 share one expand conv and one depthwise-project path (channel slicing, as in OFA). Ratio 1
    (no expand conv) has a depthwise-project path of its own: its depthwise conv sees the block's input, not
    expanded features, and shared weights would have to serve both (in the default space, archs of the first
    stage's ratio 1 then scored about 1.5 points above those of ratios 3-6 with inherited weights, and 0.4-0.8
    points below them finalised)."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, kernel_sizes, expand_ratios,
                 act_layer: type[nn.Module], channel_divisor: int, se: bool = False):
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        self.divisor = channel_divisor
        max_mid = self.mid_channels(max(expand_ratios))
        path = dict(kernel_size=max(kernel_sizes), stride=stride, act_layer=act_layer, se=se)
        self.expand_conv = ElasticConv2d(in_channels, max_mid, 1)
        self.expand_bn = ElasticBatchNorm2d(max_mid)
        self.expanded = ElasticDepthwiseProject(max_mid, out_channels, **path)
        self.unexpanded = ElasticDepthwiseProject(in_channels, out_channels, **path) if 1 in expand_ratios else None
        self.use_se = se
        self.act = act_layer()
        self.act_layer = act_layer
        self.use_shortcut = stride == 1 and in_channels == out_channels
        self.kernel_size, self.expand_ratio = max(kernel_sizes), max(expand_ratios)

    def mid_channels(self, expand_ratio: int) -> int:
        return expanded_width(self.in_channels, expand_ratio, self.divisor)

    def set_active(self, kernel_size: int, expand_ratio: int) -> None:
        self.kernel_size, self.expand_ratio = kernel_size, expand_ratio

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.expand_ratio == 1:
            h = self.unexpanded(x, self.kernel_size)
        else:
            mid = self.mid_channels(self.expand_ratio)
            h = self.expanded(self.act(self.expand_bn(self.expand_conv(x, out_channels=mid))), self.kernel_size)
        return x + h if self.use_shortcut else h

    def extract(self) -> InvertedResidual:
        mid = self.mid_channels(self.expand_ratio)
        block = InvertedResidual(self.in_channels, self.out_channels, kernel_size=self.kernel_size,
                                 mid_channels=mid, stride=self.stride, act_layer=self.act_layer, se=self.use_se)
        if self.expand_ratio == 1:
            self.unexpanded.export_into(block, mid, self.kernel_size)
        else:
            block.expand[0] = self.expand_conv.export(self.in_channels, mid, 1)
            block.expand[1] = self.expand_bn.export(mid)
            self.expanded.export_into(block, mid, self.kernel_size)
        return block


class MobileNetSupernet(Supernet):
    def __init__(self, space: "MobileNetSpace"):
        super().__init__()
        cfg, act = space.config, space.act_layer
        self.space = space
        self.stem = ConvBnAct(space.input_shape[0], cfg.stem_width, 3, stride=cfg.stem_stride, act_layer=act)
        self.first = space.first_block() if cfg.first_width else nn.Identity()
        self.stages = nn.ModuleList()
        in_ch = cfg.first_width or cfg.stem_width
        for stage, expands, stage_act in zip(cfg.stages, space.stage_expands, space.stage_activations):
            blocks = nn.ModuleList()
            for i in range(max(stage.depths)):
                blocks.append(ElasticInvertedResidual(in_ch, stage.width, stride=stage.stride if i == 0 else 1,
                                                      kernel_sizes=cfg.kernel_sizes, expand_ratios=expands,
                                                      act_layer=ACTIVATIONS[stage_act],
                                                      channel_divisor=cfg.channel_divisor, se=stage.se))
                in_ch = stage.width
            self.stages.append(blocks)
        self.head = ClassifierHead(in_ch, cfg.head_width, space.num_outputs, dropout=cfg.dropout, act_layer=act)
        self.depths = [max(s.depths) for s in cfg.stages]
        self.apply(init_weights)

    def set_active(self, arch: dict) -> None:
        arch = self.space.validate(arch)
        self.depths = list(arch["depth"])
        for blocks, kernels, expands in zip(self.stages, arch["kernel"], arch["expand"]):
            for block, k, e in zip(blocks, kernels, expands):
                block.set_active(k, e)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(self.stem(x))
        for block in active_blocks(self.stages, self.depths):
            x = block(x)
        return self.head(x)

    def extract(self, arch: dict) -> MobileNet:
        self.set_active(arch)
        blocks = [copy.deepcopy(self.first)] if not isinstance(self.first, nn.Identity) else []
        blocks += [block.extract() for block in active_blocks(self.stages, self.depths)]
        net = MobileNet(copy.deepcopy(self.stem), blocks, copy.deepcopy(self.head))
        return net.train(self.training)


# ------------------------------------------------------------------------------------------ the supernet under gates
class RelaxedMobileNet(RelaxedSupernet):
    """The MobileNet-style space under gates: single-path superkernels and depth mixing.

    Per inverted-residual block (Single-Path NAS: Stamoulis et al., 2019, https://arxiv.org/abs/1904.02877;
    FBNetV2: Wan et al., CVPR 2020, https://arxiv.org/abs/2004.05565):

    * kernel: ONE depthwise conv with the largest kernel, whose weight is multiplied by the gate-weighted sum of
      centred k x k masks (a centre-cropped kernel padded back to full size computes the same as the crop);
    * expansion: the expanded channels are multiplied by the gate-weighted sum of prefix masks (channel c is kept
      by every ratio whose expanded width exceeds c), after the expand and after the depthwise activation; ratio 1
      (no expand conv) runs its own depthwise-project path on the block's input, and the block's output mixes the
      two paths by the gate of ratio 1;
    * squeeze-excite (a stage's `se`): it runs on the masked expanded channels (those past the active width are 0,
      so they add nothing to its pooled input), and its reduced channels are multiplied by the gate-weighted sum of
      prefix masks of each ratio's reduce width, as the supernet slices them.

    Per stage the output is the gate-weighted sum of the outputs after each searched depth (FBNetV2), so a step
    costs one forward of the largest arch and every gate gets a gradient from the task loss.

    The interface differentiable search runs it through: `search_spaces.relaxed.RelaxedSupernet`.
    """

    def __init__(self, space: MobileNetSpace, supernet):
        super().__init__(space, supernet)
        self.depths = self.stage_depths()
        for s, (blocks, expands) in enumerate(zip(supernet.stages, space.stage_expands)):
            # the gate of ratio 1 leaves the expand conv's output out and lets the block's input through
            self.register_buffer(f"expanded_{s}", torch.tensor([float(e != 1) for e in expands]), persistent=False)
            for b, block in enumerate(blocks):
                mids = [block.mid_channels(e) for e in expands]
                self.register_buffer(f"cmask_{s}_{b}", prefix_masks(mids, block.expanded.dw_conv.out_channels),
                                     persistent=False)
                self.register_buffer(f"kmask_{s}_{b}", centred_kernel_masks(space.kernels), persistent=False)
                if block.use_se:
                    self.register_buffer(f"rmask_{s}_{b}", prefix_masks([se_width(m) for m in mids],
                                                                        block.expanded.se.reduce.out_channels),
                                         persistent=False)

    def _block(self, s: int, b: int, x: torch.Tensor, kernel_gate: torch.Tensor, expand_gate: torch.Tensor):
        block = self.supernet.stages[s][b]
        masks, expanded = getattr(self, f"cmask_{s}_{b}"), getattr(self, f"expanded_{s}")
        cmask = (expand_gate @ masks).view(1, -1, 1, 1)
        kmask = torch.einsum("k,kij->ij", kernel_gate, getattr(self, f"kmask_{s}_{b}"))
        h = block.act(block.expand_bn(block.expand_conv(x))) * ((expand_gate * expanded) @ masks).view(1, -1, 1, 1)
        rmask = (expand_gate @ getattr(self, f"rmask_{s}_{b}")).view(1, -1, 1, 1) if block.use_se else 1.0
        h = self._depthwise_project(block.expanded, h, kmask, cmask, rmask)
        if not bool(expanded.all()):
            passed = expand_gate @ (1 - expanded)
            h = (1 - passed) * h + passed * self._depthwise_project(block.unexpanded, x, kmask)
        return x + h if block.use_shortcut else h

    @staticmethod
    def _depthwise_project(path, h: torch.Tensor, kmask: torch.Tensor, cmask: torch.Tensor | float = 1.0,
                           rmask: torch.Tensor | float = 1.0) -> torch.Tensor:
        """`ElasticDepthwiseProject` at full width under the kernel mask (and the channel masks of the ratios)."""
        dw = path.dw_conv
        h = F.conv2d(h, dw.weight * kmask, dw.bias, dw.stride, dw.max_kernel // 2, 1, dw.out_channels)
        h = path.act(path.dw_bn(h)) * cmask
        if path.use_se:
            h = RelaxedMobileNet._squeeze_excite(path.se, h, rmask)
        return path.project_bn(path.project_conv(h))

    @staticmethod
    def _squeeze_excite(se, h: torch.Tensor, rmask: torch.Tensor) -> torch.Tensor:
        """`ElasticSqueezeExcite` at full width, its reduced channels multiplied by `rmask`."""
        s = se.act(F.conv2d(h.mean((2, 3), keepdim=True), se.reduce.weight, se.reduce.bias)) * rmask
        return h * se.gate(F.conv2d(s, se.expand.weight, se.expand.bias))

    def forward(self, x: torch.Tensor, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        net = self.supernet
        x = net.first(net.stem(x))
        for s in range(len(net.stages)):
            x = self.depth_mixed(s, x, gates, lambda b, h: self._block(s, b, h, gates[f"s{s}.b{b}.kernel"],
                                                                          gates[f"s{s}.b{b}.expand"]))
        return net.head(x)

    def cost_terms(self) -> list[CostTerm]:
        largest = self.space.blocks(self.space.largest())
        fixed = 1 + (1 if self.space.config.first_width else 0)  # stem (and the fixed first block)
        return [CostTerm((), lambda values: largest[:fixed] + largest[-1:])] + self.stage_block_terms(
            fixed, lambda s, b: (f"s{s}.b{b}.kernel", f"s{s}.b{b}.expand"))


# ------------------------------------------------------------------------------------------ the space
@register_space("mobilenet", MobileNetSpaceConfig)
class MobileNetSpace(SearchSpace):
    """MobileNet-style space (see the module docstring). Config: `MobileNetSpaceConfig`."""

    relaxed_class = RelaxedMobileNet

    def __init__(self, config: MobileNetSpaceConfig, *, input_shape, num_outputs: int):
        super().__init__(input_shape, num_outputs)
        check_stage_depths(config.stages)
        self.kernels = kernel_choices(config.kernel_sizes)
        self.config = config
        self.act_layer = ACTIVATIONS[self._activation(config.activation, "space.activation")]
        self.first_activation = self._activation(config.first_activation or config.activation,
                                                 "space.first_activation")
        #: per stage: the name of its blocks' activation
        self.stage_activations = [self._activation(stage.activation or config.activation,
                                                   f"space.stages[{i}].activation")
                                  for i, stage in enumerate(config.stages)]
        self.stage_expands = stage_expand_ratios(config.expand_ratios, config.stages)

    @staticmethod
    def _activation(name: str, where: str) -> str:
        if name not in ACTIVATIONS:
            raise ArchError(f"{where}: {name!r} is not one of {sorted(ACTIVATIONS)}")
        return name

    def _build_choices(self) -> list[Choice]:
        choices = []
        for s, (stage, expands) in enumerate(zip(self.config.stages, self.stage_expands)):
            choices.append(Choice(f"s{s}.depth", tuple(sorted(stage.depths))))
            for b in range(max(stage.depths)):
                choices.append(Choice(f"s{s}.b{b}.kernel", self.kernels))
                choices.append(Choice(f"s{s}.b{b}.expand", expands))
        return choices

    def arch_from_assignment(self, values: dict[str, Any]) -> dict:
        depth = [int(values[f"s{s}.depth"]) for s in range(len(self.config.stages))]
        return {"depth": depth,
                "kernel": [[int(values[f"s{s}.b{b}.kernel"]) for b in range(d)] for s, d in enumerate(depth)],
                "expand": [[int(values[f"s{s}.b{b}.expand"]) for b in range(d)] for s, d in enumerate(depth)]}

    def assignment_from_arch(self, arch: dict) -> dict[str, Any]:
        return stage_assignment(arch, ("depth", "kernel", "expand"), [s.depths for s in self.config.stages],
                                per_block={"kernel": lambda s: self.kernels[0],
                                           "expand": lambda s: self.stage_expands[s][0]})

    def build_supernet(self) -> MobileNetSupernet:
        return MobileNetSupernet(self)

    def first_block(self) -> InvertedResidual:
        cfg = self.config
        return InvertedResidual(cfg.stem_width, cfg.first_width, kernel_size=3, mid_channels=cfg.stem_width,
                                stride=1, act_layer=ACTIVATIONS[self.first_activation])

    def all_blocks(self) -> list[Block]:
        # every (kernel, expand) pair at every block position of the deepest arch covers all keys (a stage's
        # squeeze-excite and activation are fixed, so its blocks' keys vary with these two only)
        unique: dict[str, Block] = {}
        depth = [max(s.depths) for s in self.config.stages]
        for k in self.kernels:
            for i in range(max(len(e) for e in self.stage_expands)):
                expand = [[expands[min(i, len(expands) - 1)]] * d for d, expands in zip(depth, self.stage_expands)]
                arch = {"depth": depth, "kernel": [[k] * d for d in depth], "expand": expand}
                unique.update((b.key, b) for b in self.blocks(arch))
        return list(unique.values())

    def blocks(self, arch: dict) -> list[Block]:
        arch = self.validate(arch)
        cfg, act = self.config, self.act_layer
        c, h, w = self.input_shape
        shape = lambda ch: f"{ch}x{h}x{w}"
        out = [Block(f"stem|in{shape(c)}|out{cfg.stem_width}|k3|s{cfg.stem_stride}|{cfg.activation}", (1, c, h, w),
                     lambda c=c: ConvBnAct(c, cfg.stem_width, 3, stride=cfg.stem_stride, act_layer=act))]
        c, h, w = cfg.stem_width, -(-h // cfg.stem_stride), -(-w // cfg.stem_stride)
        if cfg.first_width:
            out.append(Block(f"mbconv|k3|e1|mid{c}|in{shape(c)}|out{cfg.first_width}|s1|{self.first_activation}",
                             (1, c, h, w), self.first_block))
            c = cfg.first_width
        for s, (stage, stage_act) in enumerate(zip(cfg.stages, self.stage_activations)):
            for b, (k, e) in enumerate(zip(arch["kernel"][s], arch["expand"][s])):
                stride = stage.stride if b == 0 else 1
                mid = expanded_width(c, e, cfg.channel_divisor)
                # the expanded width is in the key: the same ratio gives other widths under another divisor; a
                # block with squeeze-excite ends in its reduce width (keys without it name blocks without SE)
                se = f"|se{se_width(mid)}" if stage.se else ""
                out.append(Block(f"mbconv|k{k}|e{e}|mid{mid}|in{shape(c)}|out{stage.width}|s{stride}|{stage_act}{se}",
                                 (1, c, h, w),
                                 partial(InvertedResidual, c, stage.width, kernel_size=k, mid_channels=mid,
                                         stride=stride, act_layer=ACTIVATIONS[stage_act], se=stage.se)))
                c, h, w = stage.width, -(-h // stride), -(-w // stride)
        out.append(Block(f"head|in{shape(c)}|mid{cfg.head_width}|out{self.num_outputs}|{cfg.activation}",
                         (1, c, h, w), lambda c=c: ClassifierHead(c, cfg.head_width, self.num_outputs,
                                                                  dropout=cfg.dropout, act_layer=act)))
        return out

    @classmethod
    def arch_summary(cls, arch: dict) -> str:
        return (f"depth {'-'.join(map(str, arch['depth']))}; "
                f"kernel {'|'.join(numbers_text(k) for k in arch['kernel'])}; "
                f"expand {'|'.join(numbers_text(e) for e in arch['expand'])}")

    @classmethod
    def arch_stages(cls, arch: dict, config: MobileNetSpaceConfig) -> list[ArchStage]:
        """A box per block, as tall as its expansion, as wide as its kernel; a stage's caption gives its width,
        stride, squeeze-excite and activation."""
        top = max(config.expand_ratios + [e for stage in config.stages for e in stage.expand_ratios or []])
        out = []
        for s, (depth, kernels, ratios, stage) in enumerate(zip(arch["depth"], arch["kernel"], arch["expand"],
                                                                config.stages)):
            boxes = [ArchBox(f"k{k} e{e:g}", e / top, k) for k, e in zip(kernels, ratios)]
            most = max(stage.depths)
            boxes += [ArchBox("", 1.0, 3, ghost=True) for _ in range(most - depth)]
            extras = (" · SE" if stage.se else "") + (f" · {stage.activation}" if stage.activation else "")
            out.append((f"stage {s + 1} · {stage.width} ch · stride {stage.stride}{extras} · depth {depth}/{most}",
                        boxes))
        return out
