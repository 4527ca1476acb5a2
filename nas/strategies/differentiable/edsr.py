"""The EDSR-style space (`search_spaces.edsr`) under gates: width masks, superkernels, block-count mixing.

Every conv runs at the largest width and kernel: its kernel is the gate-weighted sum of centred k x k masks
(Single-Path NAS: Stamoulis et al., 2019, https://arxiv.org/abs/1904.02877) and its output is multiplied by
the gate-weighted prefix mask of the feature width (FBNetV2: Wan et al., CVPR 2020,
https://arxiv.org/abs/2004.05565); an upsampler conv's r^2 x width outputs are masked channel group by channel
group, so that after the pixel shuffle the mask is the width's again. The residual scaling is the gate-weighted
sum of its values, the global skip adds the bicubic upscaling weighted by its gate, the upsamplers' outputs (EDSR's
upsampler + tail, ESPCN's sub-pixel conv) are mixed by theirs, each body's output (residual, plain) is mixed over
the searched block counts and the bodies by the block-type gate. One-hot gates compute exactly the sliced subnet.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from search_spaces.edsr import EdsrSpace

from .relaxation import CostTerm, RelaxedSupernet, centred_kernel_masks, prefix_masks, register_relaxed

__all__ = ["RelaxedEdsr"]


@register_relaxed("edsr")
class RelaxedEdsr(RelaxedSupernet):
    """`EdsrSupernet` under gates (see the module docstring)."""

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
