"""The MobileNet-style space (`search_spaces.mobilenet`) under gates: single-path superkernels and depth mixing.

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
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from search_spaces.mobilenet import MobileNetSpace, se_width

from .relaxation import CostTerm, RelaxedSupernet, centred_kernel_masks, prefix_masks, register_relaxed

__all__ = ["RelaxedMobileNet"]


@register_relaxed("mobilenet")
class RelaxedMobileNet(RelaxedSupernet):
    """`MobileNetSupernet` under gates (see the module docstring)."""

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
        for s, (blocks, depths) in enumerate(zip(net.stages, self.depths)):
            depth_gate, mixed = gates[f"s{s}.depth"], 0
            for b in range(len(blocks)):
                x = self._block(s, b, x, gates[f"s{s}.b{b}.kernel"], gates[f"s{s}.b{b}.expand"])
                if b + 1 in depths:
                    mixed = mixed + depth_gate[depths.index(b + 1)] * x
            x = mixed
        return net.head(x)

    def cost_terms(self) -> list[CostTerm]:
        largest = self.space.blocks(self.space.largest())
        fixed = 1 + (1 if self.space.config.first_width else 0)  # stem (and the fixed first block)
        terms = [CostTerm((), lambda values: largest[:fixed] + largest[-1:])]
        position = fixed
        for s, blocks in enumerate(self.supernet.stages):
            for b in range(len(blocks)):
                terms.append(self.block_term(position, (f"s{s}.b{b}.kernel", f"s{s}.b{b}.expand"),
                                             depth=(f"s{s}.depth", b)))
                position += 1
        return terms
