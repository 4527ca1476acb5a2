"""Archs of a config's space trained alone at the run's recipe: how far the space reaches before a search is set
against networks trained as long (e.g. the zoo's 6.5 epochs).

    .venv/bin/python scripts/train_alone.py CONFIG --out DIR [--epochs 6.5] [--within-us 54.7 88]
        [--arch JSON ...] [KEY=VALUE ...]

Each `--within-us` limit gives the arch with the most parameters within that latency on the config's cost model
(`nas.training.sandwich_archs.largest_within`); each `--arch` an arch as JSON. Every arch trains from scratch with
the config's `train` recipe for `--epochs` and its seed, is scored on val and test as a probe arch is, and is
cached with the probe set's entries (`nas.ranking.probe.standalone_entry`), so a second call trains nothing. DIR
keeps the checkpoints: an interrupted call (SIGTERM, Ctrl-C: exit 130) resumes the arch it was training. Prints a
Markdown table of the archs (test and val metric, latency on each VPUNN generation, MACs, params) and writes it
with the archs to DIR/train_alone.csv.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from hw_cost import complexity, load_cost_model
from nas.baselines.cached_networks import train_cached_network
from nas.config import load_config
from nas.context import build_context, resolve_device
from nas.errors import ConfigError
from nas.ranking.probe import standalone_entry
from nas.rundir import RunDir, write_csv
from nas.runtime import auto_threads
from nas.training.sandwich_archs import largest_within
from search_spaces import ArchError

GENERATIONS = ("VPU_2_0", "VPU_2_7", "VPU_4_0", "NPU_5_0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    parser.add_argument("--out", required=True, help="folder for the checkpoints and train_alone.csv")
    parser.add_argument("--epochs", type=float, default=6.5, help="epochs each arch trains (default 6.5)")
    parser.add_argument("--within-us", type=float, nargs="*", default=[],
                        help="latency limits (us on the config's cost model): the arch with the most parameters "
                             "within each")
    parser.add_argument("--arch", action="append", default=[], help="an arch of the space as JSON")
    args = parser.parse_args(argv)
    try:
        if args.epochs <= 0:
            raise ConfigError(f"--epochs: {args.epochs:g} is not a positive number of epochs")
        config = load_config(args.config, args.overrides)
        if config.threads == 0:
            config.threads = auto_threads()
        run_dir = RunDir(args.out)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        ctx = build_context(config, run_dir, resolve_device("auto"), progress=False)
        space = ctx.space
        archs = [(f"most parameters within {limit:g} us",
                  largest_within(space, ctx.params, [(ctx.latency_ms, limit / 1e3)])) for limit in args.within_us]
        for i, text in enumerate(args.arch):
            try:
                archs.append((f"--arch {i + 1}", space.validate(json.loads(text))))
            except (json.JSONDecodeError, ArchError) as exc:
                raise ConfigError(f"--arch {i + 1}: {exc}") from None
        if not archs:
            raise ConfigError("give --within-us or --arch: no arch to train")
    except ConfigError as exc:
        print(f"train_alone: {exc}", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # training's progress
    recipe = dataclasses.replace(config.train, epochs=args.epochs)
    generations = {name: load_cost_model(f"vpunn:{name}") for name in GENERATIONS}
    metric, rows = ctx.task.metric, []
    for i, (label, arch) in enumerate(archs):
        try:
            scores, steps = train_cached_network(ctx, f"alone{i}", standalone_entry(ctx, arch, recipe), label=label)
        except KeyboardInterrupt:  # SIGTERM or Ctrl-C: training saved its checkpoint first
            print(f"train_alone: interrupted; {label} resumes from its checkpoint in {args.out} when this command "
                  "runs again", file=sys.stderr)
            return 130
        blocks = space.blocks(arch)
        arch_params, arch_macs = complexity(blocks)
        rows.append({"arch_label": label, f"test_{metric}": scores.get(f"test_{metric}", ""), metric: scores[metric],
                     **{f"{name}_us": round(model.latency_ms(blocks) * 1e3, 2) for name, model in generations.items()},
                     "macs": arch_macs, "params": arch_params, "epochs": args.epochs,
                     "steps": steps, "arch": json.dumps(arch)})
    write_csv(run_dir.path / "train_alone.csv", rows, list(rows[0]))
    print(f"| arch ({args.epochs:g} epochs alone, seed {config.seed}) | test {metric} | val {metric} | "
          + " | ".join(GENERATIONS) + " | MACs | params |")
    print("|---" * (5 + len(GENERATIONS)) + "|")
    for row in rows:
        print(f"| {row['arch_label']} | {row[f'test_{metric}']} | {row[metric]} | "
              + " | ".join(f"{row[f'{name}_us']:.1f} us" for name in GENERATIONS)
              + f" | {row['macs'] / 1e6:.1f} M | {row['params'] / 1e6:.2f} M |")
    print(run_dir.path / "train_alone.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
