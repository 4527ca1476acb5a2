"""A run's results as sentences and tables: headlines against the baselines, the same per NPU
generation, the paper's comparison (`build.py` draws and writes the pages from them)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Sequence

from ..records import BaselineResult, Candidate
from ..rundir import RunDir
from ..training.finalize import ranking_fidelity

logger = logging.getLogger(__name__)

__all__ = ["headline", "baseline_matches", "BaselineMatch", "fidelity_of", "read_stage_times", "reference_label",
           "paper_sentence", "LIKE_WITH_LIKE",
           "GenerationMatch", "generation_matches", "generation_lines"]

#: baseline types a headline compares finalised archs with: networks trained from scratch as long as they were
#: (`nas.baselines.matched_epochs`), and bicubic upscaling, which trains nothing; not subnets on inherited weights
LIKE_WITH_LIKE = ("standalone", "reference", "zoo", "bicubic")


def fidelity_of(candidates: Sequence[Candidate]) -> float | None:
    """The supernet's ranking fidelity over a run's finalised candidates (see
    `nas.training.finalize.ranking_fidelity`)."""
    final = [c for c in candidates if c.final is not None]
    return ranking_fidelity([c.score for c in final], [c.final.val for c in final])


def reference_label(baseline: BaselineResult) -> str | None:
    """The papers' name of a reference baseline (one whose arch names a torchvision network,
    `nas.baselines.reference_networks`): MobileNetV2-1.4, ResNet50-style; None for any other baseline."""
    if baseline.type != "reference":
        return None
    network = baseline.arch["network"]
    if network == "mobilenet_v2":
        width = f"{float(baseline.arch['width']):g}"
        return f"MobileNetV2-{width}{'' if '.' in width else '.0'}"
    return f"ResNet{network.removeprefix('resnet')}-style"


@dataclass
class BaselineMatch:
    """A baseline (`figure` on the test split at `latency_ms`) and the fastest searched arch at least as good
    (`arch_id` None when none is). `label` is the papers' name of a reference baseline (`reference_label`), else
    empty; `kind` its type."""

    name: str
    figure: float
    latency_ms: float
    arch_id: int | None = None
    arch_figure: float = float("nan")
    arch_latency_ms: float = float("nan")
    label: str = ""
    kind: str = "subnet"

    @property
    def fps_ratio(self) -> float:
        return self.latency_ms / self.arch_latency_ms

    @property
    def title(self) -> str:
        """The baseline's name, with its papers' name when that differs."""
        return f"{self.name} ({self.label})" if self.label and self.label != self.name else self.name


def _searched(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The archs a run hands over: its finalised archs when it finalised any, else those with a test figure
    (the front, on inherited weights)."""
    final = [c for c in candidates if c.final is not None]
    return final or [c for c in candidates if c.test_figure is not None]


def baseline_matches(candidates: Sequence[Candidate], baselines: Sequence[BaselineResult],
                     metric: str) -> list[BaselineMatch]:
    """The papers' comparison, per baseline with a test figure: the fastest searched arch at least as good on the
    test split (`_searched`: the finalised archs, with their finalised test metric, when the run has any)."""
    searched = [(c.test_figure, c.latency_ms, c.id) for c in _searched(candidates)]
    matches = []
    for b in baselines:
        if b.test_figure is None:
            continue
        match = BaselineMatch(b.name, b.test_figure, b.latency_ms, label=reference_label(b) or "", kind=b.type)
        good = [s for s in searched if s[0] >= match.figure]
        if good:
            match.arch_figure, match.arch_latency_ms, match.arch_id = min(good, key=lambda s: (s[1], -s[0]))
        matches.append(match)
    return matches


def headline(candidates: Sequence[Candidate], baselines: Sequence[BaselineResult], metric: str) -> list[str]:
    """`baseline_matches` in words, one line per baseline."""
    lines = []
    for m in baseline_matches(candidates, baselines, metric):
        given = f"{m.title} ({m.figure:.2f} test {metric} at {m.latency_ms:.4g} ms)"
        lines.append(f"{given}: no searched arch reaches it" if m.arch_id is None else
                     f"{given}: arch {m.arch_id} has {m.arch_figure:.2f} at {m.arch_latency_ms:.4g} ms, "
                     f"{m.fps_ratio:.2f}x the fps")
    return lines


def _join(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def paper_sentence(matches: Sequence[BaselineMatch], metric: str) -> str:
    """`baseline_matches` in the papers' form: "1.3x fps over MobileNetV2-1.4 and 2.2x over ResNet50-style at
    equal accuracy" (classification; reference baselines by their papers' names), "1.08x PSNR and 6.0x fps over
    EDSR" (super-resolution); then the baselines no searched arch reaches. Only like with like (`LIKE_WITH_LIKE`:
    never a subnet on inherited weights); empty without such a baseline."""
    matches = [m for m in matches if m.kind in LIKE_WITH_LIKE]
    name = lambda m: m.label or m.name
    found = [m for m in matches if m.arch_id is not None]
    if metric == "psnr":
        clause = _join([f"{m.arch_figure / m.figure:.2f}x PSNR and {m.fps_ratio:.1f}x fps over {name(m)}"
                        for m in found])
    else:
        clause = _join([f"{m.fps_ratio:.1f}x{' fps' if i == 0 else ''} over {name(m)}" for i, m in enumerate(found)])
        clause += " at equal accuracy" if found else ""
    missed = [name(m) for m in matches if m.arch_id is None]
    if missed:
        clause += ("; " if clause else "") + f"no searched arch reaches {_join(missed)}"
    return clause


@dataclass
class GenerationMatch:
    """A trained baseline on one NPU generation against the run's finalised archs there: `fastest` is (id, test
    figure, latency ms) of the fastest arch at least as good, `best` that of the best arch at most as slow; None
    where no arch is."""

    name: str
    device: str
    figure: float
    latency_ms: float
    fastest: tuple[int, float, float] | None
    best: tuple[int, float, float] | None

    @property
    def fps_ratio(self) -> float:
        return self.latency_ms / self.fastest[2]

    @property
    def gain(self) -> float:
        return self.best[1] - self.figure


def generation_matches(candidates: Sequence[Candidate], baselines: Sequence[BaselineResult], metric: str,
                       latency: dict[str, dict[int, float]], devices: Sequence[str]) -> list[GenerationMatch]:
    """The papers' table per NPU generation: for each trained baseline (`nas.baselines.TRAINED_TYPES`) with a
    test figure and a latency on the device (`BaselineResult.device_ms`), and each device of `devices` on
    which the run's archs were costed (`latency[device][arch id]`, e.g. `report_page.RunView.latency`)."""
    searched = _searched(candidates)
    out = []
    for b in baselines:
        figure = b.test_figure
        if figure is None or b.type not in ("standalone", "reference", "zoo"):
            continue
        for device in devices:
            if device not in b.device_ms or device not in latency:
                continue
            ms = b.device_ms[device]
            archs = [(c.id, c.test_figure, latency[device][c.id]) for c in searched if c.id in latency[device]]
            good = [a for a in archs if a[1] >= figure]
            fast = [a for a in archs if a[2] <= ms]
            out.append(GenerationMatch(b.name, device, figure, ms,
                                       min(good, key=lambda a: (a[2], -a[1])) if good else None,
                                       max(fast, key=lambda a: (a[1], -a[2])) if fast else None))
    return out


def generation_lines(matches: Sequence[GenerationMatch], metric: str) -> list[str]:
    """`generation_matches` as a markdown table (the run's log and `scripts/paper_table.py`)."""
    lines = [f"| baseline | device | test {metric} | latency (us) | fastest arch as good | its {metric} | "
             f"latency (us) | fps ratio | best arch as fast | its {metric} | latency (us) | gain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in matches:
        fastest = (f"{m.fastest[0]} | {m.fastest[1]:.2f} | {m.fastest[2] * 1e3:.2f} | {m.fps_ratio:.2f}x"
                   if m.fastest else "none as good | | |")
        best = (f"{m.best[0]} | {m.best[1]:.2f} | {m.best[2] * 1e3:.2f} | {m.gain:+.2f}" if m.best
                else "none as fast | | |")
        lines.append(f"| {m.name} | {m.device} | {m.figure:.2f} | {m.latency_ms * 1e3:.2f} | {fastest} | {best} |")
    return lines


def read_stage_times(run_dir: RunDir) -> dict | None:
    """The run's wall time per stage (`nas.run.StageClock`): {"seconds": {stage: s}, "sessions": n}, or None
    when the run does not record it (older runs) or the file is damaged."""
    try:
        record = json.loads(run_dir.stage_times.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("%s unreadable (%s): stage times left out", run_dir.stage_times, exc)
        return None
    return record if isinstance(record, dict) and isinstance(record.get("seconds"), dict) else None
