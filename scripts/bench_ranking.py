"""How scoring settings change the supernet's ranking of a run's probe set: batch-norm recalibration images and val
images per candidate, and the accuracy predictor.

    .venv/bin/python scripts/bench_ranking.py RUN_DIR [--calib 500 2000] [--eval-images 2500 0] [--out FILE.json]

RUN_DIR holds a probe set (`vpunas probe RUN_DIR`). Each (calib_images, eval_images) pair re-scores the probe
archs on the run's supernet with those task settings (eval_images 0: the whole val split) and gives Kendall tau and
Spearman (95 % bootstrap intervals) against the standalone val and test metric (`nas.ranking.probe.probe_figures`),
over all probe archs and over those within the search's latency limit; then the accuracy predictor's held-out
predictions (`nas.ranking.accuracy_predictor`) fitted on each pair's inherited scores. Seconds per pair are printed too (the scoring cost of one candidate is
what a search pays for a setting); run it on an otherwise idle machine for them to mean anything.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from nas.config import load_config
from nas.context import build_context, resolve_device
from nas.ranking.accuracy_predictor import arch_features, held_out_predictions
from nas.ranking.probe import figure_lines, probe_figures
from nas.rundir import RunDir, atomic_write_text, read_csv
from nas.training.evaluation import ArchEvaluator
from nas.training.supernet_training import load_trained_supernet


def _rankings(rows: list[dict], inherited: list[float], predicted: np.ndarray, metric: str) -> dict:
    """name -> ranking_stats of this scoring setting's inherited metric and held-out predictions, against the
    standalone val and test metric (`probe_figures`, over all probe archs and those within the latency limit)."""
    rescored = [dict(r, **{f"inherited_{metric}": x, f"held_out_predicted_{metric}": p})
                for r, x, p in zip(rows, inherited, predicted)]
    return {f"{name} vs standalone {truth}": stats for truth in ("val", "test")
            for name, stats in probe_figures(rescored, metric, truth=truth).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--calib", type=int, nargs="+", default=[500, 2000], help="calib_images settings")
    parser.add_argument("--eval-images", type=int, nargs="+", default=[2500, 0], help="eval_images settings")
    parser.add_argument("--out", help="JSON file of the figures (default RUN_DIR/bench_ranking.json)")
    args = parser.parse_args()
    run = RunDir(args.run_dir)
    if not run.probe.exists():
        raise SystemExit(f"bench_ranking: {run.probe} not found: run `vpunas probe {run.path}` first")
    rows = read_csv(run.probe)
    results = []
    for calib in args.calib:
        for eval_images in args.eval_images:
            config = load_config(run.config, [f"task.calib_images={calib}", f"task.eval_images={eval_images}"])
            ctx = build_context(config, run, resolve_device("auto"), progress=False)  # this machine's
            metric = ctx.task.metric
            supernet = load_trained_supernet(ctx.space, run.supernet_checkpoint, config.train).to(ctx.device)
            evaluator = ArchEvaluator(ctx.space, supernet, ctx.task, ctx.cost_model, config.train.channels_last)
            started = time.perf_counter()
            archs = [ctx.space.validate(json.loads(r["arch"])) for r in rows]
            inherited = [evaluator.metric(arch) for arch in archs]
            seconds = (time.perf_counter() - started) / len(archs)
            features = np.array([arch_features(ctx.space, a, s) for a, s in zip(archs, inherited)])
            predicted = held_out_predictions(features, [float(r[f"standalone_{metric}"]) for r in rows], config.seed)
            figures = _rankings(rows, inherited, predicted, metric)
            results.append({"calib_images": calib, "eval_images": eval_images, "seconds_per_arch": seconds,
                            "figures": figures})
            print(f"calib_images {calib}, eval_images {eval_images or 'all'}: {seconds:.2f} s an arch")
            for line in figure_lines(figures):
                print(f"  {line}")
    out = Path(args.out) if args.out else run.path / "bench_ranking.json"
    atomic_write_text(out, json.dumps(results, indent=1) + "\n")
    print(out)


if __name__ == "__main__":
    main()
