"""The differentiable search measured: its step time against plain supernet training, and what a run hands over.

    .venv/bin/python scripts/bench_dnas.py [CONFIG] [--steps 10] [--threads 1]
    .venv/bin/python scripts/bench_dnas.py --run DNAS_RUN_DIR [--against RUN_DIR ...]

Step time (the first form):
A search step is a weight step plus an architecture step (`DifferentiableTrainer.weight_step` + `arch_step`,
each one forward + backward of the relaxed supernet); a plain step is `SupernetTrainer.train_step` with the
sandwich rule (largest, smallest and `train.sandwich_random` random archs). Both run on the same batch of the
config's training data, alternating so that load on a shared machine hits both alike. Prints the median CPU
time (time.process_time) of each, per relaxation, and their ratio (target: at most 2.5x).

What a run hands over (`--run`): each finalised arch of a finished differentiable run with its val / test metric,
its latency on the run's cost model and measured end to end on this machine (OpenVINO, as the run's latency table
was measured; the run's own measurement where it made one), against the run's latency target. With `--against`,
the finalised archs of other runs (e.g. the default run) are measured the same way, right after, and
each handed-over arch is set beside the best of them at most as slow here, and beside those that dominate it (at
least its test metric, at most its measured latency).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hw_cost import load_cost_model
from nas.config import load_config
from nas.context import build_task_and_space, run_cost_model
from nas.latency.lut_validation import measure_here, measured_latencies
from nas.records import Candidate, read_candidates
from nas.rundir import RunDir
from nas.runtime import keep_freed_memory
from search_spaces import arch_key
from nas.randomness import RunRandom
from nas.strategies.differentiable import RELAXATIONS, DifferentiableConfig, DifferentiableTrainer
from nas.training.supernet_training import SupernetTrainer, in_layout


def cpu_time(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _finalised(run: RunDir) -> tuple[list[Candidate], str]:
    """A finished run's finalised candidates, each arch once (its last row: a differentiable run's derived arch may
    also be an earlier epoch's); and the run's metric."""
    candidates = read_candidates(run.candidates)
    final = {c.key: c for c in candidates if c.final is not None}
    return list(final.values()), candidates[0].metric


def handed_over(run_dir: str, against: list[str]) -> list[dict]:
    """Each finalised arch of the differentiable run `run_dir` against its latency target and the other runs'
    finalised archs, all measured here; printed and returned."""
    run = RunDir(run_dir)
    config = load_config(run.config)
    cost = run_cost_model(config, run)  # the table as the run used it: a target relative to the space resolves alike
    if not cost.is_measured:
        raise SystemExit(f"bench_dnas: {run.path} is costed by {cost.name}; measuring here needs a run costed by a "
                         "latency table of this machine (lut:...)")
    space = build_task_and_space(config)[1]
    target = config.search.latency_target_ms(space, cost)
    ours, metric = _finalised(run)
    others = [(RunDir(path), *_finalised(RunDir(path))) for path in against]
    groups = [(space, ours)] + [(build_task_and_space(load_config(other.config))[1], final)
                                for other, final, _ in others]
    here_ms = {}  # (run, arch id) -> ms measured here
    for run_index, (group_space, final) in enumerate(groups):  # each run's networks interleaved in rounds, as
        for c, ms in zip(final, measure_here(group_space, cost.table, [c.arch for c in final])):  # its table was
            here_ms[run_index, c.id] = round(float(ms), 4)  # measured
    recorded = measured_latencies(run)  # what the run measured at its end, where it did
    out = []
    for c in ours:
        ms = here_ms[0, c.id]
        result = {"id": c.id, f"test_{metric}": c.test_figure, f"val_{metric}": c.final.val,
                  "table_ms": c.latency_ms, "measured_ms": ms, "run_measured_ms": recorded.get(arch_key(c.arch)),
                  "target_ms": target,
                  "off_target_pct": None if target is None else round(100 * (ms / target - 1), 1), "against": {}}
        for run_index, (other, final, _) in enumerate(others, start=1):
            at_most = [o for o in final if here_ms[run_index, o.id] <= ms]
            best = max(at_most, key=lambda o: o.test_figure, default=None)
            result["against"][str(other.path)] = {
                "best_at_most_as_slow": None if best is None else {"id": best.id, f"test_{metric}": best.test_figure,
                                                                   "measured_ms": here_ms[run_index, best.id]},
                "dominated_by": [o.id for o in at_most if o.test_figure >= c.test_figure]}
        out.append(result)
        line = (f"arch {result['id']}: test {metric} {c.test_figure:.2f}, table {result['table_ms']:.4f} ms, measured "
                f"here {ms:.4f} ms" + ("" if result["run_measured_ms"] is None else
                                       f" (the run measured {result['run_measured_ms']:.4f} ms)"))
        if target is not None:
            line += f", target {target:g} ms ({result['off_target_pct']:+.1f} %)"
        print(line)
        for path, versus in result["against"].items():
            best = versus["best_at_most_as_slow"]
            print(f"  {path}: " + ("no finalised arch as fast" if best is None else
                                   f"best at most as slow: arch {best['id']}, test {best[f'test_{metric}']:.2f} at "
                                   f"{best['measured_ms']:.4f} ms") +
                  f"; dominated by {versus['dominated_by'] or 'none'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(Path(__file__).parents[1] / "configs/fmnist_mobilenet.yaml"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run", metavar="DNAS_RUN_DIR", help="report what this finished differentiable run hands over")
    parser.add_argument("--against", nargs="*", default=[], metavar="RUN_DIR",
                        help="with --run: other finished runs whose finalised archs are measured beside it")
    args = parser.parse_args()
    keep_freed_memory()  # as the vpunas command does
    if args.run:
        handed_over(args.run, args.against)
        return
    torch.set_num_threads(args.threads)

    config = load_config(args.config)
    task, space = build_task_and_space(config)
    cost_model = load_cost_model(config.cost.spec, **config.cost.options())
    _, x, y = next(task.train_batches(0))
    x = in_layout(x, config.train.channels_last)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        plain = SupernetTrainer(space, space.build_supernet(), task, config.train, config.seed, Path(tmp) / "x.pt")
    archs = plain.step_archs(0, 0)
    print(f"{space.describe()}; batch {len(x)}, {args.threads} thread(s), {args.steps} timed steps each; "
          f"plain step = sandwich rule over {len(archs)} archs")
    print(f"{'relaxation':<11} {'search step ms':>15} {'plain step ms':>14} {'ratio':>7}")
    for relaxation in RELAXATIONS:
        search_config = DifferentiableConfig(relaxation=relaxation, warmup_epochs=0)
        dnas = DifferentiableTrainer(space, task, cost_model, config.train, search_config, RunRandom(config.seed))

        def search_step(step: int) -> None:
            dnas.weight_step(x, y, dnas.sample_gates(step, "weight"))
            dnas.arch_step(x, y, dnas.sample_gates(step, "arch"))

        for step in range(2):  # warm-up
            search_step(step)
            plain.train_step(x, y, archs)
        t_search, t_plain = [], []
        for step in range(args.steps):
            t_search.append(cpu_time(lambda: search_step(step)))
            t_plain.append(cpu_time(lambda: plain.train_step(x, y, archs)))
        s, p = statistics.median(t_search) * 1e3, statistics.median(t_plain) * 1e3
        print(f"{relaxation:<11} {s:15.1f} {p:14.1f} {s / p:6.2f}x")


if __name__ == "__main__":
    main()
