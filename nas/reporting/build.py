"""The pages of a run and of runs compared: pareto.png and report.html (`vpunas report RUN`, and a run at its end),
compare.png and compare.html (`vpunas report RUN_A RUN_B ... -o DIR`)."""
from __future__ import annotations

import io
import logging
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..config import NPU_GENERATIONS
from ..errors import RunDirError
from ..records import BaselineResult, Candidate, read_candidates
from ..rundir import RunDir, atomic_write_bytes, atomic_write_text
from .report import generation_lines, generation_matches
from .report_page import PALETTE, common_source, compare_page, load_run, run_page, source_label

logger = logging.getLogger(__name__)

__all__ = ["build_report", "build_comparison"]


_RUN_COLOURS = ("#b0b0b0", "#1f6fb4", "#e07b00")  # evaluated, front, finalised: pareto.png's


def _draw_run(ax, candidates: list[Candidate], baselines: list[BaselineResult], metric: str, label: str = "",
              colours: Sequence[str] = _RUN_COLOURS, final_line: str = "-", baseline_colour: str | None = None):
    """One run on a matplotlib axis: its evaluated archs, inherited front, finalised archs and front, baselines;
    `label` prefixes the legend entries (a comparison of runs)."""
    prefix = f"{label}: " if label else ""
    grey, blue, orange = colours
    ax.scatter([c.latency_ms for c in candidates], [c.score for c in candidates], s=12, c=grey,
               label=f"{prefix}evaluated archs", zorder=1)
    front = sorted((c.latency_ms, c.score) for c in candidates if c.is_pareto)
    if front:
        ax.plot(*zip(*front), "-o", c=blue, ms=5, lw=1.5, label=f"{prefix}front, inherited weights ({len(front)})",
                zorder=2)
    final = [c for c in candidates if c.final is not None]
    if final:
        ax.scatter([c.latency_ms for c in final], [c.final.val for c in final], s=22,
                   c=orange, zorder=3, label=f"{prefix}finalised archs ({len(final)})")
        final_front = sorted((c.latency_ms, c.final.val) for c in final if c.is_final_pareto)
        ax.plot(*zip(*final_front), final_line, c=orange, lw=1.5, label=f"{prefix}finalised front", zorder=3)
    markers = "s^Dv*Ph"
    for i, b in enumerate(b for b in baselines if b.score is not None):  # measured elsewhere: maybe no val
        ax.scatter([b.latency_ms], [b.score], marker=markers[i % len(markers)], s=70,
                   edgecolors="black", zorder=4, label=f"{prefix}{b.name}",
                   **({"c": baseline_colour} if baseline_colour else {}))


def _figure(draw, metric: str, x_label: str) -> bytes:
    """A PNG of the front plot `draw(ax)` fills."""
    import matplotlib  # imported where a figure is drawn: it costs the command line's start-up a second

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    draw(ax)
    ax.set_xlabel(x_label)
    ax.set_ylabel({"top1": "top-1 accuracy (%, val)", "psnr": "PSNR (dB, Y, val)"}.get(metric, metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _plot(candidates: list[Candidate], baselines: list[BaselineResult], metric: str, cost_model: str) -> bytes:
    return _figure(lambda ax: _draw_run(ax, candidates, baselines, metric), metric, f"latency (ms, {cost_model})")


def _check_run(run_dir: RunDir) -> str:
    """The metric of a run with evaluated archs; FileNotFoundError / RunDirError otherwise."""
    if not run_dir.candidates.exists():
        raise FileNotFoundError(f"{run_dir.candidates} does not exist: the search has not evaluated anything yet")
    return read_candidates(run_dir.candidates)[0].metric


def build_report(run_dir: RunDir, space=None) -> None:
    """(Re)build pareto.png and report.html from a run's candidates.csv, baselines.csv and config.yaml; `space`
    (the run's search space, when the caller has it) spares rebuilding it with its task's data."""
    _check_run(run_dir)
    view = load_run(run_dir, space=space)
    table = generation_lines(generation_matches(view.candidates, view.baselines, view.metric, view.latency,
                                                  NPU_GENERATIONS),
                             view.metric)
    if len(table) > 2:
        logger.info("finalised archs against the trained baselines, per NPU generation (test split):\n%s",
                    "\n".join(table))
    png = _plot(view.candidates, view.baselines, view.metric, view.cost_model)
    atomic_write_bytes(run_dir.pareto_png, png)
    atomic_write_text(run_dir.report_html, run_page(run_dir, view, png))
    logger.info("report written: %s", run_dir.report_html)


def build_comparison(run_dirs: Sequence[RunDir], out: Path) -> tuple[Path, Path]:
    """compare.html and compare.png in `out`: the runs' fronts overlaid, one colour per run. Runs of different
    metrics (top1, psnr) are refused; latencies are put on one scale where the runs' cost models differ
    (`report_page.common_source`)."""
    metrics = [_check_run(run_dir) for run_dir in run_dirs]
    if len(set(metrics)) > 1:
        raise RunDirError("runs of different metrics cannot be compared: " + ", ".join(
            f"{run_dir.path} has {metric}" for run_dir, metric in zip(run_dirs, metrics)))
    views = [load_run(run_dir, prefix=f"r{i}-") for i, run_dir in enumerate(run_dirs)]
    source = common_source(views)

    def draw(ax):
        spread = []
        for i, view in enumerate(views):
            latency = view.latency[source]
            shown = [replace(c, latency_ms=latency[c.id]) for c in view.candidates if c.id in latency]
            colour = PALETTE[i % len(PALETTE)]
            _draw_run(ax, shown, view.baselines if source == "cost" else [], view.metric, view.name,
                      (colour + "40", colour, colour), "--", colour)
            spread += [c.latency_ms for c in shown]
        if min(spread) > 0 and max(spread) / min(spread) > 20:
            ax.set_xscale("log")

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    png = _figure(draw, metrics[0], f"latency (ms, {source_label(source, views)})")
    atomic_write_bytes(out / "compare.png", png)
    atomic_write_text(out / "compare.html", compare_page(views, png))
    logger.info("comparison written: %s", out / "compare.html")
    return out / "compare.html", out / "compare.png"
