"""An NNI 3.0 profiler that costs one sample of an NNI model space with any `hw_cost.CostModel`.

    from hw_cost import load_cost_model
    from hw_cost.nni_profiler import CostModelProfiler
    profiler = CostModelProfiler(space, load_cost_model("vpunn:VPU_2_7"), input_shape=(1, 3, 224, 224))
    latency_ms = profiler.profile(sample)           # also usable in SampleProfilerPenalty / RangeProfilerFilter

The sample freezes the space into a plain torch model, whose layers are extracted and costed (see
`CostModel.model_latency_ms`). Results are cached per sample.
"""
from __future__ import annotations

import json
from typing import Any

from nni.mutable import SampleValidationError
from nni.nas.profiler import Profiler

from .cost_model import CostModel, CostModelError

__all__ = ["CostModelProfiler"]


def _sample_key(sample: dict[str, Any]) -> str:
    return json.dumps(sample, sort_keys=True, default=repr)


class CostModelProfiler(Profiler):
    """Latency in milliseconds of a sample of `model_space` on `cost_model`.

    Args:
        model_space: an NNI `ModelSpace` (anything with `freeze(sample)` returning a torch module).
        cost_model: the latency source, e.g. `load_cost_model("vpunn:VPU_2_7")`.
        input_shape: (N, C, H, W) the model runs on.
    """

    def __init__(self, model_space, cost_model: CostModel, input_shape: tuple[int, int, int, int]):
        super().__init__(model_space)
        if len(tuple(input_shape)) != 4:
            raise CostModelError(f"input_shape must be (N, C, H, W), got {tuple(input_shape)}")
        self.model_space = model_space
        self.cost_model = cost_model
        self.input_shape = tuple(int(d) for d in input_shape)
        self._cache: dict[str, float] = {}

    def profile(self, sample: dict[str, Any]) -> float:
        key = _sample_key(sample)
        if key not in self._cache:
            try:
                model = self.model_space.freeze(sample)
            except SampleValidationError as exc:  # a label missing or a value outside its choice
                raise CostModelError(f"sample {key} does not freeze the model space: {exc}") from exc
            self._cache[key] = float(self.cost_model.model_latency_ms(model, self.input_shape))
        return self._cache[key]
