"""An arch drawn for the report: an inline SVG of its stages, and a one-line summary for hovers.

The family knows its archs (`search_spaces.SearchSpace.arch_summary`, `arch_stages`: which blocks, how tall, the
blocks a deeper arch runs, drawn dashed); this module only draws the stages it gives. The family is the run
config's `space` section's; without one (a run whose config no longer loads) an arch has no picture and its
JSON for a summary.
"""
from __future__ import annotations

from html import escape

from search_spaces import SpaceConfig, arch_key, space_family

__all__ = ["arch_summary", "arch_svg", "ARCH_CSS"]

_KERNELS = (3, 5, 7)
_BOX_HEIGHT, _UNIT, _GAP = 64, 7, 22  # px: tallest box; box width per kernel pixel; gap between boxes
#: the pictures' style, for the page that shows them: fill by kernel size, dashed blocks the arch leaves out
ARCH_CSS = ("svg.arch{font-size:10px;max-width:100%;height:auto}svg.arch rect{stroke:#333}"
            "svg.arch .k3{fill:#9ecae1}svg.arch .k5{fill:#4292c6}svg.arch .k7{fill:#08519c}svg.arch .kx{fill:#bbb}"
            "svg.arch .ghost{fill:none;stroke:#999;stroke-dasharray:3,2}svg.arch text{text-anchor:middle}"
            "svg.arch text.cap{text-anchor:start;font-size:11px}svg.arch path{stroke:#666}")


def arch_summary(arch: dict, space: SpaceConfig | None) -> str:
    """One line: per stage the choices of each active block (`space`: the run's space config; None: the JSON)."""
    return arch_key(arch) if space is None else space_family(space.type).space_class.arch_summary(arch)


def arch_svg(arch: dict, space: SpaceConfig | None) -> str | None:
    """The arch as an SVG of its stages (left to right), or None where its family draws none or `space` (the run's
    space config) is None. A box's height is the block's expansion (or width), its width and colour its kernel;
    dashed boxes are the blocks a deeper arch of the space would run."""
    stages = None if space is None else space_family(space.type).space_class.arch_stages(arch, space)
    if stages is None:
        return None
    parts, x = [], 12  # room for the first label
    for caption, boxes in stages:
        start = x
        for box in boxes:
            w, h = box.kernel * _UNIT, round(max(box.height, 0.08) * _BOX_HEIGHT)
            kind = "ghost" if box.ghost else f"k{box.kernel}" if box.kernel in _KERNELS else "kx"
            parts.append(f'<rect x="{x}" y="{_BOX_HEIGHT - h + 4}" width="{w}" height="{h}" class="{kind}"/>')
            if box.label:
                parts.append(f'<text x="{x + w // 2}" y="{_BOX_HEIGHT + 16}">{escape(box.label)}</text>')
            x += w + _GAP
        width = max(x - start - _GAP, 120, len(caption) * 6)
        parts.append(f'<text x="{start}" y="{_BOX_HEIGHT + 34}" class="cap">{escape(caption)}</text>'
                     f'<path d="M{start} {_BOX_HEIGHT + 22}h{width}"/>')
        x = start + width + 24
    return (f'<svg class="arch" width="{x}" height="{_BOX_HEIGHT + 40}" viewBox="0 0 {x} {_BOX_HEIGHT + 40}">'
            f'{"".join(parts)}</svg>')
