"""An arch drawn for the report: an inline SVG of its blocks, and a one-line summary for hovers.

The family is told by the arch's keys (`search_spaces/`: hybrid {stem, depth, width, block, kernel, expand, head},
MobileNet-style {depth, kernel, expand}, ResNet-style {depth, width, expand}, EDSR-style {blocks, channels,
kernel, ...}); the run's `space` config, when given, adds
the fixed widths and the depths an arch leaves out (drawn dashed). Other archs have no picture (`arch_svg`
returns None) and a summary that is their JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from search_spaces.elastic import make_divisible

__all__ = ["arch_summary", "arch_svg", "ARCH_CSS"]

_KERNELS = (3, 5, 7)
_BOX_HEIGHT, _UNIT, _GAP = 64, 7, 22  # px: tallest box; box width per kernel pixel; gap between boxes
#: the pictures' style, for the page that shows them: fill by kernel size, dashed blocks the arch leaves out
ARCH_CSS = ("svg.arch{font-size:10px;max-width:100%;height:auto}svg.arch rect{stroke:#333}"
            "svg.arch .k3{fill:#9ecae1}svg.arch .k5{fill:#4292c6}svg.arch .k7{fill:#08519c}svg.arch .kx{fill:#bbb}"
            "svg.arch .ghost{fill:none;stroke:#999;stroke-dasharray:3,2}svg.arch text{text-anchor:middle}"
            "svg.arch text.cap{text-anchor:start;font-size:11px}svg.arch path{stroke:#666}")


@dataclass
class _Box:
    """One block: `height` relative to the tallest (0-1], `kernel` sets its width and colour."""

    label: str
    height: float
    kernel: int = 3
    ghost: bool = False


def _family(arch: dict) -> str | None:
    keys = set(arch)
    if {"depth", "width", "block", "kernel", "expand"} <= keys:
        return "hybrid"
    if {"depth", "kernel", "expand"} <= keys:
        return "mobilenet"
    if {"depth", "width", "expand"} <= keys:
        return "resnet"
    if {"blocks", "channels", "kernel"} <= keys:
        return "edsr"
    return None


def _nums(values) -> str:
    return ",".join(f"{v:g}" for v in values)


def arch_summary(arch: dict) -> str:
    """One line: per stage (separated by |) the choices of each active block."""
    family = _family(arch)
    if family == "hybrid":
        blocks = "|".join(",".join(f"{t} k{k} e{e:g}" for t, k, e in zip(*per_block))
                          for per_block in zip(arch["block"], arch["kernel"], arch["expand"]))
        return (f"stem {arch['stem']}; depth {'-'.join(map(str, arch['depth']))}; width {_nums(arch['width'])}; "
                f"blocks {blocks}; head {arch['head']}")
    if family == "mobilenet":
        return (f"depth {'-'.join(map(str, arch['depth']))}; kernel {'|'.join(_nums(k) for k in arch['kernel'])}; "
                f"expand {'|'.join(_nums(e) for e in arch['expand'])}")
    if family == "resnet":
        return (f"depth {'-'.join(map(str, arch['depth']))}; width x{_nums(arch['width'])}; "
                f"expand {'|'.join(_nums(e) for e in arch['expand'])}")
    if family == "edsr":
        body = (f"{arch['blocks']} plain layers" if arch.get("block") == "plain" else
                f"{arch['blocks']} blocks")
        scaling = "" if arch.get("block") == "plain" else f"res_scale {arch.get('res_scale', 1):g}; "
        return (f"{body} x {arch['channels']} ch; kernel {_nums(arch['kernel'])}; {scaling}"
                f"skip {arch.get('global_skip', 'none')}; upsampler {arch.get('upsampler', 'edsr')}")
    return json.dumps(arch, sort_keys=True, separators=(",", ":"))


def _stage_cfgs(space: dict, count: int) -> list[dict]:
    stages = list(space.get("stages") or [])
    return stages if len(stages) == count else [{} for _ in range(count)]


def _mobilenet(arch: dict, space: dict) -> list[tuple[str, list[_Box]]]:
    stage_ratios = [e for cfg in space.get("stages") or [] for e in cfg.get("expand_ratios") or []]
    top = max((space.get("expand_ratios") or []) + stage_ratios or [e for stage in arch["expand"] for e in stage])
    out = []
    for s, (depth, kernels, ratios, cfg) in enumerate(zip(arch["depth"], arch["kernel"], arch["expand"],
                                                          _stage_cfgs(space, len(arch["depth"])))):
        boxes = [_Box(f"k{k} e{e:g}", e / top, k) for k, e in zip(kernels, ratios)]
        most = max(cfg.get("depths") or [depth])
        boxes += [_Box("", 1.0, 3, ghost=True) for _ in range(most - depth)]
        width = f" · {cfg['width']} ch" if "width" in cfg else ""
        stride = f" · stride {cfg['stride']}" if "stride" in cfg else ""
        extras = (" · SE" if cfg.get("se") else "") + (f" · {cfg['activation']}" if cfg.get("activation") else "")
        out.append((f"stage {s + 1}{width}{stride}{extras} · depth {depth}/{most}", boxes))
    return out


def _hybrid(arch: dict, space: dict) -> list[tuple[str, list[_Box]]]:
    widest = max(w for cfg in space.get("stages") or [] for w in cfg.get("widths") or []) if space.get("stages") \
        else max(arch["width"])
    ratios = [e for cfg in space.get("stages") or [] for e in cfg.get("expand_ratios") or []]
    top = max((space.get("expand_ratios") or []) + ratios or [e for stage in arch["expand"] for e in stage])
    out = []
    for s, (depth, width, kinds, kernels, expands, cfg) in enumerate(zip(
            arch["depth"], arch["width"], arch["block"], arch["kernel"], arch["expand"],
            _stage_cfgs(space, len(arch["depth"])))):
        scale = width / widest
        boxes = [_Box(f"{kind} k{k} e{e:g}", scale * e / top, k) for kind, k, e in zip(kinds, kernels, expands)]
        most = max(cfg.get("depths") or [depth])
        boxes += [_Box("", scale, ghost=True) for _ in range(most - depth)]
        stride = f" · stride {cfg['stride']}" if "stride" in cfg else ""
        out.append((f"stage {s + 1} · {width} ch{stride} · depth {depth}/{most}", boxes))
    return out


def _resnet(arch: dict, space: dict) -> list[tuple[str, list[_Box]]]:
    top = max(space.get("expand_ratios") or [e for stage in arch["expand"] for e in stage])
    mult_top = max(space.get("width_mults") or arch["width"])
    out = []
    for s, (depth, mult, ratios, cfg) in enumerate(zip(arch["depth"], arch["width"], arch["expand"],
                                                       _stage_cfgs(space, len(arch["depth"])))):
        scale = mult / mult_top
        boxes = [_Box(f"e{e:g}", scale * e / top) for e in ratios]
        most = max(cfg.get("depths") or [depth])
        boxes += [_Box("", scale, ghost=True) for _ in range(most - depth)]
        width = (f" = {make_divisible(cfg['width'] * mult, space.get('channel_divisor', 8))} ch"
                 if "width" in cfg else "")
        out.append((f"stage {s + 1} · width x{mult:g}{width} · depth {depth}/{most}", boxes))
    return out


def _edsr(arch: dict, space: dict) -> list[tuple[str, list[_Box]]]:
    widest = max(space.get("channels") or [arch["channels"]])
    scale = arch["channels"] / widest
    boxes = [_Box(f"k{k}", scale, k) for k in arch["kernel"]]
    boxes += [_Box("", scale, ghost=True) for _ in range(max(space.get("depths") or [0]) - arch["blocks"])]
    body = (f"{arch['blocks']} plain layers x {arch['channels']} ch" if arch.get("block") == "plain" else
            f"{arch['blocks']} residual blocks x {arch['channels']} ch · res_scale {arch.get('res_scale', 1):g}")
    return [("head conv", [_Box("k3", scale)]),
            (body, boxes),
            (f"upsampler {arch.get('upsampler', 'edsr')} · skip {arch.get('global_skip', 'none')}",
             [_Box(f"x{space['scale']}" if "scale" in space else "up", 1.0)])]


_LAYOUTS = {"hybrid": _hybrid, "mobilenet": _mobilenet, "resnet": _resnet, "edsr": _edsr}


def arch_svg(arch: dict, space: dict | None = None) -> str | None:
    """The arch as an SVG of its stages (left to right), or None for an arch of no known family.

    `space`: the run config's `space` section (optional). A box's height is the block's expansion (or width),
    its width and colour its kernel; dashed boxes are the blocks a deeper arch of the space would run.
    """
    family = _family(arch)
    if family is None:
        return None
    stages = _LAYOUTS[family](arch, space or {})
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
