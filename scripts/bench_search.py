"""The search against random sampling of its space at equal budget: hypervolume and best accuracy per latency bin.

    .venv/bin/python scripts/bench_search.py [CONFIG] [key=value ...] [--strategy evolution] [--seeds 0 1]
        [--out runs/bench_search]

Per seed, three runs of CONFIG (default: the default config) into OUT/seed<S>/:
  search   search.strategy=STRATEGY (default: evolution, NSGA-II with the config's search.evolution settings);
  uniform  search.strategy=random, archs drawn uniformly from the space;
  binned   search.strategy=random, archs drawn from equal shares of the latency range (the stronger baseline).
The random runs score as many archs as the search did, with its latency limit and extra objectives; they take
the search run's trained supernet (`supernet_from`: the same weights, trained once) and finalise by the same rule
and budget. Finalisation's run budget is off in all three (`search.finalize.run_budget_minutes=0`, with its
`max_archs` and `max_epochs`), so each finalises `archs` archs for `epochs` epochs whatever time the others left:
a comparison at equal epochs. Under the run budget (equal time) an arch's step time counts too, and a search that
prefers few MACs finalises cheaper archs for more epochs; compare two whole runs of the config for that (each
training its own supernet, so that the budget sees the same stages).
Overrides apply to all three runs (e.g. `search.finalize.archs=4 search.finalize.epochs=1` for a quicker look). A finished run is reused, an
interrupted one resumed.

Printed and written to OUT/bench_search.json, per seed and method: the finalised archs' front (test metric against
the config's cost-model latency), its hypervolume over (test metric, latency), the reference point stated (the
seed's worst finalised test metric less 1, its slowest finalised latency plus 10 %), and per latency bin (the
seed's finalised latency range in `--bins` equal bins) each method's best test metric; then the search's mean gain
over each random method across the bins where both have archs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from nas.config import load_config
from nas.pareto import pareto_mask
from nas.records import read_candidates
from nas.rundir import RunDir, atomic_write_text

REPO = Path(__file__).resolve().parents[1]
METHODS = ("search", "uniform", "binned")


def _run(config: str, overrides: list[str], out: Path) -> float:
    """Run (or resume, or reuse) one search; its wall seconds in this call."""
    run = RunDir(out)
    if run.report_html.exists():
        return 0.0
    started = time.perf_counter()
    argv = [sys.executable, "-m", "nas.cli", "search", config, *overrides, "--out", str(out), "--no-progress"]
    if run.exists():
        argv.append("--resume")
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_search: {out} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - started


def _finalised(out: Path) -> tuple[np.ndarray, np.ndarray, str, int]:
    """(test metric, latency) of the run's finalised archs, the metric's name, the archs it scored."""
    candidates = read_candidates(RunDir(out).candidates)
    final = [c for c in candidates if c.final is not None]
    return (np.array([c.test_figure for c in final]), np.array([c.latency_ms for c in final]), candidates[0].metric,
            len(candidates))


def _hypervolume(metric: np.ndarray, latency: np.ndarray, reference: tuple[float, float]) -> float:
    from pymoo.indicators.hv import HV

    points = np.column_stack([-metric, latency])
    return float(HV(ref_point=np.array([-reference[0], reference[1]]))(points)) if len(points) else 0.0


def compare(fronts: dict[str, tuple[np.ndarray, np.ndarray]], bins: int) -> dict:
    """Hypervolumes, best metric per latency bin and the search's mean gains, for one seed's finalised archs."""
    metrics = np.concatenate([m for m, _ in fronts.values()])
    latencies = np.concatenate([lat for _, lat in fronts.values()])
    reference = (float(metrics.min()) - 1.0, float(latencies.max()) * 1.1)
    edges = np.linspace(latencies.min(), latencies.max(), bins + 1)
    result = {"reference_point": {"test_metric": reference[0], "latency_ms": reference[1]},
              "bin_edges_ms": edges.round(6).tolist(), "methods": {}}
    for method, (metric, latency) in fronts.items():
        in_bin = np.clip(np.searchsorted(edges, latency, side="right") - 1, 0, bins - 1)
        front = pareto_mask(metric, latency)
        result["methods"][method] = {
            "hypervolume": round(_hypervolume(metric, latency, reference), 6),
            "front": sorted(zip(latency[front].round(6).tolist(), metric[front].tolist())),
            "best_per_bin": [float(metric[in_bin == b].max()) if (in_bin == b).any() else None for b in range(bins)]}
    search = result["methods"]["search"]["best_per_bin"]
    for method in fronts:
        if method == "search":
            continue
        theirs = result["methods"][method]["best_per_bin"]
        gains = [s - t for s, t in zip(search, theirs) if s is not None and t is not None]
        result["methods"][method]["search_gain"] = round(float(np.mean(gains)), 4) if gains else None
        result["methods"][method]["bins_compared"] = len(gains)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(REPO / "configs" / "fmnist_mobilenet.yaml"))
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--strategy", default="evolution", help="the search strategy compared with random sampling")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--bins", type=int, default=6)
    parser.add_argument("--out", default=str(REPO / "runs" / "bench_search"))
    args = parser.parse_args()
    if "=" in args.config:
        args.overrides.insert(0, args.config)
        args.config = str(REPO / "configs" / "fmnist_mobilenet.yaml")
    if args.strategy == "random":
        parser.error("--strategy: compare a search strategy with random sampling, not random sampling itself")
    # the random runs override the strategy after these (the last of two overrides of a key counts)
    shared = [*args.overrides, f"search.strategy={args.strategy}", "search.finalize.run_budget_minutes=0",
              "search.finalize.max_archs=0", "search.finalize.max_epochs=0", "adapt_threads=false"]
    limit, costs = load_config(args.config, shared).search.finalize_scope()
    random = [f"search.random.latency_limit_ms={'null' if limit is None else limit}",
              f"search.random.extra_objectives=[{', '.join(costs[1:])}]"]
    report = {"config": args.config, "strategy": args.strategy, "overrides": shared, "seeds": {}}
    for seed in args.seeds:
        out = Path(args.out).resolve() / f"seed{seed}"  # supernet_from: a relative path would be the config's
        seconds = {"search": _run(args.config, [*shared, f"seed={seed}"], out / "search")}
        scored = _finalised(out / "search")[3]
        for method, sampling in (("uniform", "uniform"), ("binned", "latency_bins")):
            seconds[method] = _run(args.config, [*shared, f"seed={seed}", "search.strategy=random", *random,
                                                 f"search.random.sampling={sampling}", f"search.random.archs={scored}",
                                                 f"supernet_from={out / 'search'}"], out / method)
        finalised = {m: _finalised(out / m) for m in METHODS}
        fronts = {m: f[:2] for m, f in finalised.items()}
        metric = finalised["search"][2]
        result = compare(fronts, args.bins)
        result["archs_scored"] = {m: f[3] for m, f in finalised.items()}
        result["seconds_this_call"] = {m: round(s, 1) for m, s in seconds.items()}
        report["seeds"][seed] = result
        ref = result["reference_point"]
        print(f"seed {seed}: {scored} archs scored by each; hypervolume over (test {metric}, latency ms) from "
              f"({ref['test_metric']:.2f}, {ref['latency_ms']:.4f})")
        print(f"  {'method':<8} {'hypervolume':>12} {'archs':>6}  best test {metric} per latency bin "
              f"({', '.join(f'{e:.4f}' for e in result['bin_edges_ms'])} ms)")
        for method in METHODS:
            entry = result["methods"][method]
            best = "  ".join("   -  " if v is None else f"{v:6.2f}" for v in entry["best_per_bin"])
            print(f"  {method:<8} {entry['hypervolume']:12.6f} {len(fronts[method][0]):6d}  {best}")
        for method in METHODS[1:]:
            entry = result["methods"][method]
            gain = "n/a" if entry["search_gain"] is None else f"{entry['search_gain']:+.2f}"
            print(f"  search - {method}: {gain} test {metric} on average over {entry['bins_compared']} bins")
    atomic_write_text(Path(args.out) / "bench_search.json", json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
