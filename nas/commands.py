"""Subcommands `search`, `report`, `export` and `lut collect` of the `vpunas` CLI."""
from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["add_search_parser", "add_report_parser", "add_export_parser", "add_lut_parser"]


# ------------------------------------------------------------------------------------------------ search
def add_search_parser(sub) -> None:
    p = sub.add_parser("search", help="run (or resume) a whole search: train, search, report",
                       description="Run a search from a YAML config; key=value arguments override config keys "
                                   "(e.g. train.epochs=1 search.generations=3).")
    p.add_argument("config", help="YAML config (see configs/)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--out", help="run directory (default runs/<config name>)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in its run directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    from .search import prepare_run, run_search

    config, run_dir = prepare_run(args.config, args.overrides, args.out, args.resume)
    rows = run_search(config, run_dir, progress=not args.no_progress)
    metric = next(m for m in ("top1", "psnr") if m in rows[0])
    front = sorted((r for r in rows if r["is_pareto"]), key=lambda r: r["latency_ms"])
    final = sorted((r for r in rows if r[f"final_{metric}"] != ""), key=lambda r: r["latency_ms"])
    print(f"{len(rows)} architectures evaluated, {len(front)} on the Pareto front, {len(final)} finalised; "
          f"results in {run_dir.path}/")
    if final:
        print(f"finalised (val / test {metric} after training; inherited val in brackets):")
    for r in final or front:
        scores = (f"{metric} {r[f'final_{metric}']:7.3f}  test {r[f'final_test_{metric}']:7.3f}  ({r[metric]:7.3f})"
                  if final else f"{metric} {r[metric]:7.3f}  test {r[f'test_{metric}']!s:>7}")
        print(f"  id {r['id']:>4}  {scores}  latency {r['latency_ms']:.4f} ms  MACs {r['macs'] / 1e6:.2f}M")
    return 0


# ------------------------------------------------------------------------------------------------ report
def add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="rebuild pareto.png and report.html of a run")
    p.add_argument("run_dir")
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from .report import build_report
    from .rundir import RunDir

    run_dir = RunDir(args.run_dir)
    if not run_dir.path.is_dir():
        raise FileNotFoundError(f"run directory {run_dir.path} not found")
    build_report(run_dir)
    print(f"{run_dir.pareto_png}\n{run_dir.report_html}")
    return 0


# ------------------------------------------------------------------------------------------------ export
def add_export_parser(sub) -> None:
    from .export import FORMATS

    p = sub.add_parser("export", help="export one architecture of a run as a deployable model")
    p.add_argument("run_dir")
    p.add_argument("--arch", required=True, help="the arch id (candidates.csv)")
    p.add_argument("--format", required=True, choices=sorted(FORMATS))
    p.add_argument("-o", "--output", help="output file (default RUN_DIR/models/arch<ID>.<ext>)")
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from .export import export_arch
    from .rundir import RunDir

    print(export_arch(RunDir(args.run_dir), args.arch, args.format, args.output))
    return 0


# ------------------------------------------------------------------------------------------------ lut
def add_lut_parser(sub) -> None:
    p = sub.add_parser("lut", help="latency lookup tables")
    lut_sub = p.add_subparsers(dest="lut_command", required=True, metavar="COMMAND")
    c = lut_sub.add_parser("collect", help="measure every block of a config's search space on a local device",
                           description="Measure every distinct block of the space of CONFIG with OpenVINO and write "
                                       "a JSON latency table. An existing output is continued (resumable).")
    c.add_argument("config")
    c.add_argument("overrides", nargs="*", metavar="key=value")
    c.add_argument("-o", "--output", help="table file (default: the config's cost.model when it is a lut:)")
    c.add_argument("--device", default="CPU", help="OpenVINO device (CPU, NPU, GPU)")
    c.add_argument("--precision", default="f32", choices=["f32", "f16", "bf16"])
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--warmup", type=int, default=20)
    c.add_argument("--repeats", type=int, default=100)
    c.add_argument("--validate", type=int, default=10, metavar="N",
                   help="also measure N random whole archs and record how well the table predicts them")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(handler=_lut_collect)


def _lut_collect(args: argparse.Namespace) -> int:
    from hw_cost.lut import LatencyTable, collect_latency_table
    from hw_cost.profiler import MeasureSettings

    from .config import ConfigError, load_config
    from .lut_validation import validate_table
    from .rundir import atomic_write_text
    from .search import build_task_and_space

    config = load_config(args.config, args.overrides)
    if args.output:
        out = Path(args.output)
    elif config.cost.model.startswith("lut:"):
        out = Path(config.cost.model[4:])
    else:
        raise ConfigError("lut collect: give -o/--output (the config's cost.model is not a lut:)")
    task, space = build_task_and_space(config)
    settings = MeasureSettings(args.device, args.precision, args.threads, args.warmup, args.repeats)
    table = LatencyTable.load(out) if out.exists() else None
    save = lambda t: atomic_write_text(out, t.to_json())
    table = collect_latency_table(space.all_blocks(), (1, *task.input_shape), settings, table, on_entry=save,
                                  progress=not args.no_progress)
    if args.validate:
        table.metadata["validation"] = validate_table(space, table, settings, args.validate, seed=config.seed)
    table.metadata["created_by"] = shlex.join(
        ["vpunas", "lut", "collect", args.config, *args.overrides, "-o", str(out), "--device", args.device,
         "--precision", args.precision, "--threads", str(args.threads), "--warmup", str(args.warmup),
         "--repeats", str(args.repeats), "--validate", str(args.validate)])
    save(table)
    print(f"{out}: {len(table.entries)} blocks")
    if args.validate:
        v = table.metadata["validation"]
        print(f"whole-network check on {v['archs']} archs: Kendall tau {v['kendall_tau']:.3f}, "
              f"mean |error| {v['mean_abs_pct_error']:.1f}%")
    return 0
