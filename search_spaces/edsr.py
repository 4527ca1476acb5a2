"""EDSR-style space: residual blocks without batch norm, with elastic depth, width, kernels and residual scaling.

Lim et al., "Enhanced Deep Residual Networks for Single Image Super-Resolution", CVPRW 2017
(https://arxiv.org/abs/1707.02921). The network is a 3x3 head conv, `blocks` residual blocks
(conv - ReLU - conv, output scaled by `res_scale` and added to the input), a 3x3 conv closing the body plus a
skip from the head, a pixel-shuffle upsampler fixed by the scale (x2, x3: one conv + shuffle; x4: two x2 stages)
and a 3x3 tail conv to RGB. Searched: the number of blocks (the first `blocks` run), the feature width
(all convs share one max-width weight, sliced), each block's kernel size (one max-size weight, centre crop) and
the residual scaling. Mean shift lives in the task's normalisation, so networks are pure convolutions.

The upsampler is searched too (`upsamplers`): `edsr` is EDSR's (sub-pixel conv to r^2 x width, pixel shuffle,
then a 3x3 conv to RGB at the output resolution), `subpixel` is ESPCN's (Shi et al., CVPR 2016): one conv to
r^2 x 3 channels and a pixel shuffle straight to RGB. At small widths EDSR's upsampler and its full-resolution
tail cost the VPU more than the whole body (VPU 2.7, 360x640 input, 16 channels: 2.7 + 1.2 ms of 6.3 ms).

The body is searched too (`block_types`): `res` is EDSR's residual block, `plain` a single conv opened by a
ReLU (x -> conv(relu(x)), FSRCNN / ESPCN's plain chain, with no long skip and no body-end conv). On the DPU a
plain layer is one conv with the ReLU fused: no eltwise add, which at these widths costs as much as a conv
(VPU 2.7, 360x640, 32 channels: six plain layers cost 9.3 ms, three residual blocks 15.3 ms with the same
sub-pixel output and skip). A plain body collapses under Adam when it starts with a random output; it trains
when its output starts at zero (below), and 8 layers already collapse at times, so list its depths short.

Optionally (`global_skips: [bicubic]`) the network adds a bicubic upscaling of its input to its output and so
learns the residual over bicubic, VDSR's global residual learning (Kim et al., CVPR 2016): on a short training
budget that converges much faster. EDSR itself has no such skip (`none`). On the device it is one interpolation
layer and one add at the output resolution, both costed. With the skip, the output conv starts at zero: every
arch starts as bicubic upscaling, and a plain body then trains instead of collapsing (Goyal et al.'s
zero-initialised last layer of a residual branch, 2017).

An arch: {"blocks": n, "channels": c, "kernel": [k per active block], "res_scale": r, "global_skip": s,
"upsampler": u, "block": b} (an arch without "upsampler" or "block", written before they were searched, has
EDSR's). A plain body has no residual scaling: its archs carry the space's largest `res_scale`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hw_cost import Block

from .base import ArchBox, ArchError, ArchStage, Choice, SearchSpace, Supernet, numbers_text, register_space
from .elastic import ElasticConv2d
from .relaxed import CostTerm, RelaxedSupernet, centred_kernel_masks, prefix_masks

__all__ = ["EdsrSpaceConfig", "EdsrSpace", "EdsrSupernet", "Edsr", "ResBlock", "SkipConv", "Upsampler",
           "SubpixelOutput", "BicubicSkip", "PlainLayer", "build_edsr", "network_blocks", "GLOBAL_SKIPS", "UPSAMPLERS",
           "RelaxedEdsr", "BLOCK_TYPES"]

SCALES = (2, 3, 4)
GLOBAL_SKIPS = ("none", "bicubic")  # cheapest first
UPSAMPLERS = ("subpixel", "edsr")  # cheapest first
BLOCK_TYPES = ("plain", "res")  # cheapest first
ARCH_KEYS = ("blocks", "channels", "kernel", "res_scale", "global_skip", "upsampler", "block")


@dataclass
class EdsrSpaceConfig:
    """Args:
        scale: upscaling factor 2, 3 or 4 (must equal the task's); fixes the upsampler.
        depths: searched numbers of residual blocks.
        channels: searched feature widths (weights shared by slicing).
        kernel_sizes: searched kernel size of each residual block (odd; weights shared by centre crop).
        res_scales: searched residual scaling (EDSR uses 0.1 for its wide model, 1 for the baseline); it has
            no latency cost, a deployed network folds it into the block's second conv.
        global_skips: `none` (EDSR) and / or `bicubic` (add the bicubic-upscaled input to the output). With both,
            one supernet must serve two different targets: list one unless that is the point.
        upsamplers: `edsr` (EDSR's upsampler and tail conv) and / or `subpixel` (ESPCN's: one conv and a pixel
            shuffle straight to RGB).
        block_types: `res` (EDSR's residual blocks, the long skip and the body-end conv) and / or `plain`
            (`blocks` convs, each opened by a ReLU; no long skip). In the supernet the two bodies share the head
            and the output; each body has weights of its own.
    """

    type: str = "edsr"
    scale: int = 2
    depths: list[int] = field(default_factory=lambda: [2, 4, 6, 8, 10, 12, 14, 16])
    channels: list[int] = field(default_factory=lambda: [16, 24, 32, 48, 64])
    kernel_sizes: list[int] = field(default_factory=lambda: [3, 5])
    res_scales: list[float] = field(default_factory=lambda: [0.1, 1.0])
    global_skips: list[str] = field(default_factory=lambda: ["none"])
    upsamplers: list[str] = field(default_factory=lambda: ["edsr"])
    block_types: list[str] = field(default_factory=lambda: ["res"])


# ------------------------------------------------------------------------------------------ static modules
def _conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)


class ResBlock(nn.Module):
    """EDSR's residual block: x + conv(relu(conv(x))) (residual scaling folded into the second conv)."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv1, self.act, self.conv2 = _conv(channels, channels, kernel_size), nn.ReLU(), \
            _conv(channels, channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act(self.conv1(x)))


class PlainLayer(nn.Module):
    """relu(x) -> conv: one layer of a plain body (deployed, the ReLU runs fused into the conv before it)."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.act, self.conv = nn.ReLU(), _conv(channels, channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.act(x))


def _plain_layer_cost(channels: int, kernel_size: int) -> nn.Module:
    """A plain layer as a cost block: its conv with a ReLU fused. Deployed, the ReLUs sit one conv earlier (the
    head's output carries the first, the last conv none): the same count of the same convs, and a fused ReLU
    costs the DPU nothing (VPUNN: equal latencies), while blocks stay independent of the depth."""
    return nn.Sequential(_conv(channels, channels, kernel_size), nn.ReLU())


class SkipConv(nn.Module):
    """conv(x) + x: the cost block of the conv closing the body together with the long skip's add (whose cost
    depends on the shapes only, not on which tensor it adds)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = _conv(channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + x


class BicubicSkip(nn.Module):
    """Bicubic upscaling of the network input (PyTorch's kernel, a = -0.75; ONNX Resize 'cubic'), for the skip."""

    def __init__(self, scale: int):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=self.scale, mode="bicubic", align_corners=False)


class _SkipCost(BicubicSkip):
    """The global skip as a cost block: the upscaling and the add at the output resolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = super().forward(x)
        return up + up


class Upsampler(nn.Sequential):
    """Sub-pixel upsampling (ESPCN): conv to r^2 x channels, pixel shuffle by r; x4 is two x2 stages."""

    def __init__(self, channels: int, scale: int):
        stages = [2, 2] if scale == 4 else [scale]
        layers: list[nn.Module] = []
        for r in stages:
            layers += [_conv(channels, r * r * channels, 3), nn.PixelShuffle(r)]
        super().__init__(*layers)


class SubpixelOutput(nn.Sequential):
    """ESPCN's output: conv to r^2 x out_channels, pixel shuffle by r (x4 too, in one step)."""

    def __init__(self, channels: int, scale: int, out_channels: int = 3):
        super().__init__(_conv(channels, scale * scale * out_channels, 3), nn.PixelShuffle(scale))


class Edsr(nn.Module):
    """A standalone network of the family: head, body (residual blocks, then the body end with the long skip;
    or plain layers, with neither: `body_end` None), upsampler, tail, and optionally the global bicubic skip."""

    def __init__(self, head: nn.Module, blocks: list[nn.Module], body_end: nn.Module | None, upsampler: nn.Module,
                 tail: nn.Module, skip: BicubicSkip | None = None):
        super().__init__()
        self.head, self.blocks, self.body_end = head, nn.Sequential(*blocks), body_end
        self.upsampler, self.tail, self.skip = upsampler, tail, skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        body = self.blocks(h) if self.body_end is None else self.body_end(self.blocks(h)) + h
        out = self.tail(self.upsampler(body))
        return out if self.skip is None else out + self.skip(x)

    def output_conv(self) -> nn.Conv2d:
        """The conv that writes the RGB output (or its sub-pixel phases)."""
        return self.upsampler[0] if isinstance(self.tail, nn.Identity) else self.tail


def build_edsr(*, scale: int, blocks: int, channels: int, kernel_size: int | list[int] = 3,
               global_skip: str = "none", upsampler: str = "edsr", block: str = "res", in_channels: int = 3,
               out_channels: int = 3) -> Edsr:
    """A freshly initialised EDSR of any size (e.g. EDSR-baseline: 16 blocks, 64 channels, 3x3 kernels):
    PyTorch's default initialisation, except the output conv of a network with the bicubic skip (zero).

    Residual scaling is not a parameter: it is a constant factor on the blocks' second conv.
    """
    if scale not in SCALES:
        raise ArchError(f"scale: must be one of {SCALES}, got {scale}")
    kernels = [kernel_size] * blocks if isinstance(kernel_size, int) else list(kernel_size)
    if blocks < 0 or channels < 1 or len(kernels) != blocks or any(k < 1 or k % 2 == 0 for k in kernels):
        raise ArchError(f"EDSR needs blocks >= 0, channels >= 1 and one odd kernel size per block; got "
                        f"blocks={blocks}, channels={channels}, kernel_size={kernel_size}")
    if global_skip not in GLOBAL_SKIPS:
        raise ArchError(f"global_skip: {global_skip!r} is not one of {list(GLOBAL_SKIPS)}")
    if upsampler not in UPSAMPLERS:
        raise ArchError(f"upsampler: {upsampler!r} is not one of {list(UPSAMPLERS)}")
    if block not in BLOCK_TYPES:
        raise ArchError(f"block: {block!r} is not one of {list(BLOCK_TYPES)}")
    if upsampler == "edsr":
        up, tail = Upsampler(channels, scale), _conv(channels, out_channels, 3)
    else:
        up, tail = SubpixelOutput(channels, scale, out_channels), nn.Identity()
    if block == "res":
        body, body_end = [ResBlock(channels, k) for k in kernels], _conv(channels, channels, 3)
    else:
        body, body_end = [PlainLayer(channels, k) for k in kernels], None
    net = Edsr(_conv(in_channels, channels, 3), body, body_end, up, tail,
               BicubicSkip(scale) if global_skip == "bicubic" else None)
    if global_skip == "bicubic":
        _zero_(net.output_conv())
    return net


def _zero_(conv: nn.Module) -> None:
    with torch.no_grad():
        conv.weight.zero_()
        conv.bias.zero_()


# ------------------------------------------------------------------------------------------ elastic modules
class ElasticResBlock(nn.Module):
    """A residual block whose width (from its input), kernel and residual scaling are set by `set_active`."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv1 = ElasticConv2d(channels, channels, kernel_size, bias=True)
        self.conv2 = ElasticConv2d(channels, channels, kernel_size, bias=True)
        self.kernel_size, self.res_scale = kernel_size, 1.0

    def set_active(self, kernel_size: int, res_scale: float) -> None:
        self.kernel_size, self.res_scale = kernel_size, res_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        h = F.relu(self.conv1(x, out_channels=c, kernel_size=self.kernel_size))
        return x + self.conv2(h, out_channels=c, kernel_size=self.kernel_size) * self.res_scale

    @torch.no_grad()
    def extract(self, channels: int) -> ResBlock:
        block = ResBlock(channels, self.kernel_size)
        block.conv1 = self.conv1.export(channels, channels, self.kernel_size)
        block.conv2 = self.conv2.export(channels, channels, self.kernel_size)
        block.conv2.weight.mul_(self.res_scale)
        block.conv2.bias.mul_(self.res_scale)
        return block


class ElasticPlainLayer(nn.Module):
    """A plain layer whose width (from its input) and kernel are set by `set_active`."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = ElasticConv2d(channels, channels, kernel_size, bias=True)
        self.kernel_size = kernel_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.relu(x), out_channels=x.shape[1], kernel_size=self.kernel_size)

    @torch.no_grad()
    def extract(self, channels: int) -> PlainLayer:
        layer = PlainLayer(channels, self.kernel_size)
        layer.conv = self.conv.export(channels, channels, self.kernel_size)
        return layer


class EdsrSupernet(Supernet):
    def __init__(self, space: "EdsrSpace"):
        super().__init__()
        cfg = space.config
        self.space = space
        c, k = max(cfg.channels), max(cfg.kernel_sizes)
        self.head = ElasticConv2d(space.input_shape[0], c, 3, bias=True)
        self.blocks = nn.ModuleList(ElasticResBlock(c, k) for _ in range(max(cfg.depths)))
        self.body_end = ElasticConv2d(c, c, 3, bias=True)
        self.stages = [2, 2] if cfg.scale == 4 else [cfg.scale]
        self.upsampler = nn.ModuleList(ElasticConv2d(c, r * r * c, 3, bias=True) for r in self.stages)
        self.tail = ElasticConv2d(c, space.num_outputs, 3, bias=True)
        # only when searched: supernets without the choice keep their state dict
        if "subpixel" in space.upsamplers:
            self.subpixel = ElasticConv2d(c, cfg.scale * cfg.scale * space.num_outputs, 3, bias=True)
        if "plain" in space.block_types:
            self.plain = nn.ModuleList(ElasticPlainLayer(c, k) for _ in range(max(cfg.depths)))
        self.skip = BicubicSkip(cfg.scale)
        for m in self.modules():
            if isinstance(m, ElasticConv2d):  # PyTorch's default conv initialisation (as EDSR uses)
                nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5))
                bound = 1 / math.sqrt(m.weight[0].numel())
                nn.init.uniform_(m.bias, -bound, bound)
        if space.skips == ("bicubic",):  # every arch starts as bicubic upscaling (module docstring)
            for conv in (getattr(self, "subpixel", None), self.tail):
                if conv is not None:
                    _zero_(conv)
        self.set_active(space.largest())

    def set_active(self, arch: dict) -> None:
        arch = self.space.validate(arch)
        self.depth, self.channels, self.global_skip = arch["blocks"], arch["channels"], arch["global_skip"]
        self.upsampler_kind, self.block_type = arch["upsampler"], arch["block"]
        if self.block_type == "plain":
            for layer, k in zip(self.plain, arch["kernel"]):
                layer.kernel_size = k
        else:
            for block, k in zip(self.blocks, arch["kernel"]):
                block.set_active(k, arch["res_scale"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.channels
        h = self.head(x, out_channels=c)
        y = h
        for block in (self.plain if self.block_type == "plain" else self.blocks)[:self.depth]:
            y = block(y)
        if self.block_type == "res":
            y = self.body_end(y, out_channels=c) + h
        if self.upsampler_kind == "subpixel":
            y = F.pixel_shuffle(self.subpixel(y), self.space.config.scale)
        else:
            for conv, r in zip(self.upsampler, self.stages):
                y = F.pixel_shuffle(conv(y, out_channels=r * r * c), r)
            y = self.tail(y)
        return y + self.skip(x) if self.global_skip == "bicubic" else y

    @torch.no_grad()
    def extract(self, arch: dict) -> Edsr:
        self.set_active(arch)
        c, scale, out = self.channels, self.space.config.scale, self.space.num_outputs
        if self.upsampler_kind == "subpixel":
            upsampler, tail = SubpixelOutput(c, scale, out), nn.Identity()
            upsampler[0] = self.subpixel.export(c, scale * scale * out, 3)
        else:
            upsampler, tail = Upsampler(c, scale), self.tail.export(c, out, 3)
            for i, (conv, r) in enumerate(zip(self.upsampler, self.stages)):
                upsampler[2 * i] = conv.export(c, r * r * c, 3)
        if self.block_type == "plain":
            body, body_end = [layer.extract(c) for layer in self.plain[:self.depth]], None
        else:
            body, body_end = [block.extract(c) for block in self.blocks[:self.depth]], self.body_end.export(c, c, 3)
        net = Edsr(self.head.export(self.space.input_shape[0], c, 3), body, body_end, upsampler, tail,
                   BicubicSkip(scale) if self.global_skip == "bicubic" else None)
        return net.train(self.training)


# ------------------------------------------------------------------------------------------ the supernet under gates
class RelaxedEdsr(RelaxedSupernet):
    """The EDSR-style space under gates: width masks, superkernels, block-count mixing.

    Every conv runs at the largest width and kernel: its kernel is the gate-weighted sum of centred k x k masks
    (Single-Path NAS: Stamoulis et al., 2019, https://arxiv.org/abs/1904.02877) and its output is multiplied by
    the gate-weighted prefix mask of the feature width (FBNetV2: Wan et al., CVPR 2020,
    https://arxiv.org/abs/2004.05565); an upsampler conv's r^2 x width outputs are masked channel group by channel
    group, so that after the pixel shuffle the mask is the width's again. The residual scaling is the gate-weighted
    sum of its values, the global skip adds the bicubic upscaling weighted by its gate, the upsamplers' outputs (EDSR's
    upsampler + tail, ESPCN's sub-pixel conv) are mixed by theirs, each body's output (residual, plain) is mixed over
    the searched block counts and the bodies by the block-type gate. One-hot gates compute exactly the sliced subnet.

    The interface differentiable search runs it through: `search_spaces.relaxed.RelaxedSupernet`.
    """

    def __init__(self, space: EdsrSpace, supernet):
        super().__init__(space, supernet)
        self.register_buffer("width_mask", prefix_masks(space.widths, max(space.widths)), persistent=False)
        self.register_buffer("kernel_mask", centred_kernel_masks(space.kernels), persistent=False)
        self.register_buffer("res_scales", torch.tensor(space.res_scales), persistent=False)
        self.register_buffer("skip_on", torch.tensor([float(s == "bicubic") for s in space.skips]), persistent=False)

    @staticmethod
    def _conv(conv, x: torch.Tensor, kernel_mask: torch.Tensor | None = None) -> torch.Tensor:
        weight = conv.weight if kernel_mask is None else conv.weight * kernel_mask
        return F.conv2d(x, weight, conv.bias, conv.stride, conv.max_kernel // 2)

    def forward(self, x: torch.Tensor, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        net, depths = self.supernet, self.space.depths
        mask = gates["channels"] @ self.width_mask
        m = mask.view(1, -1, 1, 1)
        res_scale = gates["res_scale"] @ self.res_scales
        h = self._conv(net.head, x) * m
        kmasks = [torch.einsum("k,kij->ij", gates[f"b{b}.kernel"], self.kernel_mask) for b in range(max(depths))]
        y = 0
        for gate, kind in zip(gates["block"], self.space.block_types):
            body, mixed = h, 0
            for b, kmask in enumerate(kmasks):
                if kind == "plain":
                    body = self._conv(net.plain[b].conv, F.relu(body), kmask) * m
                else:
                    block = net.blocks[b]
                    r = self._conv(block.conv2, F.relu(self._conv(block.conv1, body, kmask)) * m, kmask) * m
                    body = body + r * res_scale
                if b + 1 in depths:
                    mixed = mixed + gates["blocks"][depths.index(b + 1)] * body
            y = y + gate * (mixed if kind == "plain" else self._conv(net.body_end, mixed) * m + h)
        outputs = []
        for kind in self.space.upsamplers:
            if kind == "subpixel":
                outputs.append(F.pixel_shuffle(self._conv(net.subpixel, y), self.space.config.scale))
                continue
            up = y
            for conv, scale in zip(net.upsampler, net.stages):
                up_mask = mask.repeat_interleave(scale * scale).view(1, -1, 1, 1)
                up = F.pixel_shuffle(self._conv(conv, up) * up_mask, scale)
            outputs.append(self._conv(net.tail, up))
        out = torch.einsum("u,u...->...", gates["upsampler"], torch.stack(outputs))
        return out + (gates["global_skip"] @ self.skip_on) * net.skip(x)

    def cost_terms(self) -> list[CostTerm]:
        space, n = self.space, max(self.space.depths)
        # positions in a deepest arch's blocks: head, n body blocks, the body end (residual bodies only), then
        # the output blocks (EDSR's upsampler and tail, or the sub-pixel conv) and the skip's, if any
        terms = [self.block_term(0, ("channels",))]
        terms += [self.block_term(1 + b, ("channels", f"b{b}.kernel", "block"), depth=("blocks", b))
                  for b in range(n)]
        largest = space.assignment_from_arch(space.largest())

        def after_body(values: dict, *prefixes: str, keep: bool = True) -> list:
            """The blocks after the body (body end, output, skip) whose keys start (or, keep False, do not start)
            with one of `prefixes`."""
            blocks = space.blocks(space.arch_from_assignment({**largest, **values}))[n + 1:]
            return [b for b in blocks if b.key.startswith(prefixes) == keep]

        terms.append(CostTerm(("channels", "block"), lambda values: after_body(values, "body_end")))
        terms.append(CostTerm(("channels", "upsampler"),
                              lambda values: after_body(values, "body_end", "bicubic_skip", keep=False)))
        terms.append(CostTerm(("global_skip",), lambda values: after_body(values, "bicubic_skip")))
        return terms


# ------------------------------------------------------------------------------------------ the space
@register_space("edsr", EdsrSpaceConfig)
class EdsrSpace(SearchSpace):
    """EDSR-style space (see the module docstring). Config: `EdsrSpaceConfig`."""

    relaxed_class = RelaxedEdsr

    def __init__(self, config: EdsrSpaceConfig, *, input_shape, num_outputs: int):
        super().__init__(input_shape, num_outputs)
        if config.scale not in SCALES:
            raise ArchError(f"space.scale: must be one of {list(SCALES)}, got {config.scale}")
        for key in ("depths", "channels", "kernel_sizes", "res_scales", "global_skips", "upsamplers", "block_types"):
            if not getattr(config, key):
                raise ArchError(f"space.{key}: needs at least one value")
        if min(config.depths) < 1:
            raise ArchError(f"space.depths: values must be >= 1, got {config.depths}")
        if min(config.channels) < 1:
            raise ArchError(f"space.channels: values must be >= 1, got {config.channels}")
        if any(k % 2 == 0 or k < 1 for k in config.kernel_sizes):
            raise ArchError(f"space.kernel_sizes: odd sizes only, got {config.kernel_sizes}")
        if any(r <= 0 for r in config.res_scales):
            raise ArchError(f"space.res_scales: values must be > 0, got {config.res_scales}")
        if set(config.global_skips) - set(GLOBAL_SKIPS):
            raise ArchError(f"space.global_skips: values must be among {list(GLOBAL_SKIPS)}, got {config.global_skips}")
        if set(config.upsamplers) - set(UPSAMPLERS):
            raise ArchError(f"space.upsamplers: values must be among {list(UPSAMPLERS)}, got {config.upsamplers}")
        if set(config.block_types) - set(BLOCK_TYPES):
            raise ArchError(f"space.block_types: values must be among {list(BLOCK_TYPES)}, got {config.block_types}")
        self.config = config
        self.depths, self.widths = tuple(sorted(set(config.depths))), tuple(sorted(set(config.channels)))
        self.kernels = tuple(sorted(set(config.kernel_sizes)))
        self.res_scales = tuple(sorted(set(float(r) for r in config.res_scales)))
        self.skips = tuple(s for s in GLOBAL_SKIPS if s in config.global_skips)
        self.upsamplers = tuple(u for u in UPSAMPLERS if u in config.upsamplers)
        self.block_types = tuple(b for b in BLOCK_TYPES if b in config.block_types)

    def _build_choices(self) -> list[Choice]:
        return ([Choice("blocks", self.depths), Choice("channels", self.widths)]
                + [Choice(f"b{b}.kernel", self.kernels) for b in range(max(self.depths))]
                + [Choice("res_scale", self.res_scales), Choice("global_skip", self.skips),
                   Choice("upsampler", self.upsamplers), Choice("block", self.block_types)])

    def arch_from_assignment(self, values: dict[str, Any]) -> dict:
        n, block = int(values["blocks"]), str(values["block"])
        res_scale = float(values["res_scale"]) if block == "res" else self.res_scales[-1]
        return {"blocks": n, "channels": int(values["channels"]),
                "kernel": [int(values[f"b{b}.kernel"]) for b in range(n)], "res_scale": res_scale,
                "global_skip": str(values["global_skip"]), "upsampler": str(values["upsampler"]), "block": block}

    def assignment_from_arch(self, arch: dict) -> dict[str, Any]:
        arch = _with_defaults(arch)
        keys = set(ARCH_KEYS)
        if set(arch) != keys:
            raise ArchError(f"arch keys must be {', '.join(ARCH_KEYS)} (missing {sorted(keys - set(arch))}, "
                            f"unknown {sorted(set(arch) - keys)})")
        n = arch["blocks"]
        if n not in self.depths:
            raise ArchError(f"arch.blocks: {n!r} is not one of {list(self.depths)}")
        if not isinstance(arch["kernel"], list) or len(arch["kernel"]) != n:
            raise ArchError(f"arch.kernel: expected {n} values (one per block)")
        values = {"blocks": n, "channels": arch["channels"], "res_scale": arch["res_scale"],
                  "global_skip": arch["global_skip"], "upsampler": arch["upsampler"], "block": arch["block"]}
        for b in range(max(self.depths)):
            values[f"b{b}.kernel"] = arch["kernel"][b] if b < n else self.kernels[0]
        return values

    def build_supernet(self) -> EdsrSupernet:
        return EdsrSupernet(self)

    def fresh_network(self, arch: dict) -> Edsr:
        """PyTorch's default initialisation for the arch's own sizes, as a from-scratch EDSR gets (a conv sliced
        from a new supernet starts scaled for the largest width and kernel: several times smaller)."""
        return self.reference_network(self.validate(arch))[0]

    def reference_network(self, arch: dict) -> tuple[Edsr, list[Block]]:
        """A freshly initialised EDSR of `arch` whose sizes may lie outside the searched ranges (a reference
        baseline such as the EDSR-baseline: 16 blocks x 64 channels), and its cost blocks.

        The residual scaling scales the blocks' second-conv initial weights (its folded form).
        """
        arch = _with_defaults(arch)
        if not isinstance(arch, dict) or set(arch) != set(ARCH_KEYS):
            raise ArchError(f"a reference EDSR arch needs exactly the keys {', '.join(ARCH_KEYS)}")
        if not isinstance(arch["res_scale"], (int, float)) or arch["res_scale"] <= 0:
            raise ArchError(f"arch.res_scale: must be a number > 0, got {arch['res_scale']!r}")
        if not all(isinstance(arch[k], int) for k in ("blocks", "channels")) or not isinstance(arch["kernel"], list):
            raise ArchError("arch.blocks and arch.channels must be integers, arch.kernel a list")
        net = build_edsr(scale=self.config.scale, blocks=arch["blocks"], channels=arch["channels"],
                         kernel_size=arch["kernel"], global_skip=arch["global_skip"], upsampler=arch["upsampler"],
                         block=arch["block"], in_channels=self.input_shape[0], out_channels=self.num_outputs)
        if arch["block"] == "res":
            with torch.no_grad():
                for block in net.blocks:
                    block.conv2.weight.mul_(arch["res_scale"])
                    block.conv2.bias.mul_(arch["res_scale"])
        return net, network_blocks(self.input_shape, self.config.scale, arch["channels"], arch["kernel"],
                                   arch["global_skip"], self.num_outputs, arch["upsampler"], arch["block"])

    def all_blocks(self) -> list[Block]:
        # every (width, kernel, skip, upsampler, block) at the deepest arch covers all keys (the residual scaling
        # costs nothing)
        unique: dict[str, Block] = {}
        for c, k, skip, up, block in itertools.product(self.widths, self.kernels, self.skips, self.upsamplers,
                                                       self.block_types):
            arch = {"blocks": max(self.depths), "channels": c, "kernel": [k] * max(self.depths),
                    "res_scale": self.res_scales[-1], "global_skip": skip, "upsampler": up, "block": block}
            unique.update((b.key, b) for b in self.blocks(arch))
        return list(unique.values())

    def blocks(self, arch: dict) -> list[Block]:
        arch = self.validate(arch)
        return network_blocks(self.input_shape, self.config.scale, arch["channels"], arch["kernel"],
                              arch["global_skip"], self.num_outputs, arch["upsampler"], arch["block"])

    @classmethod
    def arch_summary(cls, arch: dict) -> str:
        plain = arch.get("block") == "plain"
        body = f"{arch['blocks']} plain layers" if plain else f"{arch['blocks']} blocks"
        scaling = "" if plain else f"res_scale {arch.get('res_scale', 1):g}; "
        return (f"{body} x {arch['channels']} ch; kernel {numbers_text(arch['kernel'])}; {scaling}"
                f"skip {arch.get('global_skip', 'none')}; upsampler {arch.get('upsampler', 'edsr')}")

    @classmethod
    def arch_stages(cls, arch: dict, config: EdsrSpaceConfig) -> list[ArchStage]:
        """The head, the body (a box per block, as wide as its kernel, as tall as its width) and the upsampler."""
        scale = arch["channels"] / max(config.channels)
        boxes = [ArchBox(f"k{k}", scale, k) for k in arch["kernel"]]
        boxes += [ArchBox("", scale, ghost=True) for _ in range(max(config.depths) - arch["blocks"])]
        body = (f"{arch['blocks']} plain layers x {arch['channels']} ch" if arch.get("block") == "plain" else
                f"{arch['blocks']} residual blocks x {arch['channels']} ch · res_scale {arch.get('res_scale', 1):g}")
        return [("head conv", [ArchBox("k3", scale)]),
                (body, boxes),
                (f"upsampler {arch.get('upsampler', 'edsr')} · skip {arch.get('global_skip', 'none')}",
                 [ArchBox(f"x{config.scale}", 1.0)])]


def _with_defaults(arch):
    """An arch from before the upsampler and the body were searched has EDSR's."""
    return {"upsampler": "edsr", "block": "res", **arch} if isinstance(arch, dict) else arch


def network_blocks(input_shape, scale: int, channels: int, kernels: list[int], global_skip: str = "none",
                   out_channels: int = 3, upsampler: str = "edsr", block: str = "res") -> list[Block]:
    """The cost blocks of an EDSR (any size, e.g. the EDSR-baseline outside a space's ranges), in execution order.

    (Single convs are wrapped in nn.Sequential: torch.fx traces a root module's own forward as a function.)
    """
    c_in, h, w = input_shape
    c = channels
    shape = f"{h}x{w}"
    out = [Block(f"head|in{c_in}x{shape}|out{c}|k3", (1, c_in, h, w),
                 lambda: nn.Sequential(_conv(c_in, c, 3)))]
    if block == "res":
        out += [Block(f"resblock|in{c}x{shape}|k{k}", (1, c, h, w), lambda k=k: ResBlock(c, k)) for k in kernels]
        out.append(Block(f"body_end|in{c}x{shape}|k3", (1, c, h, w), lambda: SkipConv(c)))
    else:
        out += [Block(f"plain|in{c}x{shape}|k{k}", (1, c, h, w), lambda k=k: _plain_layer_cost(c, k))
                for k in kernels]
    if upsampler == "subpixel":
        out.append(Block(f"subpixel|in{c}x{shape}|x{scale}|out{out_channels}", (1, c, h, w),
                         lambda: SubpixelOutput(c, scale, out_channels)))
    else:
        out.append(Block(f"upsampler|in{c}x{shape}|x{scale}", (1, c, h, w), lambda: Upsampler(c, scale)))
        out.append(Block(f"tail|in{c}x{h * scale}x{w * scale}|out{out_channels}|k3", (1, c, h * scale, w * scale),
                         lambda: nn.Sequential(_conv(c, out_channels, 3))))
    if global_skip == "bicubic":
        out.append(Block(f"bicubic_skip|in{c_in}x{shape}|x{scale}", (1, c_in, h, w), lambda: _SkipCost(scale)))
    return out
