"""Benchmark of the VPUNN runtime (numba-compiled rules, numpy NN) against the figures of Intel's C++ runtime
(docs/vpunn.md §11).

    .venv/bin/python scripts/bench_vpunn.py [--model-dir DIR] [--threads 1 2] [--repeat R]

Prints, for vpu_2_7 and vpu_2_0 (full and .fast), vpu_4_0 (VPU 4.0) and vpu_5_1 (NPU 5.0): DPU throughput of
`DpuModel.cost` (sanitizer, descriptors, one NN pass, post-processing; result cache off, all workloads distinct)
at batch 1, 256 and 65536, with 1 and 2 BLAS threads (the machine has 2 cores shared with other work: compare
with the load average printed; "per CPU-s" divides by the process's CPU time instead of the wall time, which
other processes inflate); per model, the single-query time (microseconds per `cost` call on one workload, the
batch-1 figure) against the target and Intel's C++ `DPU()`; then the cold and warm time to cost a whole
MobileNetV2-1.0 at 224x224 on each device (layers extracted beforehand, timed apart).
Cold = a fresh cost model with empty caches; the model files are already parsed (as a warm process has them).
The compiled code is loaded (or compiled) before any timing. Times are the best of --repeat runs: the machine is
shared, so single runs vary.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from hw_cost.vpunn import DataType, DpuModel, ExecutionMode, Operation, VPUDevice, dpu_layer, load_vpunn_cost_model
from hw_cost.vpunn.network import read_model_cached
from hw_cost.vpunn.paths import find_model_dir
from hw_cost.vpunn.sanitizer import check, sanitize
from hw_cost.vpunn.workload import F, workloads_to_matrix

# Intel's C++ runtime, one thread: microseconds per workload (2.x: this machine, docs/vpunn.md §11; 4.0 / 5.1:
# a 2-core AMD EPYC, tests/data/vpunn-vectors/npu45/README.md; no vector-call figure published for those)
CPP_SINGLE_US = {"vpu_2_0": 36.5, "vpu_2_0.fast": 8.0, "vpu_2_7": 51.5, "vpu_2_7.fast": 19.5, "vpu_4_0": 33.0,
                 "vpu_5_1": 29.5}
CPP_VECTOR_US = {"vpu_2_0": 29.0, "vpu_2_0.fast": 5.1, "vpu_2_7": 41.0, "vpu_2_7.fast": 12.0}
# Layer() auto strategy per layer, cold / warm cache: 2.7 with 2 tiles (3 strategies); 4.0 and 5.0 with 4 tiles
# (7 strategies, tests/data/vpunn-vectors/npu45/README.md)
CPP_LAYER_MS = {"VPU_2_7": (1.6, 0.3), "VPU_4_0": (8.1, 0.84), "NPU_5_0": (7.0, 0.7)}
#: model file stem -> device
STEMS = {"vpu_2_7": VPUDevice.VPU_2_7, "vpu_2_7.fast": VPUDevice.VPU_2_7, "vpu_2_0": VPUDevice.VPU_2_0,
         "vpu_2_0.fast": VPUDevice.VPU_2_0, "vpu_4_0": VPUDevice.VPU_4_0, "vpu_5_1": VPUDevice.NPU_5_0}
TARGET_WPS, TARGET_SINGLE_US, TARGET_COLD_MS, TARGET_WARM_MS = 100_000, 50.0, 50.0, 2.0
SINGLE_CALLS = 2048  # distinct workloads costed one per call for the batch-1 figure


def random_workloads(device: VPUDevice, n: int, seed: int = 0) -> np.ndarray:
    """n distinct valid workloads of `device` (convs, depthwise, eltwise, max-pools; uint8 and fp16)."""
    rng = np.random.default_rng(seed)
    cuboid = device != VPUDevice.VPU_2_0  # 2.7 and later: CUBOID modes, 16/32/64-channel depthwise workloads
    template = workloads_to_matrix([dpu_layer(device, Operation.CONVOLUTION, (1, 1, 16), (1, 1, 16))])[0]
    found = np.zeros((0, len(template)))
    while len(found) < n:
        m = 2 * n
        w = np.repeat(template[None], m, axis=0)
        op = rng.choice([Operation.CONVOLUTION, Operation.DW_CONVOLUTION, Operation.ELTWISE, Operation.MAXPOOL], m,
                        p=[0.55, 0.2, 0.15, 0.1])
        k = np.where(op == Operation.ELTWISE, 1, rng.choice([1, 3, 5, 7], m))
        s = np.where(op == Operation.ELTWISE, 1, rng.choice([1, 2], m))
        out_w, out_h = rng.integers(1, 57, m), rng.integers(1, 57, m)
        dw_like = (op == Operation.DW_CONVOLUTION) | (op == Operation.MAXPOOL)
        c_out = np.where(dw_like & cuboid, rng.choice([16, 32, 64], m), 16 * rng.integers(1, 33, m))
        fp16 = rng.random(m) < 1 / 3
        if cuboid:  # NPU 5.0 runs ELTWISE in CUBOID_8x16 only
            other = np.where((op == Operation.ELTWISE) & (device == VPUDevice.NPU_5_0), ExecutionMode.CUBOID_8x16,
                             ExecutionMode.CUBOID_16x16)
            mode = np.where(op == Operation.CONVOLUTION, rng.choice([3, 4, 5], m), other)
        else:
            mode = np.where(fp16, ExecutionMode.VECTOR_FP16, rng.choice([0, 1], m))
        w[:, F.operation], w[:, F.execution_mode] = op, mode
        w[:, F.k_w] = w[:, F.k_h] = k
        w[:, F.s_w] = w[:, F.s_h] = s
        w[:, F.pad_top] = w[:, F.pad_bottom] = w[:, F.pad_left] = w[:, F.pad_right] = k // 2
        w[:, F.out_w], w[:, F.out_h], w[:, F.out_c] = out_w, out_h, c_out
        w[:, F.mem_w], w[:, F.mem_h], w[:, F.mem_c] = out_w, out_h, c_out
        w[:, F.in_w], w[:, F.in_h] = (out_w - 1) * s + 1, (out_h - 1) * s + 1  # + k - 2 * (k // 2) = + 1
        w[:, F.in_c] = np.where(op == Operation.CONVOLUTION, 16 * rng.integers(1, 33, m), c_out)
        w[:, F.in_dtype] = w[:, F.out_dtype] = np.where(fp16, DataType.FLOAT16, DataType.UINT8)
        w = w[check(sanitize(w)) == 0]
        found = np.unique(np.concatenate([found, w]), axis=0)
    return found[rng.permutation(len(found))[:n]]


def best_time(fn, repeat: int, clock=time.perf_counter) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def bench_dpu(model_dir, repeat: int, threads: tuple[int, ...]) -> None:
    print("DPU throughput: DpuModel.cost on distinct workloads (result cache off), workloads/s")
    print(f"{'model':<14} {'BLAS':>4} {'batch 1':>9} {'batch 256':>10} {'batch 65536':>12} {'per CPU-s':>10}   "
          f"{'x C++ DPU()':>11} {'x C++ vector':>12}")
    pools = {dev: random_workloads(dev, 65536, seed=1) for dev in dict.fromkeys(STEMS.values())}
    for stem, device in STEMS.items():
        pool = pools[device]
        for n_threads in threads:
            model = DpuModel(read_model_cached(model_dir / f"{stem}.vpunn"), cache_size=0, blas_threads=n_threads)
            model.cost(pool[:1]), model.cost(pool[:256])  # load the compiled code (or compile it) first
            rates = {}
            for batch in (1, 256, 65536):
                calls = {1: SINGLE_CALLS, 256: 64, 65536: 1}[batch]
                t = best_time(lambda: [model.cost(pool[i * batch:(i + 1) * batch]) for i in range(calls)],
                              repeat if batch != 256 else 1)
                rates[batch] = calls * batch / t
            big = rates[65536]
            cpu = 65536 / best_time(lambda: model.cost(pool), repeat, time.process_time)
            vector = f"{big * CPP_VECTOR_US[stem] / 1e6:>11.1f}x" if stem in CPP_VECTOR_US else f"{'n/a':>12}"
            print(f"{stem:<14} {n_threads:>4} {rates[1]:>9,.0f} {rates[256]:>10,.0f} {big:>12,.0f} {cpu:>10,.0f}   "
                  f"{big * CPP_SINGLE_US[stem] / 1e6:>10.1f}x {vector}")
            single_us = 1e6 / rates[1]
            print(f"{'':<19} single query {single_us:5.1f} us (C++ DPU() {CPP_SINGLE_US[stem]:.1f} us); target <= "
                  f"{TARGET_SINGLE_US:.0f} us: {'meets' if single_us <= TARGET_SINGLE_US else 'MISSES'}")
            if not stem.endswith(".fast"):
                verdict = "meets" if big >= TARGET_WPS else "MISSES"
                print(f"{'':<19} target >= {TARGET_WPS:,} workloads/s batched: {verdict}")


def bench_network(model_dir, repeat: int) -> None:
    import torch
    import torchvision

    from hw_cost import extract_layers

    torch.set_num_threads(1)
    t = time.perf_counter()
    layers = extract_layers(torchvision.models.mobilenet_v2(), (1, 3, 224, 224))
    extract_ms = (time.perf_counter() - t) * 1e3
    dpu_layers = sum(1 for lay in layers if lay.op in ("conv", "dwconv", "linear", "add", "maxpool", "avgpool"))
    print(f"\nMobileNetV2-1.0 @224: {len(layers)} layers ({dpu_layers} on the DPU); extract_layers (torch.fx) "
          f"took {extract_ms:.0f} ms, not counted below")
    for spec in ("VPU_2_7", "VPU_2_7.fast", "VPU_2_0", "VPU_4_0", "NPU_5_0"):
        model = load_vpunn_cost_model(spec, model_dir=model_dir)

        def cold():
            model.clear_cache()
            model.network_cost(layers)

        cold_ms = best_time(cold, repeat) * 1e3
        cold_cpu_ms = best_time(cold, repeat, time.process_time) * 1e3
        model.network_cost(layers)
        warm_ms = best_time(lambda: model.network_cost(layers), repeat) * 1e3
        result = model.network_cost(layers)
        line = (f"{spec:<13} cold {cold_ms:7.1f} ms ({cold_cpu_ms:.1f} ms CPU)   warm {warm_ms:6.2f} ms   -> "
                f"{result.ms:.3f} ms on the device, {result.fps:,.0f} fps")
        if spec in CPP_LAYER_MS:
            cpp_cold, cpp_warm = (per_layer * dpu_layers for per_layer in CPP_LAYER_MS[spec])
            line += (f"\n{'':<13} C++ layer model: about {cpp_cold:.0f} ms cold, {cpp_warm:.0f} ms warm "
                     f"-> {cpp_cold / cold_ms:.1f}x / {cpp_warm / warm_ms:.0f}x faster")
        if not spec.endswith(".fast"):
            ok = cold_ms <= TARGET_COLD_MS and warm_ms <= TARGET_WARM_MS
            line += (f"\n{'':<13} targets cold <= {TARGET_COLD_MS:.0f} ms, warm <= {TARGET_WARM_MS:.0f} ms: "
                     f"{'meets' if ok else 'MISSES'}")
        print(line)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="folder of the .vpunn files")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="BLAS thread counts to measure the DPU throughput with (default: 1 2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    args = parser.parse_args(argv)
    model_dir = find_model_dir(args.model_dir)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"numpy {np.__version__}; {os.cpu_count()} CPUs, load average {load}; models from {model_dir}")
    print("(the network costing below uses the cost model's default: one BLAS thread)\n")
    bench_dpu(model_dir, args.repeat, tuple(args.threads))
    bench_network(model_dir, args.repeat)


if __name__ == "__main__":
    main()
