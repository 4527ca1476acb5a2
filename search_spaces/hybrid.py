"""NPU-native hybrid space: MobileNetV4's block types with searched widths, on shared weights (Once-for-All).

What the NPU's DPU rewards decides the blocks (VPUNN's own figures; docs/latency.md): dense convolutions run many
more MACs per microsecond than depthwise ones, only ReLU-family activations fuse into the DPU (no hard-swish, no
squeeze-excite: they go to SHAVE kernels), and channel counts that are multiples of 16 fill its execution modes.
So per block the search picks one of four block types (Qin et al., "MobileNetV4: Universal Models for the Mobile
Ecosystem", ECCV 2024, https://arxiv.org/abs/2404.10518: the universal inverted bottleneck and its variants;
Tan & Le, "EfficientNetV2", ICML 2021: the fused inverted bottleneck), from the cheapest to the costliest at equal
widths:

* `convnext`: k x k depthwise on the input (with the stride), 1x1 expand, 1x1 project (UIB's ConvNext-like form);
* `ib`: 1x1 expand, k x k depthwise (with the stride), 1x1 project (MobileNetV2's inverted bottleneck);
* `extradw`: k x k depthwise on the input, 1x1 expand, k x k depthwise (with the stride), 1x1 project (UIB's
  ExtraDW);
* `fused`: a dense k x k expansion (with the stride), 1x1 project (the fused IB of EfficientNetV2 and
  MobileNetV4's early stages);

its kernel and its expansion ratio (of the block's input width); per stage its depth and its output width (a
multiple of 16); and the stem's and the head's widths. Weights are shared across block types as MobileNetV4's
universal inverted bottleneck shares them (every type is one block with two optional depthwise convs around one
expansion and one projection: `ElasticUIB`), and across widths and kernels as OFA shares them: every block position
holds one such block on the largest widths of its input, expansion and output, and an arch runs the leading channels
of each conv (channel slicing) and the centre of each kernel. A block adds its input when it keeps stride and
width.

An arch: {"stem": width, "depth": [d per stage], "width": [w per stage], "block": [[type per active block] per
stage], "kernel": [[k ...] ...], "expand": [[e ...] ...], "head": width}.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from hw_cost import Block

from .base import ArchError, Choice, SearchSpace, Supernet, register_space
from .base import ArchBox, ArchStage, numbers_text
from .common import (ClassifierHead, ConvBnAct, ShortcutBlock, StemBlocksHead, check_stage_depths, expanded_width,
                     init_weights, kernel_choices, stage_assignment, stage_expand_ratios)
from .elastic import ElasticBatchNorm2d, ElasticConv2d, ElasticLinear
from .relaxed import CostTerm, RelaxedSupernet, centred_kernel_masks, prefix_masks

__all__ = ["BLOCK_TYPES", "HybridStageConfig", "HybridSpaceConfig", "HybridSpace", "HybridSupernet", "HybridBlock",
           "HybridNet", "ElasticUIB", "RelaxedHybrid"]

#: the block types, from the cheapest to the costliest at equal widths (the order of their choice's values)
BLOCK_TYPES = ("convnext", "ib", "extradw", "fused")
#: activations the NPU's DPU fuses into its convolutions
ACTIVATIONS = {"relu": nn.ReLU, "relu6": nn.ReLU6}


@dataclass
class HybridStageConfig:
    """A stage. Args:
        widths: its searched output widths (multiples of the space's `channel_divisor`).
        stride: of its first block.
        depths: its searched numbers of blocks.
        block_types: the block types its blocks choose from (of `BLOCK_TYPES`).
        expand_ratios: replace the space's ratios for its blocks (None = the space's).
    """

    widths: list[int] = field(default_factory=lambda: [32, 48])
    stride: int = 1
    depths: list[int] = field(default_factory=lambda: [1, 2])
    block_types: list[str] = field(default_factory=lambda: ["convnext", "ib", "extradw"])
    expand_ratios: Optional[list[int]] = None


@dataclass
class HybridSpaceConfig:
    """Args:
        stem_widths / stem_stride: the 3x3 stem conv's searched widths and its stride.
        stages: the searched stages.
        kernel_sizes: per-block kernel choices (odd), of every depthwise conv and of a fused block's expansion.
        expand_ratios: per-block expansion choices (ratios of the block's input width, at least 1).
        head_widths: searched widths of the 1x1 conv before global pooling.
        activation: relu or relu6 (the ones the DPU fuses), of every conv but the projections.
        channel_divisor: every width is a multiple of it, expanded ones rounded to it (16 fills the DPU's modes).
    """

    type: str = "hybrid"
    stem_widths: list[int] = field(default_factory=lambda: [16, 32])
    stem_stride: int = 2
    stages: list[HybridStageConfig] = field(default_factory=lambda: [
        HybridStageConfig([16, 32], 1, [1, 2], ["ib", "fused"]),
        HybridStageConfig([32, 48], 2, [1, 2, 3], ["convnext", "ib", "extradw", "fused"]),
        HybridStageConfig([64, 96], 2, [2, 3, 4]),
        HybridStageConfig([128, 160], 1, [1, 2])])
    kernel_sizes: list[int] = field(default_factory=lambda: [3, 5])
    expand_ratios: list[int] = field(default_factory=lambda: [2, 4, 6])
    head_widths: list[int] = field(default_factory=lambda: [256, 640, 1280])
    dropout: float = 0.1
    activation: str = "relu"
    channel_divisor: int = 16


def _layout(kind: str) -> tuple[bool, bool, bool]:
    """(depthwise conv on the input, depthwise conv inside the expansion, dense k x k expansion) of a type."""
    return kind in ("convnext", "extradw"), kind in ("ib", "extradw"), kind == "fused"


# ------------------------------------------------------------------------------------------ static modules
class HybridBlock(ShortcutBlock):
    """One block of a standalone network: an optional depthwise conv on the input (BN, no activation, as in UIB),
    the expansion (1x1, or dense k x k for `fused`), an optional depthwise conv inside it, the 1x1 projection;
    the input added when stride and width allow. The stride sits in the inner depthwise conv when there is one,
    else in the first conv."""

    def __init__(self, kind: str, in_channels: int, out_channels: int, *, mid_channels: int, kernel_size: int,
                 stride: int, act_layer: type[nn.Module]):
        super().__init__(in_channels, out_channels, stride)
        start_dw, mid_dw, fused = _layout(kind)
        self.kind = kind
        self.start = (ConvBnAct(in_channels, in_channels, kernel_size, stride=1 if mid_dw else stride,
                                groups=in_channels, act_layer=None) if start_dw else nn.Identity())
        self.expand = ConvBnAct(in_channels, mid_channels, kernel_size if fused else 1,
                                stride=stride if fused else 1, act_layer=act_layer)
        self.mid = (ConvBnAct(mid_channels, mid_channels, kernel_size, stride=stride, groups=mid_channels,
                              act_layer=act_layer) if mid_dw else nn.Identity())
        self.project = ConvBnAct(mid_channels, out_channels, 1, act_layer=None)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.mid(self.expand(self.start(x))))


class HybridNet(StemBlocksHead):
    """A standalone network of the space: stem, blocks, head."""


# ------------------------------------------------------------------------------------------ elastic modules
class _ElasticConvBn(nn.Module):
    """An elastic conv and its batch norm, optionally followed by an activation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1,
                 depthwise: bool = False, act_layer: type[nn.Module] | None = None):
        super().__init__()
        self.conv = ElasticConv2d(in_channels, out_channels, kernel_size, stride=stride, depthwise=depthwise)
        self.bn = ElasticBatchNorm2d(out_channels)
        self.act = act_layer() if act_layer is not None else nn.Identity()

    def forward(self, x: torch.Tensor, out_channels: int | None = None, kernel_size: int | None = None,
                stride: int | None = None):
        return self.act(self.bn(self.conv(x, out_channels=out_channels, kernel_size=kernel_size, stride=stride)))

    def export_into(self, target: ConvBnAct, in_channels: int, out_channels: int, kernel_size: int,
                    stride: int | None = None) -> None:
        target[0] = self.conv.export(in_channels, out_channels, kernel_size, stride)
        target[1] = self.bn.export(in_channels if self.conv.depthwise else out_channels)


class ElasticUIB(nn.Module):
    """The block at one block position, for every block type of its stage: one universal inverted bottleneck
    (MobileNetV4) whose types are masks over shared weights. An optional depthwise conv on the input (ConvNext-like
    and ExtraDW), one expansion, an optional depthwise conv inside it (IB and ExtraDW), one projection: every type
    trains the expansion and the projection, and each depthwise conv is shared by the two types that use it. The
    expansion's weight is k x k when the stage has fused blocks: a fused block runs it whole, the other types its
    centre tap as their 1x1 expansion (OFA's kernel sharing). Each piece holds the largest input, expanded and
    output widths of the position and the largest kernel; an arch runs the leading channels and the centred kernel.
    Where the stride goes depends on the type (as in `HybridBlock`), so the shared convs take it per call."""

    def __init__(self, kinds: tuple[str, ...], max_in: int, max_out: int, *, stride: int, kernel_sizes,
                 expand_ratios, act_layer: type[nn.Module], channel_divisor: int):
        super().__init__()
        self.stride, self.divisor, self.act_layer = stride, channel_divisor, act_layer
        k = max(kernel_sizes)
        max_mid = expanded_width(max_in, max(expand_ratios), channel_divisor)
        layouts = [_layout(kind) for kind in kinds]
        self.start = (_ElasticConvBn(max_in, max_in, k, depthwise=True)
                      if any(start for start, _, _ in layouts) else None)
        self.expand = _ElasticConvBn(max_in, max_mid, k if any(fused for *_, fused in layouts) else 1,
                                     act_layer=act_layer)
        self.mid = (_ElasticConvBn(max_mid, max_mid, k, depthwise=True, act_layer=act_layer)
                    if any(mid for _, mid, _ in layouts) else None)
        self.project = _ElasticConvBn(max_mid, max_out, 1)

    def _strides(self, kind: str) -> tuple[int, int, int]:
        """The strides of the input depthwise conv, the expansion and the inner depthwise conv of a type."""
        _, mid_dw, fused = _layout(kind)
        return (1 if mid_dw else self.stride), (self.stride if fused else 1), self.stride

    def forward(self, x: torch.Tensor, kind: str, out_channels: int, kernel_size: int,
                expand_ratio: int) -> torch.Tensor:
        start_dw, mid_dw, fused = _layout(kind)
        start_stride, expand_stride, mid_stride = self._strides(kind)
        mid = expanded_width(x.shape[1], expand_ratio, self.divisor)
        h = self.start(x, kernel_size=kernel_size, stride=start_stride) if start_dw else x
        h = self.expand(h, out_channels=mid, kernel_size=kernel_size if fused else 1, stride=expand_stride)
        if mid_dw:
            h = self.mid(h, kernel_size=kernel_size, stride=mid_stride)
        h = self.project(h, out_channels=out_channels)
        return x + h if self.stride == 1 and x.shape[1] == out_channels else h

    def extract(self, kind: str, in_channels: int, out_channels: int, kernel_size: int,
                expand_ratio: int) -> HybridBlock:
        start_dw, mid_dw, fused = _layout(kind)
        start_stride, expand_stride, mid_stride = self._strides(kind)
        mid = expanded_width(in_channels, expand_ratio, self.divisor)
        block = HybridBlock(kind, in_channels, out_channels, mid_channels=mid, kernel_size=kernel_size,
                            stride=self.stride, act_layer=self.act_layer)
        if start_dw:
            self.start.export_into(block.start, in_channels, in_channels, kernel_size, start_stride)
        self.expand.export_into(block.expand, in_channels, mid, kernel_size if fused else 1, expand_stride)
        if mid_dw:
            self.mid.export_into(block.mid, mid, mid, kernel_size, mid_stride)
        self.project.export_into(block.project, mid, out_channels, 1)
        return block.train(self.training)


class ElasticHybridHead(nn.Module):
    """The head on the largest widths: 1x1 conv to the active head width, pooling, dropout, classifier."""

    def __init__(self, max_in: int, max_width: int, num_classes: int, *, dropout: float,
                 act_layer: type[nn.Module]):
        super().__init__()
        self.conv = _ElasticConvBn(max_in, max_width, 1, act_layer=act_layer)
        self.dropout = nn.Dropout(dropout)
        self.classifier = ElasticLinear(max_width, num_classes)
        self.dropout_p, self.act_layer, self.num_classes = dropout, act_layer, num_classes

    def forward(self, x: torch.Tensor, width: int) -> torch.Tensor:
        return self.classifier(self.dropout(self.conv(x, out_channels=width).mean((2, 3))))

    def extract(self, in_channels: int, width: int) -> ClassifierHead:
        head = ClassifierHead(in_channels, width, self.num_classes, dropout=self.dropout_p, act_layer=self.act_layer)
        self.conv.export_into(head.conv, in_channels, width, 1)
        head.classifier = self.classifier.export(width)
        return head.train(self.training)


class HybridSupernet(Supernet):
    def __init__(self, space: "HybridSpace"):
        super().__init__()
        cfg, act = space.config, space.act_layer
        self.space = space
        self.stem = _ElasticConvBn(space.input_shape[0], max(cfg.stem_widths), 3, stride=cfg.stem_stride,
                                   act_layer=act)
        self.stages = nn.ModuleList()
        max_in = max(cfg.stem_widths)
        for stage, expands in zip(cfg.stages, space.stage_expands):
            kinds = space.stage_types[len(self.stages)]
            self.stages.append(nn.ModuleList(
                ElasticUIB(kinds, max_in if b == 0 else max(stage.widths), max(stage.widths),
                           stride=stage.stride if b == 0 else 1, kernel_sizes=space.kernels, expand_ratios=expands,
                           act_layer=act, channel_divisor=cfg.channel_divisor)
                for b in range(max(stage.depths))))
            max_in = max(stage.widths)
        self.head = ElasticHybridHead(max_in, max(cfg.head_widths), space.num_outputs, dropout=cfg.dropout,
                                      act_layer=act)
        self.apply(init_weights)
        self.arch = space.largest()

    def set_active(self, arch: dict) -> None:
        self.arch = self.space.validate(arch)

    def _active_blocks(self):
        """(block position, block type, its input width, output width, kernel, expansion) of each block of the
        active arch."""
        arch, c = self.arch, self.arch["stem"]
        for s, positions in enumerate(self.stages):
            for b in range(arch["depth"][s]):
                out = arch["width"][s]
                yield positions[b], arch["block"][s][b], c, out, arch["kernel"][s][b], arch["expand"][s][b]
                c = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x, out_channels=self.arch["stem"])
        for block, kind, _, out, k, e in self._active_blocks():
            x = block(x, kind, out, k, e)
        return self.head(x, self.arch["head"])

    def extract(self, arch: dict) -> HybridNet:
        self.set_active(arch)
        stem = ConvBnAct(self.space.input_shape[0], self.arch["stem"], 3, stride=self.space.config.stem_stride,
                         act_layer=self.space.act_layer)
        self.stem.export_into(stem, self.space.input_shape[0], self.arch["stem"], 3)
        blocks = [block.extract(kind, c, out, k, e) for block, kind, c, out, k, e in self._active_blocks()]
        last = self.arch["width"][-1]
        return HybridNet(stem, blocks, self.head.extract(last, self.arch["head"])).train(self.training)


# ------------------------------------------------------------------------------------------ the supernet under gates
class RelaxedHybrid(RelaxedSupernet):
    """The hybrid space under gates: every conv of the supernet at its largest shape, its output masked.

    * widths and expansions (FBNetV2 channel search: Wan et al., CVPR 2020, https://arxiv.org/abs/2004.05565):
      each conv's output, after batch norm and activation, is multiplied by the gate-weighted sum of prefix masks
      (channel c is kept by every value whose width exceeds c). A block's expanded width depends on its input width
      (the previous stage's, or the stem's, for a stage's first block) and its expansion, so its mask is the sum
      over both choices of the product of their gates times the prefix mask of that expanded width;
    * kernel (Single-Path NAS: Stamoulis et al., 2019, https://arxiv.org/abs/1904.02877): each k x k conv of a block
      (its depthwise convs, a fused block's expansion) runs its largest kernel multiplied by the gate-weighted sum
      of centred k x k masks; the other types' 1x1 expansion is its centre tap, as in `ElasticUIB`;
    * block type: each type of the stage runs its own path through the position's one `ElasticUIB` up to the
      expanded features (types whose paths begin alike, ConvNext-like and ExtraDW at stride 1, compute that part
      once), and the shared projection takes the gate-weighted sum of those features: one projection for all the
      types (in eval mode, where its batch norm is affine, that is the gate-weighted sum of the types' outputs);
    * shortcut: a stride-1 stage's first block adds its input weighted by the probability that its input and
      output widths are equal (later blocks always add it);
    * depth: a stage's output is the gate-weighted sum of its outputs after each searched depth (FBNetV2).

    One-hot gates compute the supernet's arch exactly; in train mode only the head's dropout draws differ (its
    mask is drawn over the largest head width: the same distribution on the active features).

    The interface differentiable search runs it through: `search_spaces.relaxed.RelaxedSupernet`.
    """

    def __init__(self, space: "HybridSpace", supernet: HybridSupernet):
        super().__init__(space, supernet)
        self.depths = self.stage_depths()
        values = {c.label: c.values for c in space.choices}
        self.register_buffer("kernel_masks", centred_kernel_masks(space.kernels), persistent=False)
        self.register_buffer("stem_masks", prefix_masks(values["stem"], supernet.stem.conv.out_channels),
                             persistent=False)
        self.register_buffer("head_masks", prefix_masks(values["head"], supernet.head.conv.conv.out_channels),
                             persistent=False)
        inputs = values["stem"]
        for s, positions in enumerate(supernet.stages):
            widths, expands = values[f"s{s}.width"], space.stage_expands[s]
            self.register_buffer(f"out_masks_{s}", prefix_masks(widths, max(widths)), persistent=False)
            if positions[0].stride == 1:
                same = torch.tensor([[float(i == o) for o in widths] for i in inputs])
                self.register_buffer(f"same_width_{s}", same, persistent=False)
            for b, block in enumerate(positions):
                block_inputs = inputs if b == 0 else widths
                mids = [expanded_width(c, e, space.config.channel_divisor) for c in block_inputs for e in expands]
                max_mid = block.expand.conv.out_channels
                self.register_buffer(f"mid_masks_{s}_{b}", prefix_masks(mids, max_mid).view(
                    len(block_inputs), len(expands), max_mid), persistent=False)
            inputs = widths

    @staticmethod
    def _conv_bn(piece: _ElasticConvBn, h: torch.Tensor, weight: torch.Tensor, stride: int,
                 mask: torch.Tensor) -> torch.Tensor:
        """`piece` at full width with `weight` (its own, masked or cropped), its output times the channel mask."""
        conv = piece.conv
        h = F.conv2d(h, weight, conv.bias, stride, weight.shape[-1] // 2, 1, conv.out_channels if conv.depthwise else 1)
        return piece.act(piece.bn(h)) * mask

    def _block(self, block: ElasticUIB, kinds: tuple[str, ...], x: torch.Tensor, type_gate: torch.Tensor,
               kernel_mask: torch.Tensor, in_mask: torch.Tensor, mid_mask: torch.Tensor, out_mask: torch.Tensor,
               shortcut) -> torch.Tensor:
        """One block position: every type's expanded features, mixed by `type_gate`, projected; `shortcut` weighs
        the input added (None: none)."""
        expand = block.expand.conv.weight
        centre = expand.shape[-1] // 2
        weights = {"start": block.start.conv.weight * kernel_mask if block.start is not None else None,
                   "pointwise": expand[..., centre:centre + 1, centre:centre + 1],
                   "fused": expand * kernel_mask if "fused" in kinds else None,
                   "mid": block.mid.conv.weight * kernel_mask if block.mid is not None else None}
        computed: dict[tuple, torch.Tensor] = {}  # a path's beginning -> its output (shared by the types it begins)
        mixed = 0
        for gate, kind in zip(type_gate, kinds):
            start_dw, mid_dw, fused = _layout(kind)
            start_stride, expand_stride, mid_stride = block._strides(kind)
            steps = (([("start", block.start, start_stride, in_mask)] if start_dw else [])
                     + [("fused" if fused else "pointwise", block.expand, expand_stride, mid_mask)]
                     + ([("mid", block.mid, mid_stride, mid_mask)] if mid_dw else []))
            h, path = x, ()
            for name, piece, stride, mask in steps:
                path += ((name, stride),)
                if path not in computed:
                    computed[path] = self._conv_bn(piece, h, weights[name], stride, mask)
                h = computed[path]
            mixed = mixed + gate * h
        h = self._conv_bn(block.project, mixed, block.project.conv.weight, 1, out_mask)
        if shortcut is None:
            return h
        # the input on the output's channels: the shortcut only runs when the widths are equal
        channels = h.shape[1]
        x = x[:, :channels] if x.shape[1] >= channels else F.pad(x, [0, 0, 0, 0, 0, channels - x.shape[1]])
        return h + shortcut * x

    def forward(self, x: torch.Tensor, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        net, space = self.supernet, self.space
        in_gate = gates["stem"]
        in_mask = (in_gate @ self.stem_masks).view(1, -1, 1, 1)
        x = self._conv_bn(net.stem, x, net.stem.conv.weight, net.stem.conv.stride, in_mask)
        for s, positions in enumerate(net.stages):
            width_gate = gates[f"s{s}.width"]
            out_mask = (width_gate @ getattr(self, f"out_masks_{s}")).view(1, -1, 1, 1)

            def block(b: int, h: torch.Tensor) -> torch.Tensor:
                block_gate, block_mask = (in_gate, in_mask) if b == 0 else (width_gate, out_mask)
                mid_mask = torch.einsum("w,e,wec->c", block_gate, gates[f"s{s}.b{b}.expand"],
                                        getattr(self, f"mid_masks_{s}_{b}")).view(1, -1, 1, 1)
                kernel_mask = torch.einsum("k,kij->ij", gates[f"s{s}.b{b}.kernel"], self.kernel_masks)
                if positions[b].stride != 1:
                    shortcut = None
                elif b == 0:  # the probability that the input and output widths are equal
                    shortcut = in_gate @ getattr(self, f"same_width_{s}") @ width_gate
                else:
                    shortcut = 1.0
                return self._block(positions[b], space.stage_types[s], h, gates[f"s{s}.b{b}.block"], kernel_mask,
                                   block_mask, mid_mask, out_mask, shortcut)

            x = self.depth_mixed(s, x, gates, block)
            in_gate, in_mask = width_gate, out_mask
        head = net.head
        head_mask = (gates["head"] @ self.head_masks).view(1, -1, 1, 1)
        h = self._conv_bn(head.conv, x, head.conv.conv.weight, 1, head_mask)
        return head.classifier(head.dropout(h.mean((2, 3))))

    def cost_terms(self) -> list[CostTerm]:
        """The stem by its width; each block by its type, kernel, expansion, output width, input width (a
        stage's first block: the previous stage's or the stem's) and whether the stage's depth runs it; the head
        by its width and the last stage's."""
        def labels(s: int, b: int) -> tuple[str, ...]:
            inputs = ((f"s{s - 1}.width" if s else "stem"),) if b == 0 else ()
            return (f"s{s}.b{b}.block", f"s{s}.b{b}.kernel", f"s{s}.b{b}.expand", f"s{s}.width") + inputs

        last = len(self.supernet.stages) - 1
        return ([self.block_term(0, ("stem",))] + self.stage_block_terms(1, labels)
                + [self.block_term(-1, (f"s{last}.width", "head"))])


# ------------------------------------------------------------------------------------------ the space
@register_space("hybrid", HybridSpaceConfig)
class HybridSpace(SearchSpace):
    """NPU-native hybrid space (see the module docstring). Config: `HybridSpaceConfig`."""

    relaxed_class = RelaxedHybrid

    def __init__(self, config: HybridSpaceConfig, *, input_shape, num_outputs: int):
        super().__init__(input_shape, num_outputs)
        divisor = config.channel_divisor
        check_stage_depths(config.stages)
        if config.activation not in ACTIVATIONS:
            raise ArchError(f"space.activation: {config.activation!r} is not one of {sorted(ACTIVATIONS)} (the "
                            "activations the NPU fuses into its convolutions)")
        self._widths(config.stem_widths, divisor, "space.stem_widths")
        self._widths(config.head_widths, 1, "space.head_widths")
        for i, stage in enumerate(config.stages):
            self._widths(stage.widths, divisor, f"space.stages[{i}].widths")
            unknown = sorted(set(stage.block_types) - set(BLOCK_TYPES))
            if not stage.block_types or unknown:
                raise ArchError(f"space.stages[{i}].block_types: expected some of {list(BLOCK_TYPES)}, got "
                                f"{stage.block_types}")
        self.config = config
        self.act_layer = ACTIVATIONS[config.activation]
        self.kernels = kernel_choices(config.kernel_sizes)
        #: per stage: its expansion ratios and its block types (in `BLOCK_TYPES` order)
        self.stage_expands = stage_expand_ratios(config.expand_ratios, config.stages)
        self.stage_types = [tuple(t for t in BLOCK_TYPES if t in stage.block_types) for stage in config.stages]

    @staticmethod
    def _widths(widths: list[int], divisor: int, where: str) -> None:
        if not widths or any(w < 1 or w % divisor for w in widths):
            raise ArchError(f"{where}: positive multiples of {divisor} needed, got {widths}")

    # ------------------------------------------------------------------ the choices and the arch dict
    def _build_choices(self) -> list[Choice]:
        cfg = self.config
        choices = [Choice("stem", tuple(sorted(set(cfg.stem_widths))))]
        for s, stage in enumerate(cfg.stages):
            choices.append(Choice(f"s{s}.depth", tuple(sorted(set(stage.depths)))))
            choices.append(Choice(f"s{s}.width", tuple(sorted(set(stage.widths)))))
            for b in range(max(stage.depths)):
                choices.append(Choice(f"s{s}.b{b}.block", self.stage_types[s]))
                choices.append(Choice(f"s{s}.b{b}.kernel", self.kernels))
                choices.append(Choice(f"s{s}.b{b}.expand", self.stage_expands[s]))
        choices.append(Choice("head", tuple(sorted(set(cfg.head_widths)))))
        return choices

    _PER_BLOCK = ("block", "kernel", "expand")
    _KEYS = ("stem", "depth", "width", "block", "kernel", "expand", "head")

    def arch_from_assignment(self, values: dict[str, Any]) -> dict:
        n = len(self.config.stages)
        depth = [int(values[f"s{s}.depth"]) for s in range(n)]
        arch = {"stem": int(values["stem"]), "depth": depth, "width": [int(values[f"s{s}.width"]) for s in range(n)]}
        for key in self._PER_BLOCK:
            cast = str if key == "block" else int
            arch[key] = [[cast(values[f"s{s}.b{b}.{key}"]) for b in range(d)] for s, d in enumerate(depth)]
        arch["head"] = int(values["head"])
        return arch

    def assignment_from_arch(self, arch: dict) -> dict[str, Any]:
        unused = {"block": lambda s: self.stage_types[s][0], "kernel": lambda s: self.kernels[0],
                  "expand": lambda s: self.stage_expands[s][0]}
        values = stage_assignment(arch, self._KEYS, [s.depths for s in self.config.stages], per_stage=("width",),
                                  per_block={key: unused[key] for key in self._PER_BLOCK})
        return {"stem": arch["stem"], "head": arch["head"], **values}

    # ------------------------------------------------------------------ networks
    def build_supernet(self) -> HybridSupernet:
        return HybridSupernet(self)

    def fresh_network(self, arch: dict) -> nn.Module:
        """Initialised at its own size: the supernet's initialisation scales by its largest widths."""
        net = self.build_supernet().extract(self.validate(arch))
        net.apply(init_weights)
        return net

    # ------------------------------------------------------------------ cost blocks
    def _stem_block(self, width: int) -> Block:
        c, h, w = self.input_shape
        stride, act = self.config.stem_stride, self.config.activation
        return Block(f"stem|in{c}x{h}x{w}|out{width}|k3|s{stride}|{act}", (1, c, h, w),
                     partial(ConvBnAct, c, width, 3, stride=stride, act_layer=self.act_layer))

    def _block(self, kind: str, in_channels: int, out_channels: int, kernel: int, expand: int, stride: int,
               hw: tuple[int, int]) -> Block:
        mid = expanded_width(in_channels, expand, self.config.channel_divisor)
        h, w = hw
        return Block(f"hybrid|{kind}|k{kernel}|e{expand}|mid{mid}|in{in_channels}x{h}x{w}|out{out_channels}|"
                     f"s{stride}|{self.config.activation}", (1, in_channels, h, w),
                     partial(HybridBlock, kind, in_channels, out_channels, mid_channels=mid, kernel_size=kernel,
                             stride=stride, act_layer=self.act_layer))

    def _head_block(self, in_channels: int, width: int, hw: tuple[int, int]) -> Block:
        h, w = hw
        cfg = self.config
        return Block(f"head|in{in_channels}x{h}x{w}|mid{width}|out{self.num_outputs}|{cfg.activation}",
                     (1, in_channels, h, w),
                     partial(ClassifierHead, in_channels, width, self.num_outputs, dropout=cfg.dropout,
                             act_layer=self.act_layer))

    def _resolutions(self) -> list[tuple[int, int]]:
        """The input resolution of each stage, then the head's."""
        h, w = self.input_shape[1:]
        h, w = -(-h // self.config.stem_stride), -(-w // self.config.stem_stride)
        out = []
        for stage in self.config.stages:
            out.append((h, w))
            h, w = -(-h // stage.stride), -(-w // stage.stride)
        return out + [(h, w)]

    def blocks(self, arch: dict) -> list[Block]:
        arch = self.validate(arch)
        resolutions = self._resolutions()
        out, c = [self._stem_block(arch["stem"])], arch["stem"]
        for s, stage in enumerate(self.config.stages):
            hw = resolutions[s]
            for b, (kind, k, e) in enumerate(zip(arch["block"][s], arch["kernel"][s], arch["expand"][s])):
                stride = stage.stride if b == 0 else 1
                out.append(self._block(kind, c, arch["width"][s], k, e, stride, hw))
                c, hw = arch["width"][s], resolutions[s + 1]
        out.append(self._head_block(c, arch["head"], resolutions[-1]))
        return out

    def all_blocks(self) -> list[Block]:
        """Each stage's first block from every input width the previous stage (or the stem) can give, its later
        blocks at each of its widths, under every type, kernel and expansion; the stem and head at each width."""
        cfg, resolutions = self.config, self._resolutions()
        unique: dict[str, Block] = {}

        def add(block: Block) -> None:
            unique.setdefault(block.key, block)

        for width in sorted(set(cfg.stem_widths)):
            add(self._stem_block(width))
        inputs = sorted(set(cfg.stem_widths))
        for s, stage in enumerate(cfg.stages):
            widths = sorted(set(stage.widths))
            for kind in self.stage_types[s]:
                for k in self.kernels:
                    for e in self.stage_expands[s]:
                        for out in widths:
                            for c in inputs:
                                add(self._block(kind, c, out, k, e, stage.stride, resolutions[s]))
                            if max(stage.depths) > 1:
                                add(self._block(kind, out, out, k, e, 1, resolutions[s + 1]))
            inputs = widths
        for c in inputs:
            for width in sorted(set(cfg.head_widths)):
                add(self._head_block(c, width, resolutions[-1]))
        return list(unique.values())

    @classmethod
    def arch_summary(cls, arch: dict) -> str:
        blocks = "|".join(",".join(f"{t} k{k} e{e:g}" for t, k, e in zip(*per_block))
                          for per_block in zip(arch["block"], arch["kernel"], arch["expand"]))
        return (f"stem {arch['stem']}; depth {'-'.join(map(str, arch['depth']))}; "
                f"width {numbers_text(arch['width'])}; blocks {blocks}; head {arch['head']}")

    @classmethod
    def arch_stages(cls, arch: dict, config: HybridSpaceConfig) -> list[ArchStage]:
        """A box per block, labelled with its type, as tall as its stage's width times its expansion."""
        widest = max(w for stage in config.stages for w in stage.widths)
        top = max(config.expand_ratios + [e for stage in config.stages for e in stage.expand_ratios or []])
        out = []
        for s, (depth, width, kinds, kernels, expands, stage) in enumerate(zip(
                arch["depth"], arch["width"], arch["block"], arch["kernel"], arch["expand"], config.stages)):
            scale = width / widest
            boxes = [ArchBox(f"{kind} k{k} e{e:g}", scale * e / top, k)
                     for kind, k, e in zip(kinds, kernels, expands)]
            most = max(stage.depths)
            boxes += [ArchBox("", scale, ghost=True) for _ in range(most - depth)]
            out.append((f"stage {s + 1} · {width} ch · stride {stage.stride} · depth {depth}/{most}", boxes))
        return out
