"""On-device latency measurement with OpenVINO (warm-up, repeats, median)."""
from __future__ import annotations

import logging
import platform
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn

from .cost_model import CostModelError
from .openvino_runtime import openvino

logger = logging.getLogger(__name__)

__all__ = ["MeasureSettings", "LatencyStats", "OpenVinoProfiler"]


@dataclass
class MeasureSettings:
    """How latency is measured.

    Args:
        device: OpenVINO device ("CPU", "NPU", "GPU"); `openvino.Core().available_devices` lists them.
        precision: inference precision hint ("f32", "f16", "bf16"); "f32" gives comparable CPU numbers
            across machines (OpenVINO picks bf16 by itself on CPUs that have it).
        threads: inference threads (CPU only); recorded with the results.
        warmup / repeats: untimed and timed synchronous inferences; the median is reported.
    """

    device: str = "CPU"
    precision: str = "f32"
    threads: int = 1
    warmup: int = 20
    repeats: int = 100


@dataclass
class LatencyStats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int

    def to_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


class OpenVinoProfiler:
    """Compiles torch modules with OpenVINO and times batch-1 synchronous inference on one device."""

    def __init__(self, settings: MeasureSettings):
        ov = openvino()
        self.settings = settings
        self.core = ov.Core()
        self._ov = ov
        if settings.device not in self.core.available_devices:
            raise CostModelError(f"OpenVINO device {settings.device!r} is not available here; available: "
                                 f"{', '.join(self.core.available_devices)}")
        if settings.warmup < 0 or settings.repeats < 1:
            raise CostModelError("measurement needs warmup >= 0 and repeats >= 1")

    def metadata(self) -> dict:
        """What a latency table records about where and how it was measured."""
        s = self.settings
        return {"device": s.device, "device_name": self.core.get_property(s.device, "FULL_DEVICE_NAME"),
                "host": platform.node(), "runtime": "openvino", "runtime_version": self._ov.__version__,
                "precision": s.precision, "threads": s.threads, "warmup": s.warmup, "repeats": s.repeats,
                "batch": 1, "statistic": "median"}

    def _compile(self, module: nn.Module, input_shape):
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": self.settings.precision}
        if self.settings.device == "CPU":
            config["INFERENCE_NUM_THREADS"] = self.settings.threads
            config["NUM_STREAMS"] = 1
        example = torch.zeros(tuple(input_shape))
        with torch.no_grad():
            model = self._ov.convert_model(module.eval(), example_input=example)
        return self.core.compile_model(model, self.settings.device, config)

    def _timed(self, request, x: np.ndarray, n: int) -> np.ndarray:
        times = np.empty(n)
        for i in range(n):
            start = time.perf_counter()
            request.infer([x])
            times[i] = time.perf_counter() - start
        return times * 1e3

    def measure(self, module: nn.Module, input_shape) -> LatencyStats:
        """Median latency of one batch-1 inference of `module` on an input of `input_shape`."""
        request = self._compile(module, input_shape).create_infer_request()
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        self._timed(request, x, self.settings.warmup)
        times = self._timed(request, x, self.settings.repeats)
        return LatencyStats(float(np.median(times)), float(np.percentile(times, 10)),
                            float(np.percentile(times, 90)), self.settings.repeats)

    def measure_many(self, modules: list[nn.Module], input_shape, rounds: int = 10) -> list[LatencyStats]:
        """Median latency of each of `modules`, measured interleaved: `rounds` rounds in which every module runs
        `repeats / rounds` times, so that drift of a shared machine hits all of them alike."""
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        requests = [self._compile(m, input_shape).create_infer_request() for m in modules]
        for request in requests:
            self._timed(request, x, self.settings.warmup)
        per_round = max(1, self.settings.repeats // rounds)
        times: list[list[np.ndarray]] = [[] for _ in requests]
        for _ in range(rounds):
            for request, collected in zip(requests, times):
                collected.append(self._timed(request, x, per_round))
        stats = []
        for collected in times:
            all_times = np.concatenate(collected)
            stats.append(LatencyStats(float(np.median(all_times)), float(np.percentile(all_times, 10)),
                                      float(np.percentile(all_times, 90)), len(all_times)))
        return stats

    def measure_block(self, module: nn.Module, input_shape, rounds: int = 5) -> dict:
        """Latency of a block as part of a network: its own inference time minus the fixed cost of an inference.

        A block alone runs in about as long as the runtime's per-inference overhead (input/output copies,
        scheduling), which a network pays once, not once per block. The overhead is measured with a trivial
        model on the same input, interleaved with the block in `rounds` so that drift of a shared machine hits
        both equally. Returns `median_ms` (block minus overhead, at least 0), `raw_median_ms`, `overhead_ms`,
        `p10_ms`/`p90_ms` of the raw times and `repeats`.
        """
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        block = self._compile(module, input_shape).create_infer_request()
        trivial = self._compile(_Trivial(), input_shape).create_infer_request()
        self._timed(block, x, self.settings.warmup)
        self._timed(trivial, x, self.settings.warmup)
        per_round = max(1, self.settings.repeats // rounds)
        block_times, trivial_times = [], []
        for _ in range(rounds):
            block_times.append(self._timed(block, x, per_round))
            trivial_times.append(self._timed(trivial, x, per_round))
        raw, base = np.concatenate(block_times), np.concatenate(trivial_times)
        overhead = float(np.median(base))
        return {"median_ms": round(max(float(np.median(raw)) - overhead, 0.0), 6),
                "raw_median_ms": round(float(np.median(raw)), 6), "overhead_ms": round(overhead, 6),
                "p10_ms": round(float(np.percentile(raw, 10)), 6), "p90_ms": round(float(np.percentile(raw, 90)), 6),
                "repeats": len(raw)}

    def inference_overhead_ms(self, input_shape) -> float:
        """The fixed cost of one inference on an input of `input_shape` (a trivial model)."""
        return self.measure(_Trivial(), input_shape).median_ms


class _Trivial(nn.Module):
    """The cheapest model OpenVINO will not optimise away."""

    def forward(self, x):
        return torch.relu(x)
