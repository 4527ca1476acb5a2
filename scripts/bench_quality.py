"""The finalised front of a finished run, measured: what a user gets, not what the search predicted.

    .venv/bin/python scripts/bench_quality.py RUN_DIR [--repeats 300] [--vpunn VPU_2_7]
        [--anchors CONFIG] [--reference "NAME:TOP1:CPU_MS:VPU_US" ...] [--reference-anchors-ms FAST,SLOW]

For every finalised arch of the run (candidates.csv, `final_*` columns) prints its finalised val / test metric,
the inherited-weight val metric, the latency the run's cost model predicted, its VPUNN latency and its
end-to-end latency measured with OpenVINO on this machine's CPU (f32, batch 1, 1 thread; all networks
interleaved in rounds so that drift of a shared machine hits them alike). Then the supernet's ranking
fidelity (Kendall tau, inherited vs finalised val metric) and, when the run's cost model is a CPU latency
table, the measured-to-predicted ratio.

`--anchors CONFIG` also measures the largest and the smallest arch of CONFIG's space: two networks of known
latency on another machine (`--reference-anchors-ms`), which place reference CPU figures measured there on this
machine (`place_here`: the anchors' here/there ratio, interpolated on a log scale between the fast and the slow
anchor, since small networks scale differently from large ones). Each `--reference` point (test metric, CPU ms
on the reference machine, VPUNN microseconds) is then checked for finalised archs that dominate it on VPUNN
latency (at least its test metric, at most its VPUNN latency), and on both (also at most its placed CPU
latency).
"""
from __future__ import annotations

import argparse
import math

import torch

from hw_cost.profiler import MeasureSettings, OpenVinoProfiler
from nas.config import load_config
from nas.export.models import deployable_model
from nas.reporting.report import fidelity_of
from nas.records import read_candidates
from nas.rundir import RunDir
from nas.runtime import keep_freed_memory
from nas.context import build_context, build_task_and_space, npu_generation_model
from nas.training.supernet_training import load_trained_supernet


def _reference(text: str) -> tuple[str, float, float, float]:
    name, top1, cpu_ms, vpu_us = text.split(":")
    return name, float(top1), float(cpu_ms), float(vpu_us)


def place_here(ms_there: float, anchors_there: tuple[float, float], anchors_here: tuple[float, float]) -> float:
    """A CPU latency measured on the reference machine, placed on this one (see the module docstring)."""
    (fast0, slow0), (fast1, slow1) = anchors_there, anchors_here
    t = min(max(math.log(ms_there / fast0) / math.log(slow0 / fast0), 0.0), 1.0)
    return ms_there * (fast1 / fast0) ** (1 - t) * (slow1 / slow0) ** t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--repeats", type=int, default=300, help="timed inferences per network")
    parser.add_argument("--vpunn", default="VPU_2_7", help="VPUNN device of the VPUNN column")
    parser.add_argument("--anchors", help="a config whose largest and smallest archs are measured as anchors")
    parser.add_argument("--reference-anchors-ms", help="FAST,SLOW: the anchors' CPU ms on the reference machine")
    parser.add_argument("--reference", action="append", type=_reference, default=[],
                        help="NAME:TEST_METRIC:CPU_MS:VPU_US of a reference model (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()

    run_dir = RunDir(args.run_dir)
    ctx = build_context(load_config(run_dir.config), run_dir, torch.device("cpu"), progress=False)  # measures here
    metric = ctx.task.metric
    final = sorted((c for c in read_candidates(run_dir.candidates) if c.final is not None), key=lambda c: c.latency_ms)
    if not final:
        raise SystemExit(f"{run_dir.candidates} has no finalised archs (search.finalize.archs = 0?)")
    vpunn = npu_generation_model(ctx.config.cost, args.vpunn)
    vpunn_us = [vpunn.latency_ms(ctx.space.blocks(c.arch)) * 1e3 for c in final]
    supernet = load_trained_supernet(ctx.space, run_dir.supernet_checkpoint, ctx.config.train)
    models = [deployable_model(ctx, c, supernet)[0] for c in final]
    anchors = []
    if args.anchors:
        anchor_config = load_config(args.anchors)
        _, anchor_space = build_task_and_space(anchor_config)
        supernet = anchor_space.build_supernet().eval()
        anchors = [supernet.extract(anchor_space.smallest()).eval(), supernet.extract(anchor_space.largest()).eval()]
    profiler = OpenVinoProfiler(MeasureSettings(threads=1, warmup=30, repeats=args.repeats))
    shape = (1, *ctx.task.input_shape)
    stats = profiler.measure_many(models + anchors, shape, rounds=10)
    measured = [s.median_ms for s in stats[:len(models)]]

    print(f"run {run_dir.path}: cost model {final[0].cost_model}; measured: OpenVINO "
          f"{profiler.metadata()['device_name']}, f32, batch 1, 1 thread, {args.repeats} interleaved inferences each "
          "(median)")
    print(f"{'id':>4} {'final val':>9} {'final test':>10} {'inherited':>9} {'predicted ms':>12} "
          f"{args.vpunn + ' us':>10} {'measured ms':>11}")
    for c, us, ms in zip(final, vpunn_us, measured):
        print(f"{c.id:>4} {c.final.val:9.2f} {c.test_figure:10.2f} {c.score:9.2f} {c.latency_ms:12.4f} {us:10.2f} "
              f"{ms:11.4f}")
    tau = fidelity_of(final)
    print(f"ranking fidelity (Kendall tau, inherited vs finalised val {metric}, {len(final)} archs): "
          f"{'n/a' if tau is None else f'{tau:.3f}'}")
    if ctx.cost_model.is_measured:  # the run predicted this kind of machine
        ratios = [ms / c.latency_ms for c, ms in zip(final, measured)]
        print(f"measured / predicted latency: {min(ratios):.2f} .. {max(ratios):.2f}")
    if anchors:
        fast, slow = stats[len(models)].median_ms, stats[len(models) + 1].median_ms
        print(f"anchors ({args.anchors}): smallest {fast:.4f} ms, largest {slow:.4f} ms here")
        if args.reference and args.reference_anchors_ms:
            there = tuple(float(v) for v in args.reference_anchors_ms.split(","))
            print(f"reference CPU figures placed here by the anchors ({there[0]}/{there[1]} ms there: x"
                  f"{fast / there[0]:.3f} .. x{slow / there[1]:.3f})")
            for name, top1, cpu_ms, vpu_us in args.reference:
                cpu_here = place_here(cpu_ms, there, (fast, slow))
                on_vpu = [c.id for c, us in zip(final, vpunn_us) if c.test_figure >= top1 and us <= vpu_us]
                on_both = [i for i, ms in zip((c.id for c in final), measured) if i in on_vpu and ms <= cpu_here]
                print(f"  {name}: {metric} {top1:.2f}, {cpu_here:.4f} ms here, {vpu_us:.1f} us -> VPU: "
                      + (f"dominated by id {', '.join(map(str, on_vpu))}" if on_vpu else "NOT dominated")
                      + "; VPU and CPU: "
                      + (f"dominated by id {', '.join(map(str, on_both))}" if on_both else "NOT dominated"))


if __name__ == "__main__":
    main()
