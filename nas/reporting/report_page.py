"""The HTML of report.html and compare.html: the front as inline SVG (one view per latency source and split),
hover and selection with a picture of the arch, sortable tables, the cost model's provenance and the run's time
per stage.

Self-contained: the CSS and the few lines of vanilla JS below are inlined, nothing is fetched. Without JS the
page still shows the first view, every table and every figure; JS adds the toggles, hover, selection, sorting.
"""
from __future__ import annotations

import base64
import html
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from hw_cost.lut import LatencyTable
from hw_cost.vpunn.paths import MODEL_FILES
from search_spaces import SpaceConfig

from ..baseline_entries import BASELINE_ENTRIES
from ..config import NPU_GENERATIONS, RunConfig, load_config
from ..latency.lut_validation import measured_latencies, read_correction_record
from ..pareto import pareto_mask
from ..ranking.probe import figure_lines, read_probe
from ..records import (BaselineResult, Candidate, baseline_rows, candidate_rows, read_baseline_results,
                       read_candidates)
from ..rundir import RunDir
from .arch_picture import ARCH_CSS, arch_summary, arch_svg
from .device_fronts import cost_front_on_devices
from .report import baseline_matches, fidelity_of, generation_matches, headline, paper_sentence, read_stage_times

logger = logging.getLogger(__name__)

__all__ = ["PALETTE", "RunView", "load_run", "run_page", "compare_page", "common_source",
           "source_label", "sortable_table"]

#: one colour per run on a comparison (matplotlib's tab10)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f")
_KIND_COLOURS = {"arch": "#b0b0b0", "front": "#1f6fb4", "final": "#e07b00", "baseline": "#ffd92f"}
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 760, 400, 64, 16, 12, 46


@dataclass
class RunView:
    """What a page shows of one run: its candidates and baselines. `latency[source][arch id]` in ms, sources
    `cost` (the run's own cost model), `measured` (end to end on the run's machine) and the VPUNN devices;
    `prefix` makes its point keys unique on a comparison; `config` is the run's config and `space` its space
    section, which draws the archs (None where the config no longer loads here)."""

    name: str
    path: Path
    prefix: str
    metric: str
    candidates: list[Candidate]
    baselines: list[BaselineResult]
    cost_model: str
    space: SpaceConfig | None
    latency: dict[str, dict[int, float]]
    notes: list[str] = field(default_factory=list)
    config: RunConfig | None = None


def load_run(run_dir: RunDir, prefix: str = "", space=None) -> RunView:
    """A run's config, candidates and latencies from every source it has; a source that cannot be had is left out
    with a note (without `space`, the VPUNN costing rebuilds the run's space from its config, which may no longer
    load here)."""
    candidates = read_candidates(run_dir.candidates)
    left_out = None  # why the VPUNN latencies are left out
    try:
        config = load_config(run_dir.config)
    except (ValueError, OSError) as exc:  # the config of an older vpunas, or none
        config, left_out = None, f"its config does not load: {exc}"
    view = RunView(run_dir.path.name, run_dir.path, prefix, candidates[0].metric, candidates,
                   read_baseline_results(run_dir.baselines), candidates[0].cost_model,
                   config.space if config else None,
                   {"cost": {c.id: c.latency_ms for c in candidates}}, config=config)
    measured = measured_latencies(run_dir)  # by arch key
    if measured:
        view.latency["measured"] = {c.id: measured[c.key] for c in candidates if c.key in measured}
    if config is not None:
        try:
            table = cost_front_on_devices(run_dir, NPU_GENERATIONS, candidates=candidates, config=config,
                                          space=space)
        except (ValueError, OSError) as exc:  # the errors of a data set or model file that do not load
            left_out = str(exc)
        else:
            for device in NPU_GENERATIONS:
                view.latency[device] = dict(zip(table.ids, map(float, table.latency_ms[device])))
    if left_out is not None:
        logger.warning("%s: VPUNN latencies left out: %s", run_dir.path, left_out)
        view.notes.append(f"VPUNN latency of {', '.join(NPU_GENERATIONS)} left out: the run could not be costed again "
                          f"here ({left_out}).")
    return view


def source_label(source: str, views: Sequence[RunView]) -> str:
    if source == "cost":
        models = sorted({v.cost_model for v in views})
        return (f"cost model ({models[0]})" if len(models) == 1 else
                f"each run's own cost model ({', '.join(models)})")
    if source == "measured":
        return "measured end to end on the run's machine (finalised archs)"
    return f"VPUNN {source} (archs with a test figure)"


def common_source(views: Sequence[RunView]) -> str:
    """The latency source that puts every run on one scale: the cost model they share, else VPUNN (VPU 2.7, the
    default target, first), else each run's own."""
    if len({v.cost_model for v in views}) == 1:
        return "cost"
    preferred = ("VPU_2_7", *(d for d in NPU_GENERATIONS if d != "VPU_2_7"))
    return next((d for d in preferred if all(d in v.latency for v in views)), "cost")


# ------------------------------------------------------------------------------------------------ the front
@dataclass
class _Point:
    key: str
    x: float
    y: float
    kind: str  # arch | front | final | baseline
    series: int
    name: str = ""


def _points(view: RunView, series: int, source: str, split: str) -> list[_Point]:
    """The view's points: on `val` every arch at its inherited metric and the finalised ones also at their
    finalised metric; on `test` the archs with a test figure; baselines on the run's own cost model only."""
    latency, metric, out = view.latency.get(source, {}), view.metric, []
    for c in view.candidates:
        x, key = latency.get(c.id), f"{view.prefix}{c.id}"
        if x is None:
            continue
        if split == "val":
            out.append(_Point(key, x, c.score, "front" if c.is_pareto else "arch", series))
            if c.final is not None:
                out.append(_Point(key, x, c.final.val, "final", series))
        elif c.test_figure is not None:
            out.append(_Point(key, x, c.test_figure, "final" if c.final is not None else "front", series))
    for i, b in enumerate(view.baselines if source == "cost" else ()):
        y = b.score if split == "val" else b.test_figure
        if y is not None:
            out.append(_Point(f"{view.prefix}b{i}", b.latency_ms, y, "baseline", series, b.name))
    return out


def _scale(values: list[float], lo_px: float, hi_px: float):
    """A linear or (over more than a 20x range) log mapping of `values` onto pixels, and its ticks."""
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo > 20
    f = math.log10 if log else (lambda v: v)
    a, b = f(lo), f(hi)
    pad = (b - a) * 0.05 or abs(a) * 0.1 or 1.0
    a, b = a - pad, b + pad
    if log:
        ticks = [m * 10.0 ** e for e in range(math.floor(a), math.ceil(b) + 1) for m in (1, 2, 5)]
    else:
        raw = (b - a) / 5
        step = next(m * 10.0 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)
                    if m * 10.0 ** math.floor(math.log10(raw)) >= raw)
        ticks = [k * step for k in range(math.ceil(a / step), math.floor(b / step) + 1)]
    to_px = lambda v: lo_px + (f(v) - a) / (b - a) * (hi_px - lo_px)
    return to_px, [t for t in ticks if a <= f(t) <= b], log


def _colour(point_kind: str, series: int, compare: bool) -> str:
    return PALETTE[series % len(PALETTE)] if compare else _KIND_COLOURS[point_kind]


def _plot_svg(points: list[_Point], x_label: str, y_label: str, compare: bool) -> str:
    x_of, x_ticks, log = _scale([p.x for p in points], _LEFT, _W - _RIGHT)
    y_of, y_ticks, _ = _scale([p.y for p in points], _H - _BOTTOM, _TOP)
    parts = [f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_H - _BOTTOM}" y2="{_H - _BOTTOM}" stroke="#444"/>',
             f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_H - _BOTTOM}" stroke="#444"/>']
    for t in x_ticks:
        parts.append(f'<line x1="{x_of(t):.1f}" x2="{x_of(t):.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" class="grid"/>'
                     f'<text x="{x_of(t):.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">{t:g}</text>')
    for t in y_ticks:
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y_of(t):.1f}" y2="{y_of(t):.1f}" class="grid"/>'
                     f'<text x="{_LEFT - 5}" y="{y_of(t) + 3:.1f}" text-anchor="end">{t:g}</text>')
    parts.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" text-anchor="middle">'
                 f'{html.escape(x_label)}{" (log scale)" if log else ""}</text>'
                 f'<text transform="translate(14 {(_TOP + _H - _BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
                 f'{html.escape(y_label)}</text>')
    # each series' fronts in this view: of the inherited figures and of the finalised ones
    for series in sorted({p.series for p in points}):
        for kinds, dash in ((("arch", "front"), ""), (("final",), ' stroke-dasharray="5,3"' if compare else "")):
            group = [p for p in points if p.series == series and p.kind in kinds]
            on = pareto_mask([p.y for p in group], [p.x for p in group]) if group else []
            front = sorted((p.x, p.y) for p, keep in zip(group, on) if keep)
            if len(front) > 1:
                colour = _colour("final" if kinds == ("final",) else "front", series, compare)
                xy = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in front)
                parts.append(f'<polyline points="{xy}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
    for p in sorted(points, key=lambda p: ("arch", "front", "final", "baseline").index(p.kind)):
        x, y, colour, key = x_of(p.x), y_of(p.y), _colour(p.kind, p.series, compare), html.escape(p.key)
        title = f"<title>{html.escape(p.name or 'arch ' + p.key)}</title>"
        if p.kind == "baseline":
            parts.append(f'<rect data-key="{key}" x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" '
                         f'fill="{colour}" stroke="#000">{title}</rect><text x="{x + 8:.1f}" y="{y - 6:.1f}" '
                         f'class="bname">{html.escape(p.name)}</text>')
        else:
            radius, extra = {"arch": (3, ' fill-opacity="0.45"'), "front": (3.5, ""),
                             "final": (4.5, ' stroke="#000"' if compare else "")}[p.kind]
            parts.append(f'<circle data-key="{key}" cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{colour}"{extra}>'
                         f'{title}</circle>')
    return (f'<svg class="front" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" font-size="11">'
            f'{"".join(parts)}</svg>')


def _legend(views: Sequence[RunView]) -> str:
    if len(views) > 1:
        items = [(PALETTE[i % len(PALETTE)], f"{v.name}: circles archs (faint: off the front; ringed: "
                  "finalised), squares baselines") for i, v in enumerate(views)]
    else:
        items = [(_KIND_COLOURS["arch"], "evaluated (inherited weights)"), (_KIND_COLOURS["front"], "front"),
                 (_KIND_COLOURS["final"], "finalised"), (_KIND_COLOURS["baseline"], "baselines")]
    return "".join(f'<span class="key"><i style="background:{c}"></i>{html.escape(text)}</span>' for c, text in items)


def front_section(views: Sequence[RunView]) -> tuple[str, dict]:
    """The toggles, one plot per (latency source, split), the hover box and the selection panel; and the data
    the page's JS shows on hover (`points`: key -> title, info lines)."""
    metric, compare = views[0].metric, len(views) > 1
    sources = [s for s in ("cost", "measured", *NPU_GENERATIONS) if any(s in v.latency for v in views)]
    first = common_source(views)
    plots, radios = [], []
    for source in sources:
        radios.append(f'<label><input type="radio" name="source" value="{html.escape(source)}"'
                      f'{" checked" if source == first else ""}> {html.escape(source_label(source, views))}</label>')
        for split in ("val", "test"):
            points = [p for i, v in enumerate(views) for p in _points(v, i, source, split)]
            hidden = "" if (source, split) == (first, "val") else " hidden"
            body = (_plot_svg(points, f"latency (ms), {source_label(source, views)}", f"{metric} ({split} split)",
                              compare) if points else "<p>no arch has this latency</p>")
            plots.append(f'<div class="view" data-view="{html.escape(source)}|{split}"{hidden}>{body}</div>')
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for v in views for n in v.notes)
    data = {"points": {k: v for view in views for k, v in _point_info(view).items()}}
    section = (f'<div class="toggles"><fieldset><legend>latency</legend>{"".join(radios)}</fieldset>'
               f'<fieldset><legend>{html.escape(metric)}</legend><label><input type="radio" name="split" '
               f'value="val" checked> val split (inherited; finalised archs also after training)</label><label>'
               f'<input type="radio" name="split" value="test"> test split (front and finalised archs)</label>'
               f'</fieldset></div>{notes}<div class="legend">{_legend(views)}</div>'
               f'<div class="plotrow"><div class="plot">{"".join(plots)}</div><div id="selected">'
               f'<p>Hover a point for its figures; click a point or a table row to draw its arch here.</p></div>'
               f'</div><div id="tip" hidden></div>{_pictures(views)}')
    return section, data


def _fmt(value: float, unit: str = "") -> str:
    return f"{value:.4g}{unit}"


_SHORT_LABELS = {"cost": "cost model", "measured": "measured"}
_FIGURE_LABELS = {"{m}": "val, inherited", "test_{m}": "test, inherited", "final_{m}": "val, finalised",
                  "final_test_{m}": "test, finalised", "final_int8_test_{m}": "test, finalised, INT8"}


def _point_info(view: RunView) -> dict[str, dict]:
    """Key -> {title, info: [[label, value]...], arch}: what hover and selection show of each arch and baseline."""
    metric, out = view.metric, {}
    labels = {c.format(m=metric): f"{metric} ({text})" for c, text in _FIGURE_LABELS.items()}
    run = f"{view.name} · " if view.prefix else ""
    rows, _ = candidate_rows(view.candidates)  # its figures as candidates.csv shows them
    for candidate, r in zip(view.candidates, rows):
        figures = [(labels.get(c, c), str(r[c])) for c in r if r[c] != "" and (c in labels or c.startswith("final_"))
                   and c != "is_final_pareto"]
        latency = [(f"latency, {_SHORT_LABELS.get(s, 'VPUNN ' + s)}", _fmt(lat[candidate.id], " ms"))
                   for s, lat in view.latency.items() if candidate.id in lat]
        out[f"{view.prefix}{candidate.id}"] = {
            "title": f"{run}arch {candidate.id}" + (" · front" if candidate.is_pareto else "")
                     + (" · finalised" if candidate.final is not None else ""),
            "info": [["arch", arch_summary(candidate.arch, view.space)], *figures, *latency,
                     ["params", _fmt(candidate.params / 1e6, " M")], ["MACs", _fmt(candidate.macs / 1e6, " M")]],
            "arch": candidate.arch_text}
    rows, _ = _baseline_table(view)  # as baselines.csv shows them
    for i, (b, r) in enumerate(zip(view.baselines, rows)):
        shown = [(labels.get(c, c), str(r[c])) for c in r if c not in ("name", "arch", "cost_model") and r[c] != ""]
        out[f"{view.prefix}b{i}"] = {"title": f"{run}baseline {b.name}", "info": shown, "arch": r["arch"]}
    return out


def _pictures(views: Sequence[RunView]) -> str:
    """One <template> per arch with its picture (shown on selection; archs of no known family show their JSON)."""
    out = []
    for view in views:
        pictures = [(f"{view.prefix}{c.id}", arch_svg(c.arch, view.space)) for c in view.candidates] + [
            (f"{view.prefix}b{i}", arch_svg(b.arch, view.space)) for i, b in enumerate(view.baselines)
            if BASELINE_ENTRIES[b.type].family_arch]
        out += [f'<template id="pic-{html.escape(key)}">{svg}</template>' for key, svg in pictures if svg]
    return "".join(out)


# ------------------------------------------------------------------------------------------------ tables
def sortable_table(rows: Sequence[dict], columns: Sequence[str], keys: Sequence[str] | None = None) -> str:
    """A table whose headers sort it (click again: the other way); rows with a key select that arch."""
    head = "".join(f'<th title="sort">{html.escape(c)}</th>' for c in columns)
    body = "".join((f'<tr data-key="{html.escape(k)}">' if k else "<tr>")
                   + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for r, k in zip(rows, keys or [None] * len(rows)))
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def device_columns(view: RunView) -> list[str]:
    """The latency column of each VPUNN device the run was costed on (`_table_rows`)."""
    return [f"{d}_ms" for d in NPU_GENERATIONS if d in view.latency]


def _table_rows(view: RunView, candidates: Sequence[Candidate]) -> list[dict]:
    """`candidates` (of `view`) as candidates.csv shows them, with the end-to-end latency measured on the run's
    machine (`measured_ms`, blank for archs not measured; `nas.latency.lut_validation.measured_beside_predicted`)
    if the run measured any, and a latency column per VPUNN device the run was costed on."""
    rows, _ = candidate_rows(candidates)
    measured = view.latency.get("measured")
    for c, row in zip(candidates, rows):
        if measured is not None:
            row["measured_ms"] = measured.get(c.id, "")
        for d in NPU_GENERATIONS:
            if d in view.latency:
                row[f"{d}_ms"] = _fmt(view.latency[d][c.id]) if c.id in view.latency[d] else ""
    return rows


# ------------------------------------------------------------------------------------------------ run facts
def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def training_note(view: RunView) -> str:
    """What each side of the headline trained: the finalised archs (supernet and finalisation epochs, from the
    run's config and candidates.csv) and the trained baselines (baselines.csv's epochs)."""
    final = [c.final.epochs for c in view.candidates if c.final is not None]
    config = view.config
    parts = []
    if final:
        inherited = config is not None and config.search.finalize.init == "inherited"
        supernet = f"{float(config.train.epochs):g} supernet + " if inherited else ""
        parts.append(f"finalised archs {supernet}{_span(final)} finalisation epochs")
    trained = [b for b in view.baselines if b.type in ("standalone", "reference", "zoo") and b.epochs is not None]
    if trained:
        measured = [b.name for b in trained if b.scores_from]
        elsewhere = f" ({', '.join(measured)}: figures measured elsewhere, see scores_from)" if measured else ""
        parts.append(f"trained baselines {_span([b.epochs for b in trained])} epochs from scratch"
                     f"{elsewhere}")
    return "; ".join(parts)


def _warnings_section(run_dir: RunDir) -> str:
    """The run's warnings (`RunDir.warnings`: a stage that learned nothing), above everything it reported."""
    lines = json.loads(run_dir.warnings.read_text(encoding="utf-8")) if run_dir.warnings.exists() else []
    return "".join(f'<p class="headline warning"><b>Warning: {html.escape(line)}</b></p>' for line in lines)


def _headline_section(view: RunView) -> str:
    """The papers' sentence with the run's numbers (`paper_sentence`, like with like only), what each side
    trained, then each baseline's match."""
    lines = headline(view.candidates, view.baselines, view.metric)
    if not lines:
        return ""
    sentence = paper_sentence(baseline_matches(view.candidates, view.baselines, view.metric), view.metric)
    training = training_note(view)
    where = f"test split, latency on <code>{html.escape(view.cost_model)}</code>" + (
        f"; {html.escape(training)}" if training else "")
    top = (f'<p class="headline"><b>Searched: {html.escape(sentence)}</b> ({where}).</p>' if sentence else
           '<p class="headline">No headline: no baseline of this run is a network trained from scratch as long as '
           "the finalised archs (types standalone, reference, zoo) or bicubic upscaling; zoo networks give one "
           "(<code>configs/fmnist_zoo.yaml</code>).</p>")
    kinds = {b.name: b.type for b in view.baselines}
    sources = {b.name: b.scores_from for b in view.baselines}

    def remark(name: str) -> str:
        if kinds.get(name) == "subnet":
            return " <i>(inherited weights: not like with like)</i>"
        return f" <i>(figures {html.escape(sources[name])})</i>" if sources.get(name) else ""

    items = "".join(f"<li>{html.escape(line)}{remark(line.split(' (')[0])}</li>" for line in lines)
    return f"{top}<p>Against the baselines, on the test split:</p><ul>{items}</ul>"


def generations_section(view: RunView) -> str:
    """The papers' table on every NPU generation (`generation_matches`), or nothing without a trained
    baseline costed on them."""
    matches = generation_matches(view.candidates, view.baselines, view.metric, view.latency, NPU_GENERATIONS)
    if not matches:
        return ""
    unit = view.metric
    rows = [{"baseline": m.name, "device": m.device, f"test {unit}": f"{m.figure:.2f}",
             "latency (us)": f"{m.latency_ms * 1e3:.2f}",
             "fastest arch as good": m.fastest[0] if m.fastest else "none",
             f"its test {unit}": f"{m.fastest[1]:.2f}" if m.fastest else "",
             "its latency (us)": f"{m.fastest[2] * 1e3:.2f}" if m.fastest else "",
             "fps ratio": f"{m.fps_ratio:.2f}x" if m.fastest else "",
             "best arch as fast": m.best[0] if m.best else "none",
             f"its test {unit} ": f"{m.best[1]:.2f}" if m.best else "",
             "gain": f"{m.gain:+.2f}" if m.best else ""} for m in matches]
    return ("<h2>Against the trained baselines, per NPU generation</h2><p>Each trained baseline and the finalised "
            "archs costed by VPUNN on each generation: the fastest finalised arch at least as good on the test split "
            "and its fps ratio, and the best finalised arch at most as slow and its gain; <i>none</i> where no "
            f"finalised arch qualifies. {html.escape(training_note(view))}.</p>" + sortable_table(rows, list(rows[0])))


def _correction_note(run_dir: RunDir) -> str:
    """What the run did with a latency table measured elsewhere (`nas.latency.lut_validation`), if it used a table."""
    record = read_correction_record(run_dir)
    if record is None:
        return ""
    if not record["applied"]:
        return (f"<p>Latency table used as measured (<code>cost.correct={html.escape(record['mode'])}</code>; "
                f"measured elsewhere: {html.escape(str(record.get('measured_elsewhere') or 'no'))}).</p>")
    c, before, after = record["correction"], record["before"], record["after"]
    return (f"<p>Latency table measured elsewhere ({html.escape(str(record['measured_elsewhere']))}): on "
            f"{before['archs']} networks measured on this machine its error was {before['mape_pct']:.1f}% (MAPE); "
            f"every latency of this run is corrected to {c['scale']:.3g} x table + {c['offset_ms']:.4f} ms "
            f"(error {after['mape_pct']:.1f}%, {100 * after['within_10pct']:.0f}% within 10%). The finalised archs' "
            "<code>measured_ms</code> is their end-to-end latency measured here.</p>")


def provenance_section(view: RunView) -> str:
    """Where the run's latencies come from: the latency table's measurement record, or the VPUNN model file."""
    if view.config is None:
        return f"<p>Cost model <code>{html.escape(view.cost_model)}</code>.</p>"
    cost = view.config.cost
    arg = cost.spec.argument
    if cost.spec.is_table:
        try:
            meta = LatencyTable.load(arg).metadata
        except (OSError, ValueError) as exc:
            return f"<p>Latency table <code>{html.escape(arg)}</code>: not readable here ({html.escape(str(exc))}).</p>"
        fields = ("device", "device_name", "host", "runtime", "runtime_version", "precision", "threads", "batch",
                  "statistic", "repeats", "date", "inference_overhead_ms", "created_by")
        items = "".join(f"<tr><th>{f}</th><td>{html.escape(str(meta[f]))}</td></tr>" for f in fields if f in meta)
        return (f"<p>Latency table <code>{html.escape(arg)}</code>, measured with OpenVINO (per block, batch 1; "
                f"a network's latency is the sum of its blocks plus the runtime's fixed cost):</p>"
                f"<table class='facts'>{items}</table>")
    # the kind that is not a table predicts the NPU: VPUNN (hw_cost.COST_MODEL_KINDS)
    model_dir = cost.model_dir or "the files shipped with vpunas"
    return (f"<p>VPUNN, Intel's neural cost model of the NPU: device <code>{html.escape(arg)}</code>, model file "
            f"<code>{html.escape(MODEL_FILES.get(arg, arg))}</code> from {html.escape(str(model_dir))} "
            f"(published in intel/npu-nn-cost-model, folder models/; see hw_cost/vpunn/models/NOTICE), "
            f"precision {html.escape(cost.dtype)}, run by vpunas "
            "itself layer by layer (hw_cost/vpunn/network.py).</p>")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def stage_section(run_dir: RunDir) -> str:
    record = read_stage_times(run_dir)
    if record is None:
        return "<p>This run does not record its time per stage (runs before stage_times.json).</p>"
    seconds = record["seconds"]
    total = sum(seconds.values()) or 1.0
    rows = "".join(f"<tr><td>{html.escape(stage)}</td><td>{_duration(s)}</td><td>{100 * s / total:.0f}%</td></tr>"
                   for stage, s in seconds.items())
    return (f"<p>Wall time of each stage, summed over the run's {record.get('sessions', 1)} session(s) "
            f"(<code>stage_times.json</code>; the report itself not included): {_duration(sum(seconds.values()))} "
            f"in all.</p><table class='facts'><thead><tr><th>stage</th><th>time</th><th>share</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


# ------------------------------------------------------------------------------------------------ pages
def _baseline_table(view: RunView) -> tuple[list[dict], list[str]]:
    """The run's baselines as baselines.csv shows them: rows and columns (a latency column per NPU generation any
    baseline was costed on)."""
    devices = [d for d in NPU_GENERATIONS if any(d in b.device_ms for b in view.baselines)]
    return baseline_rows(view.baselines, view.metric, devices)


def _by_latency(candidates: Sequence[Candidate], keep) -> list[Candidate]:
    return sorted((c for c in candidates if keep(c)), key=lambda c: c.latency_ms)


def _arch_table(view: RunView, candidates: Sequence[Candidate], columns: Sequence[str]) -> str:
    return sortable_table(_table_rows(view, candidates), columns, [f"{view.prefix}{c.id}" for c in candidates])


def _final_scores(view: RunView, final: Sequence[Candidate]) -> list[str]:
    """The candidates.csv columns of the finalised archs' scores beyond the val metric that any of them has
    (test, INT8 test, SSIM, ...)."""
    rows, columns = candidate_rows(final)
    return [c for c in columns if c.startswith("final_") and c != f"final_{view.metric}"
            and any(r.get(c, "") != "" for r in rows)]


def _initial(view: RunView) -> str:
    final = _by_latency(view.candidates, lambda c: c.final is not None)
    front = _by_latency(view.candidates, lambda c: c.is_pareto)
    return f"{view.prefix}{(final or front or view.candidates)[0].id}"


def _png(png: bytes, name: str) -> str:
    return (f"<details><summary>{name}, the static plot (papers, terminals)</summary><img alt=\"Pareto front\" "
            f"src=\"data:image/png;base64,{base64.b64encode(png).decode()}\"></details>")


def probe_section(run_dir: RunDir, metric: str) -> str:
    """The supernet's ranking rated on the run's probe set (`nas.ranking.probe`), or how to get one."""
    probe = read_probe(run_dir, metric)
    if probe is None:
        return ("<h2>Probe set</h2><p>None yet: <code>vpunas probe RUN_DIR</code> trains archs spread over the space "
                "from scratch (cached across runs) and rates the supernet's ranking against them.</p>")
    rows, figures = probe
    columns = [c for c in rows[0] if c != "epochs"]
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in figure_lines(figures))
    return (f"<h2>Probe set</h2><p>{len(rows)} archs spread over the space's latency range, each trained from scratch "
            f"for {float(rows[0]['epochs']):g} epochs (<code>probe.csv</code>). How well each ranking orders them by "
            f"their standalone test {html.escape(metric)} (95 % bootstrap intervals):</p><ul>{lines}</ul>"
            f"<details><summary>{len(rows)} probe archs</summary>{sortable_table(rows, columns)}</details>")


def run_page(run_dir: RunDir, view: RunView, png: bytes) -> str:
    """report.html of one run."""
    metric, candidates, baselines = view.metric, view.candidates, view.baselines
    front = _by_latency(candidates, lambda c: c.is_pareto)
    final = _by_latency(candidates, lambda c: c.final is not None)
    devices = device_columns(view)
    measured = ["measured_ms"] if "measured" in view.latency else []
    columns = ["id", metric, f"test_{metric}", "latency_ms", *devices, "params", "macs", "arch"]
    final_columns = ["id", f"final_{metric}", *_final_scores(view, final), metric, "latency_ms", *measured,
                     *devices, "is_final_pareto", "params", "macs", "arch"]
    base_rows, base_columns = _baseline_table(view)
    base_columns = [c for c in base_columns if c not in ("cost_model", "arch")]
    tau = fidelity_of(final)
    final_section = "" if not final else (
        f"<h2>Finalised archs</h2><p>{len(final)} archs of the front trained past their inherited weights "
        f"(<code>search.finalize</code>); <code>final_{html.escape(metric)}</code> on the whole val split, "
        f"<code>final_test_{html.escape(metric)}</code> on the test split. Ranking fidelity of the supernet "
        f"(Kendall tau, inherited vs finalised val {html.escape(metric)}): "
        f"<b>{'n/a' if tau is None else f'{tau:.3f}'}</b>.</p>{_arch_table(view, final, final_columns)}")
    config = run_dir.config.read_text(encoding="utf-8") if run_dir.config.exists() else ""
    section, data = front_section([view])
    data["initial"] = _initial(view)
    name = html.escape(run_dir.path.name)
    every_arch = _arch_table(view, candidates, columns)
    body = f"""<h1>vpunas run <code>{name}</code></h1>
<p>{len(candidates)} architectures evaluated; {len(front)} on the Pareto front of {html.escape(metric)} vs latency
(cost model <code>{html.escape(view.cost_model)}</code>).</p>
{_warnings_section(run_dir)}{_headline_section(view)}
<h2>Front</h2>{section}{_png(png, "pareto.png")}
{final_section}
{probe_section(run_dir, metric)}
{generations_section(view)}
<h2>Pareto front (inherited weights)</h2>{_arch_table(view, front, columns)}
<h2>Baselines</h2>{sortable_table(base_rows, base_columns, [f"b{i}" for i in range(len(baselines))])
                   if baselines else "<p>none</p>"}
<h2>All evaluated archs</h2><details><summary>{len(candidates)} archs</summary>{every_arch}</details>
<h2>Cost model</h2>{provenance_section(view)}{_correction_note(run_dir)}
<h2>Run time per stage</h2>{stage_section(run_dir)}
<h2>Config</h2><pre>{html.escape(config)}</pre>"""
    return page(f"vpunas run {run_dir.path.name}", body, data)


def compare_page(views: Sequence[RunView], png: bytes) -> str:
    """compare.html of several runs of one metric."""
    metric = views[0].metric
    section, data = front_section(views)
    data["initial"] = _initial(views[0])
    runs, tables = [], []
    for i, view in enumerate(views):
        final = [c for c in view.candidates if c.final is not None]
        tau = fidelity_of(final)
        runs.append(f'<tr><td><span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>'
                    f"{html.escape(view.name)}</span></td><td>{html.escape(view.cost_model)}</td>"
                    f"<td>{len(view.candidates)}</td><td>{sum(c.is_pareto for c in view.candidates)}</td>"
                    f"<td>{len(final)}</td>"
                    f"<td>{'n/a' if tau is None else f'{tau:.3f}'}</td><td>{html.escape(str(view.path))}</td></tr>")
        shown = _by_latency(view.candidates, lambda c: c.test_figure is not None)
        columns = ["id", metric, f"test_{metric}", f"final_{metric}", *_final_scores(view, final), "latency_ms",
                   *device_columns(view), "params", "macs", "arch"]
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in headline(view.candidates, view.baselines, metric))
        tables.append(f"<h2>{html.escape(view.name)}</h2><p>Front and finalised archs, latency on "
                      f"<code>{html.escape(view.cost_model)}</code>.</p>{f'<ul>{lines}</ul>' if lines else ''}"
                      f"{_arch_table(view, shown, columns)}")
    body = (f"<h1>vpunas: {len(views)} runs compared ({html.escape(metric)})</h1><table class='facts'><thead><tr>"
            "<th>run</th><th>cost model</th><th>archs</th><th>front</th><th>finalised</th><th>ranking fidelity</th>"
            f"<th>directory</th></tr></thead><tbody>{''.join(runs)}</tbody></table><h2>Fronts</h2>{section}"
            f"{_png(png, 'compare.png')}{''.join(tables)}")
    return page(f"vpunas: {len(views)} runs compared", body, data)


# ------------------------------------------------------------------------------------------------ the page
_CSS = """body{font-family:sans-serif;margin:2em;max-width:90em}table{border-collapse:collapse;font-size:0.85em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:last-child{text-align:left;font-family:monospace}
table.facts td:last-child{font-family:inherit}table.sortable th{cursor:pointer;background:#f0f0f0}
th[data-dir=asc]::after{content:" \\25B2"}th[data-dir=desc]::after{content:" \\25BC"}
tr[data-key]{cursor:pointer}tr.sel{background:#fff3c4}pre{background:#f6f6f6;padding:1em;overflow:auto}
.toggles{display:flex;gap:1em;flex-wrap:wrap}fieldset{border:1px solid #ccc}label{display:block;font-size:0.9em}
.plotrow{display:flex;gap:1em;align-items:flex-start;flex-wrap:wrap}
#selected{flex:1 1 20em;min-width:0;max-width:44em;font-size:0.9em}
#selected table td:last-child,#tip table td:last-child{font-family:inherit}svg.front{background:#fff}
svg .grid{stroke:#eee}svg [data-key]{cursor:pointer}svg .sel{stroke:#d00;stroke-width:3}.bname{font-size:10px}
#tip{position:absolute;background:#fffffa;border:1px solid #999;padding:4px;
font-size:0.8em;pointer-events:none;max-width:36em;box-shadow:2px 2px 6px #0003}.note{color:#a40}.warning{color:#b00}
.legend{font-size:0.85em;margin:0.4em 0}.key{margin-right:1.2em}
.key i{display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em;border:1px solid #555}"""

_JS = """(() => {
  const data = JSON.parse(document.getElementById("vpunas-data").textContent);
  const tip = document.getElementById("tip"), panel = document.getElementById("selected");
  const chosen = name => (document.querySelector(`input[name=${name}]:checked`) || {}).value;
  function showView() {
    const want = chosen("source") + "|" + chosen("split");
    document.querySelectorAll("div.view").forEach(v => { v.hidden = v.dataset.view !== want; });
  }
  function fill(el, key) {
    const p = data.points[key], head = document.createElement("b"), table = document.createElement("table");
    head.textContent = p.title;
    for (const [label, value] of p.info) {
      const tr = table.insertRow();
      tr.insertCell().textContent = label;
      tr.insertCell().textContent = value;
    }
    el.replaceChildren(head, table);
  }
  function select(key) {
    if (!data.points[key]) return;
    document.querySelectorAll(".sel").forEach(el => el.classList.remove("sel"));
    document.querySelectorAll(`[data-key="${CSS.escape(key)}"]`).forEach(el => el.classList.add("sel"));
    fill(panel, key);
    const picture = document.getElementById("pic-" + key);
    if (picture) {
      panel.append(picture.content.cloneNode(true));
    } else if (data.points[key].arch) {
      const pre = document.createElement("pre");
      pre.textContent = data.points[key].arch;
      panel.append(pre);
    }
  }
  function cellValue(tr, col) {
    const text = tr.cells[col].textContent;
    return text === "" || isNaN(Number(text)) ? text : Number(text);
  }
  function sortBy(th) {
    const table = th.closest("table"), col = th.cellIndex, rows = [...table.tBodies[0].rows];
    const dir = th.dataset.dir === "asc" ? -1 : 1;
    table.querySelectorAll("th").forEach(h => { delete h.dataset.dir; });
    th.dataset.dir = dir === 1 ? "asc" : "desc";
    const rank = v => (v === "" ? 2 : typeof v === "number" ? 0 : 1);  // numbers, then text, then blanks
    rows.sort((a, b) => {
      const x = cellValue(a, col), y = cellValue(b, col);
      if (rank(x) !== rank(y)) return rank(x) - rank(y);
      return dir * (rank(x) === 0 ? x - y : String(x).localeCompare(String(y)));
    });
    table.tBodies[0].append(...rows);
  }
  document.querySelectorAll("input[name=source], input[name=split]")
    .forEach(i => i.addEventListener("change", showView));
  document.querySelectorAll(".plot").forEach(plot => {
    plot.addEventListener("mouseover", e => {
      const mark = e.target.closest("[data-key]");
      if (mark && data.points[mark.dataset.key]) { fill(tip, mark.dataset.key); tip.hidden = false; }
    });
    plot.addEventListener("mousemove", e => {
      tip.style.left = e.pageX + 14 + "px";
      tip.style.top = e.pageY + 14 + "px";
    });
    plot.addEventListener("mouseout", () => { tip.hidden = true; });
    plot.addEventListener("click", e => {
      const mark = e.target.closest("[data-key]");
      if (mark) select(mark.dataset.key);
    });
  });
  document.querySelectorAll("tr[data-key]").forEach(tr => tr.addEventListener("click", () => select(tr.dataset.key)));
  document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => sortBy(th)));
  showView();
  if (data.initial) select(data.initial);
})();"""


def page(title: str, body: str, data: dict) -> str:
    """A whole self-contained HTML page; `data` is what the JS reads (inlined as JSON)."""
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
    payload = payload.replace("&", "\\u0026")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}\n{ARCH_CSS}</style></head><body>\n{body}\n"
            f'<script type="application/json" id="vpunas-data">{payload}</script>\n<script>{_JS}</script>\n'
            "</body></html>\n")
