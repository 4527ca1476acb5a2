"""The ResNet-style space (`search_spaces.resnet`) under gates: channel masks for width and expansion, depth mixing.

FBNetV2 channel search (Wan et al., CVPR 2020, https://arxiv.org/abs/2004.05565): every conv runs at its largest
width and its output (after batch norm and activation) is multiplied by a gate-weighted mask. A stage's output
mask is the sum over width multipliers of gate x prefix mask; a block's middle mask depends on the stage width
AND the block's expansion (OFA: mid = make_divisible(width * ratio)), so it is the sum over both choices of the
product of their gates times the prefix mask of that middle width. With one-hot gates the masked net computes
exactly the sliced subnet. Per stage the output is mixed over the searched depths.
"""
from __future__ import annotations

import torch

from search_spaces.resnet import ResNetSpace

from .relaxation import CostTerm, RelaxedSupernet, prefix_masks, register_relaxed

__all__ = ["RelaxedResNet"]


@register_relaxed("resnet")
class RelaxedResNet(RelaxedSupernet):
    """`ResNetSupernet` under gates (see the module docstring)."""

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
        for s, (blocks, depths) in enumerate(zip(net.stages, self.depths)):
            width_gate, depth_gate, mixed = gates[f"s{s}.width"], gates[f"s{s}.depth"], 0
            out_mask = (width_gate @ getattr(self, f"out_mask_{s}")).view(1, -1, 1, 1)
            for b, block in enumerate(blocks):
                mid_mask = torch.einsum("w,r,wrc->c", width_gate, gates[f"s{s}.b{b}.expand"],
                                        getattr(self, f"mid_mask_{s}")).view(1, -1, 1, 1)
                x = self._block(block, x, mid_mask, out_mask)
                if b + 1 in depths:
                    mixed = mixed + depth_gate[depths.index(b + 1)] * x
            x = mixed
        return net.head(x)

    def cost_terms(self) -> list[CostTerm]:
        largest = self.space.blocks(self.space.largest())
        last = len(self.supernet.stages) - 1
        terms = [CostTerm((), lambda values: largest[:1]), self.block_term(-1, (f"s{last}.width",))]
        position = 1
        for s, blocks in enumerate(self.supernet.stages):
            for b in range(len(blocks)):
                widths = (f"s{s}.width",) + ((f"s{s - 1}.width",) if b == 0 and s > 0 else ())
                terms.append(self.block_term(position, widths + (f"s{s}.b{b}.expand",), depth=(f"s{s}.depth", b)))
                position += 1
        return terms
