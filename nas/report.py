"""Results tables and the report of a run: candidates.csv, baselines.csv, pareto.png, report.html."""
from __future__ import annotations

import base64
import csv
import html
import io
import json
import logging
from pathlib import Path
from typing import Sequence

from .pareto import pareto_mask
from .errors import RunDirError
from .rundir import RunDir, atomic_write_bytes, atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["candidate_rows", "candidate_columns", "write_csv", "read_csv", "build_report", "CANDIDATE_COLUMNS",
           "metric_of", "test_figure", "headline"]

CANDIDATE_COLUMNS = ("id", "generation", "arch", "{metric}", "test_{metric}", "latency_ms", "cost_model", "params",
                     "macs", "is_pareto", "final_{metric}", "final_test_{metric}", "is_final_pareto")


def candidate_rows(records: Sequence[dict], metric: str, test_metrics: dict[str, float],
                   finals: dict[str, dict] | None = None) -> list[dict]:
    """One row per evaluated arch, in id order, with `is_pareto` over (metric, latency).

    `finals` (arch key -> scores of `nas.finalize`) fills `final_<metric>`, `final_test_<metric>` (and the
    task's other final test scores) of the finalised archs; `is_final_pareto` marks the front of the finalised
    archs over (final metric, latency). Fields a strategy adds to its records beyond the standard ones (e.g.
    `expected_latency_ms`) are kept, as extra columns after the standard ones (see `candidate_columns`).
    """
    from search_spaces import arch_key

    finals = finals or {}
    records = sorted(records, key=lambda r: r["id"])
    mask = pareto_mask([r[metric] for r in records], [r["latency_ms"] for r in records])
    final_of = [finals.get(arch_key(r["arch"])) for r in records]
    finalised = [i for i, f in enumerate(final_of) if f is not None]
    final_mask = pareto_mask([final_of[i][f"final_{metric}"] for i in finalised],
                             [records[i]["latency_ms"] for i in finalised]) if finalised else []
    on_final_front = {i for i, on in zip(finalised, final_mask) if on}
    rows = []
    for i, (record, on_front) in enumerate(zip(records, mask)):
        test = test_metrics.get(record["key"])
        final = final_of[i] or {}
        rows.append({"id": record["id"], "generation": record.get("generation", ""),
                     "arch": json.dumps(record["arch"], sort_keys=True, separators=(",", ":")),
                     metric: record[metric], f"test_{metric}": "" if test is None else test,
                     "latency_ms": record["latency_ms"], "cost_model": record["cost_model"],
                     "params": record["params"], "macs": record["macs"], "is_pareto": bool(on_front),
                     f"final_{metric}": final.get(f"final_{metric}", ""),
                     f"final_test_{metric}": final.get(f"final_test_{metric}", ""),
                     "is_final_pareto": i in on_final_front,
                     **{k: v for k, v in final.items() if k not in (f"final_{metric}", f"final_test_{metric}")},
                     **{k: v for k, v in record.items() if k not in _RECORD_FIELDS and k != metric}})
    return rows


_RECORD_FIELDS = {"key", "id", "generation", "arch", "latency_ms", "cost_model", "params", "macs"}


def candidate_columns(rows: Sequence[dict], metric: str) -> list[str]:
    """The standard columns, then any extra fields of the rows in first-seen order."""
    columns = [c.format(metric=metric) for c in CANDIDATE_COLUMNS]
    for row in rows:
        columns += [k for k in row if k not in columns]
    return columns


def write_csv(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def metric_of(rows: Sequence[dict]) -> str:
    """The quality column of a run's candidates.csv: top1 (classification) or psnr (super-resolution)."""
    for name in ("top1", "psnr"):
        if rows and name in rows[0]:
            return name
    raise RunDirError("candidates.csv has neither a top1 nor a psnr column: not a vpunas run, or damaged")


def _plot(rows: list[dict], baselines: list[dict], metric: str, cost_model: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    lat = [float(r["latency_ms"]) for r in rows]
    val = [float(r[metric]) for r in rows]
    ax.scatter(lat, val, s=12, c="#b0b0b0", label="evaluated archs", zorder=1)
    front = sorted((float(r["latency_ms"]), float(r[metric])) for r in rows if r["is_pareto"] in (True, "True"))
    if front:
        ax.plot(*zip(*front), "-o", c="#1f6fb4", ms=5, lw=1.5, label=f"front, inherited weights ({len(front)})",
                zorder=2)
    final = [r for r in rows if r.get(f"final_{metric}", "") != ""]
    if final:
        ax.scatter([float(r["latency_ms"]) for r in final], [float(r[f"final_{metric}"]) for r in final], s=22,
                   c="#e07b00", zorder=3, label=f"finalised archs ({len(final)})")
        final_front = sorted((float(r["latency_ms"]), float(r[f"final_{metric}"])) for r in final
                             if r["is_final_pareto"] in (True, "True"))
        ax.plot(*zip(*final_front), "-", c="#e07b00", lw=1.5, label="finalised front", zorder=3)
    markers = "s^Dv*Ph"
    for i, b in enumerate(baselines):
        ax.scatter([float(b["latency_ms"])], [float(b[metric])], marker=markers[i % len(markers)], s=70,
                   edgecolors="black", zorder=4, label=f"{b['name']}")
    ax.set_xlabel(f"latency (ms, {cost_model})")
    ax.set_ylabel({"top1": "top-1 accuracy (%, val)", "psnr": "PSNR (dB, Y, val)"}.get(metric, metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fidelity_of(rows: Sequence[dict], metric: str) -> float | None:
    """The supernet's ranking fidelity over a run's finalised rows (see `nas.finalize.ranking_fidelity`)."""
    from .finalize import ranking_fidelity

    final = [r for r in rows if r.get(f"final_{metric}", "") != ""]
    return ranking_fidelity([float(r[metric]) for r in final], [float(r[f"final_{metric}"]) for r in final])


def _final_section(final: list[dict], columns: Sequence[str], metric: str) -> str:
    if not final:
        return ""
    tau = fidelity_of(final, metric)
    return (f"<h2>Finalised archs</h2><p>{len(final)} archs of the front trained past their inherited weights "
            f"(<code>search.finalize</code>); <code>final_{html.escape(metric)}</code> on the whole val split, "
            f"<code>final_test_{html.escape(metric)}</code> on the test split. Ranking fidelity of the supernet "
            f"(Kendall tau, inherited vs finalised val {html.escape(metric)}): "
            f"<b>{'n/a' if tau is None else f'{tau:.3f}'}</b>.</p>{_table(final, columns)}")


def test_figure(row: dict, metric: str) -> float | None:
    """A candidates.csv (or baselines.csv) row's test figure: finalised if it has one, else inherited; None if
    the row was not scored on the test split."""
    value = row.get(f"final_test_{metric}", "") or row.get(f"test_{metric}", "")
    return None if value == "" else float(value)


def headline(rows: Sequence[dict], baselines: Sequence[dict], metric: str) -> list[str]:
    """The papers' comparison, per baseline: the fastest searched arch at least as good on the test split, and
    its fps ratio. Finalised archs count with their finalised test metric, other front archs with their
    inherited one."""
    searched = [(test_figure(r, metric), float(r["latency_ms"]), r["id"]) for r in rows
                if test_figure(r, metric) is not None]
    lines = []
    for b in baselines:
        if test_figure(b, metric) is None:
            continue
        target, latency = test_figure(b, metric), float(b["latency_ms"])
        good = [s for s in searched if s[0] >= target]
        if not good:
            lines.append(f"{b['name']} ({target:.2f} test {metric} at {latency:.4g} ms): no searched arch reaches it")
            continue
        best, fastest, arch_id = min(good, key=lambda s: (s[1], -s[0]))
        lines.append(f"{b['name']} ({target:.2f} test {metric} at {latency:.4g} ms): arch {arch_id} has "
                     f"{best:.2f} at {fastest:.4g} ms, {latency / fastest:.2f}x the fps")
    return lines


def _headline_section(rows: Sequence[dict], baselines: Sequence[dict], metric: str) -> str:
    lines = headline(rows, baselines, metric)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f"<p>Against the baselines, on the test split:</p><ul>{items}</ul>"


def _add_measured(final: list[dict], run_dir: RunDir) -> list[str]:
    """Give the finalised rows the end-to-end latency measured on the run's machine, if the run measured them
    (`nas.lut_validation.measured_beside_predicted`); returns the extra column."""
    from search_spaces import arch_key

    from .lut_validation import measured_latencies

    measured = measured_latencies(run_dir)
    for row in final:
        row["measured_ms"] = measured.get(arch_key(json.loads(row["arch"])), "")
    return ["measured_ms"] if measured else []


def _correction_note(run_dir: RunDir) -> str:
    """What the run did with a latency table measured elsewhere (`nas.lut_validation`), if it used a table."""
    from .lut_validation import read_correction_record

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


def build_report(run_dir: RunDir) -> None:
    """(Re)build pareto.png and report.html from a run's candidates.csv, baselines.csv and config.yaml."""
    if not run_dir.candidates.exists():
        raise FileNotFoundError(f"{run_dir.candidates} does not exist: the search has not evaluated anything yet")
    rows = read_csv(run_dir.candidates)
    if not rows:
        raise RunDirError(f"{run_dir.candidates} has no rows")
    metric = metric_of(rows)
    baselines = read_csv(run_dir.baselines) if run_dir.baselines.exists() else []
    cost_model = rows[0]["cost_model"]
    png = _plot(rows, baselines, metric, cost_model)
    atomic_write_bytes(run_dir.pareto_png, png)
    front = sorted((r for r in rows if r["is_pareto"] == "True"), key=lambda r: float(r["latency_ms"]))
    final = sorted((r for r in rows if r.get(f"final_{metric}", "") != ""), key=lambda r: float(r["latency_ms"]))
    config_text = run_dir.config.read_text(encoding="utf-8") if run_dir.config.exists() else ""
    columns = ["id", metric, f"test_{metric}", "latency_ms", "params", "macs", "arch"]
    measured = _add_measured(final, run_dir)
    final_columns = ["id", f"final_{metric}", f"final_test_{metric}", metric, "latency_ms", *measured,
                     "is_final_pareto", "params", "macs", "arch"]
    base_columns = [c for c in ("name", metric, f"test_{metric}") if baselines and c in baselines[0]]
    base_columns += [c for c in (baselines[0] if baselines else ()) if c.startswith("test_") and c not in base_columns]
    base_columns += [c for c in ("latency_ms", "params", "macs", "note") if baselines and c in baselines[0]]
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vpunas run {html.escape(run_dir.path.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:75em}}table{{border-collapse:collapse;font-size:0.85em}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:last-child{{text-align:left;font-family:monospace}}
pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style></head><body>
<h1>vpunas run <code>{html.escape(run_dir.path.name)}</code></h1>
<p>{len(rows)} architectures evaluated; {len(front)} on the Pareto front of {html.escape(metric)} vs latency
(cost model <code>{html.escape(cost_model)}</code>).</p>
{_headline_section(rows, baselines, metric)}
{_correction_note(run_dir)}
<img alt="Pareto front" src="data:image/png;base64,{base64.b64encode(png).decode()}">
{_final_section(final, final_columns, metric)}
<h2>Pareto front (inherited weights)</h2>{_table(front, columns)}
<h2>Baselines</h2>{_table(baselines, base_columns) if baselines else "<p>none</p>"}
<h2>Config</h2><pre>{html.escape(config_text)}</pre>
</body></html>
"""
    atomic_write_text(run_dir.report_html, page)
    logger.info("report written: %s", run_dir.report_html)
