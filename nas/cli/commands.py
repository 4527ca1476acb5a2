"""Subcommands `search`, `report`, `export`, `probe`, `lut collect` and `lut validate` of the `vpunas` CLI. Each
imports its modules when it runs (see `nas.cli`: the command line starts without torch)."""
from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["add_search_parser", "add_report_parser", "add_export_parser", "add_probe_parser", "add_lut_parser"]


# ------------------------------------------------------------------------------------------------ search
def add_search_parser(sub) -> None:
    p = sub.add_parser("search", help="run (or resume) a whole search: train, search, report",
                       description="Run a search from a YAML config; key=value arguments override config keys "
                                   "(e.g. train.epochs=1 search.evolution.generations=3 space.stages.0.depths=[1,2]).")
    p.add_argument("config", help="YAML config (see configs/)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--out", help="run directory (default runs/<config name>)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in its run directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    from ..run import prepare_run, run_search
    from .flags import as_flags

    with as_flags(resume="--resume", out="--out"):
        config, run_dir, device = prepare_run(args.config, args.overrides, args.out, args.resume)
    candidates = run_search(config, run_dir, device, progress=not args.no_progress)
    metric = candidates[0].metric
    front = sorted((c for c in candidates if c.is_pareto), key=lambda c: c.latency_ms)
    final = sorted((c for c in candidates if c.final is not None), key=lambda c: c.latency_ms)
    print(f"{len(candidates)} architectures evaluated, {len(front)} on the Pareto front, {len(final)} finalised; "
          f"results in {run_dir.path}/")
    if final:
        print(f"finalised (val / test {metric} after training; inherited val in brackets):")
    for c in final or front:
        test = "" if c.test_score is None else c.test_score
        scores = (f"{metric} {c.final.val:7.3f}  test {c.test_figure:7.3f}  ({c.score:7.3f})"
                  if final else f"{metric} {c.score:7.3f}  test {test!s:>7}")
        print(f"  id {c.id:>4}  {scores}  latency {c.latency_ms:.4f} ms  MACs {c.macs / 1e6:.2f}M")
    _repeat_warnings(run_dir)
    return 0


def _repeat_warnings(run_dir) -> None:
    """The run's warnings (a stage that learned nothing) once more on stderr, below the results they qualify."""
    if run_dir.warnings.exists():
        for line in json.loads(run_dir.warnings.read_text(encoding="utf-8")):
            print(f"vpunas: warning: {line}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ report
def add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="rebuild the report of a run, or compare runs",
                       description="One RUN_DIR: rebuild its pareto.png and report.html. Several RUN_DIRs with -o "
                                   "DIR: DIR/compare.html and compare.png overlay their fronts (runs of one metric).")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("-o", "--output", metavar="DIR", help="folder of the comparison of several runs")
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..reporting.build import build_comparison, build_report
    from ..rundir import RunDir

    run_dirs = [RunDir(path) for path in args.run_dirs]
    for run_dir in run_dirs:
        if not run_dir.path.is_dir():
            raise FileNotFoundError(f"run directory {run_dir.path} not found")
    if len(run_dirs) == 1 and not args.output:
        build_report(run_dirs[0])
        print(f"{run_dirs[0].pareto_png}\n{run_dirs[0].report_html}")
        return 0
    if len(run_dirs) == 1:
        raise ConfigError("-o DIR is the folder of a comparison: give two or more runs (vpunas report RUN_A RUN_B "
                          "-o DIR)")
    if not args.output:
        raise ConfigError(f"comparing {len(run_dirs)} runs needs -o DIR, the folder of compare.html")
    page, png = build_comparison(run_dirs, Path(args.output))
    print(f"{png}\n{page}")
    return 0


# ------------------------------------------------------------------------------------------------ export
def add_export_parser(sub) -> None:
    from ..export.models import FORMATS, PRECISIONS
    from ..export.quantize import DEFAULT_MAX_DROP

    p = sub.add_parser("export", help="export one architecture of a run as a deployable model")
    p.add_argument("run_dir")
    p.add_argument("--arch", required=True, help="the arch id (candidates.csv)")
    p.add_argument("--format", required=True, choices=sorted(FORMATS))
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="int8: NNCF post-training quantization (openvino only), checked on the test split")
    p.add_argument("--max-drop", type=float, metavar="X",
                   help=f"int8: largest allowed drop of the task metric from float (default "
                        f"{DEFAULT_MAX_DROP['top1']:g} top-1 points, {DEFAULT_MAX_DROP['psnr']:g} dB PSNR)")
    p.add_argument("-o", "--output", help="output file (default RUN_DIR/models/arch<ID>[_int8].<ext>)")
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from ..export.models import export_arch
    from ..rundir import RunDir
    from .flags import as_flags

    with as_flags(arch_id="--arch", fmt="--format", out="--output", precision="--precision", max_drop="--max-drop"):
        print(export_arch(RunDir(args.run_dir), args.arch, args.format, args.output, args.precision, args.max_drop))
    return 0


# ------------------------------------------------------------------------------------------------ probe
def add_probe_parser(sub) -> None:
    p = sub.add_parser("probe", help="rate a run's supernet ranking on a probe set of archs trained alone",
                       description="Train the run's probe set from scratch where the cache lacks it "
                                   "(nas.ranking.probe), score it with the run's inherited weights, write "
                                   "RUN_DIR/probe.csv and print Kendall tau and Spearman with 95%% bootstrap "
                                   "intervals. key=value arguments change the probe set (probe.archs=N, "
                                   "probe.epochs=E) and where it trains (device=cpu: a GPU run probed on a "
                                   "machine without one).")
    p.add_argument("run_dir")
    p.add_argument("overrides", nargs="*", metavar="probe.key=value", help="probe set overrides")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_probe)


def _probe(args: argparse.Namespace) -> int:
    from ..ranking.probe import figure_lines
    from ..run import probe_run
    from ..rundir import RunDir

    run_dir = RunDir(args.run_dir)
    figures = probe_run(run_dir, args.overrides, progress=not args.no_progress)
    print(f"probe set against the standalone test metric (95% bootstrap intervals); {run_dir.probe}")
    print("\n".join(figure_lines(figures)))
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
    c.add_argument("-o", "--output", help="table file (default luts/<config name>_openvino_<device>_<host>.json)")
    c.add_argument("--device", default="CPU", help="OpenVINO device (CPU, NPU, GPU)")
    c.add_argument("--precision", default="f32", choices=["f32", "f16", "bf16"])
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--warmup", type=int, default=20)
    c.add_argument("--repeats", type=int, default=100)
    c.add_argument("--validate", type=int, default=10, metavar="N",
                   help="also measure N whole archs and record how well the table predicts them")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(handler=_lut_collect)
    v = lut_sub.add_parser("validate", help="measure sampled archs end to end and compare them with a table",
                           description="Measure N archs of a table's space end to end on this machine (the table's "
                                       "device and settings) and print how well the table predicts them, as "
                                       "measured and after the correction a run applies (fitted on the first "
                                       "archs, figures on the others). Saves validation.json and validation.png.")
    v.add_argument("source", help="a config whose cost.model is a lut:, or a table file (.json)")
    v.add_argument("--archs", type=int, default=50, help="archs to measure (default 50)")
    v.add_argument("--calibration-archs", type=int, default=8,
                   help="of which the correction is fitted on the first (default 8, as cost.correction_archs)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("-o", "--output", help="folder of the results (default runs/lut_validate_<table name>)")
    v.set_defaults(handler=_lut_validate)


def _lut_collect(args: argparse.Namespace) -> int:
    from hw_cost.lut import LatencyTable, collect_latency_table
    from hw_cost.profiler import MeasureSettings, OpenVinoProfiler

    from ..config import ConfigError, load_config
    from ..context import build_task_and_space
    from ..latency.lut_validation import validate_table
    from ..rundir import atomic_write_text

    config = load_config(args.config, args.overrides)
    if 0 < args.validate < 4:
        raise ConfigError("--validate: 0 (none) or at least 4 archs (2 fit a correction, the others check it)")
    settings = MeasureSettings(args.device, args.precision, args.threads, args.warmup, args.repeats)
    if args.output:
        out = Path(args.output)
    else:  # never a shipped table: a table belongs to the machine that measured it
        host = OpenVinoProfiler(settings).metadata()["host"]
        out = Path("luts") / f"{config.name}_openvino_{args.device.lower()}_{host}.json"
    task, space = build_task_and_space(config)
    table = LatencyTable.load(out) if out.exists() else None
    save = lambda t: atomic_write_text(out, t.to_json())
    out.parent.mkdir(parents=True, exist_ok=True)
    table = collect_latency_table(space.all_blocks(), (1, *task.input_shape), settings, table, on_entry=save,
                                  progress=not args.no_progress)
    table.metadata.update(space=config.to_dict()["space"], num_outputs=task.num_outputs)
    if args.validate:
        table.metadata["validation"] = validate_table(space, table, args.validate, seed=config.seed)
    table.metadata["created_by"] = shlex.join(
        ["vpunas", "lut", "collect", args.config, *args.overrides, "-o", str(out), "--device", args.device,
         "--precision", args.precision, "--threads", str(args.threads), "--warmup", str(args.warmup),
         "--repeats", str(args.repeats), "--validate", str(args.validate)])
    save(table)
    print(f"{out}: {len(table.entries)} blocks")
    if args.validate:
        print(_validation_summary(table.metadata["validation"]))
    return 0


def _validation_summary(v: dict) -> str:
    before, after = v["before"], v["after_held_out"]
    fig = lambda a: (f"MAPE {a['mape_pct']:.1f}%, {100 * a['within_10pct']:.0f}% within +-10%, Spearman "
                     + ("n/a" if a["spearman"] is None else f"{a['spearman']:.3f}"))
    c = v["correction"]
    return (f"{v['archs']} archs measured end to end here\n  as measured: {fig(before)}\n"
            f"  corrected ({c['scale']:.3g} x table + {c['offset_ms']:.4f} ms, fitted on {v['calibration_archs']}; "
            f"{after['archs']} held out): {fig(after)}")


def _lut_validate(args: argparse.Namespace) -> int:
    from hw_cost.cost_model import CostModelError
    from hw_cost.lut import LatencyTable
    from search_spaces import build_space

    from ..config import ConfigError, load_config, load_space_config
    from ..context import build_task_and_space
    from ..latency.lut_validation import plot_validation, validate_table
    from ..rundir import atomic_write_text

    if args.archs < 4:
        raise ConfigError("--archs: must be >= 4 (the correction is fitted on some, checked on the others)")
    if args.source.endswith(".json"):
        table_path = args.source
        table = LatencyTable.load(table_path)
        meta = table.metadata
        if "space" not in meta or "num_outputs" not in meta:
            raise CostModelError(f"{args.source} does not record its search space; validate it through its config "
                                 "(vpunas lut validate CONFIG)")
        space = build_space(load_space_config(meta["space"]), tuple(meta["network_input_shape"][1:]),
                            meta["num_outputs"])
    else:
        config = load_config(args.source)
        spec = config.cost.spec
        if not spec.is_table:
            raise ConfigError(f"{args.source}: cost.model is {spec}, not a latency table (lut:)")
        table_path = spec.argument
        table = LatencyTable.load(table_path)
        _, space = build_task_and_space(config)
    out = Path(args.output or Path("runs") / f"lut_validate_{Path(table_path).stem}")
    result = validate_table(space, table, args.archs, seed=args.seed, calibration_archs=args.calibration_archs)
    out.mkdir(parents=True, exist_ok=True)
    result = {"table": str(table_path), **result}
    atomic_write_text(out / "validation.json", json.dumps(result, indent=1) + "\n")
    plot_validation(result, out / "validation.png")
    print(_validation_summary(result))
    print(f"{out / 'validation.json'}\n{out / 'validation.png'}")
    return 0
