"""INT8 as the NPU runs it: NNCF post-training quantization of a network's OpenVINO model, scored by its task.

The latency figures of a run assume uint8 on the NPU, while the search and finalisation score float networks.
`quantize` converts a network to OpenVINO and quantizes it with NNCF for the NPU (8-bit weights and activations,
fast bias correction). Activation ranges are the extremes over all of the task's calibration images, not NNCF's
default mean of each image's extremes, which clips the bright and dark pixels of super-resolution outputs: on
the SR smoke run's archs that default lost 2.7 dB of test PSNR, the extremes 0.03 dB at most (the classification
smoke archs' top-1 was the same or better with the extremes).
`int8_metric` scores the result with the task's own metric code, run by OpenVINO on this machine's CPU.

Deterministic: NNCF takes the first `CALIBRATION_SAMPLES` of its data set in order and draws nothing at random,
and the calibration images are a fixed sample of the run (`ptq_samples` of the task).
"""
from __future__ import annotations

import contextlib
import io
import logging

import torch
import torch.nn as nn

from hw_cost.openvino_runtime import openvino
from tasks import Task

__all__ = ["quantize", "OpenVinoNet", "int8_metric", "eval_split", "CALIBRATION_SAMPLES", "DEFAULT_MAX_DROP"]

#: images that calibrate the activation ranges (NNCF's default subset size)
CALIBRATION_SAMPLES = 300
#: largest allowed loss of the task metric from float to INT8 (`vpunas export --precision int8`)
DEFAULT_MAX_DROP = {"top1": 1.0, "psnr": 0.3}


def quantize(model: nn.Module, task: Task):
    """The INT8 `openvino.Model` of `model` (a float network in eval mode), calibrated on the task's
    `ptq_samples`."""
    # NNCF imports torch's C++-extension helper, which warns on stderr that a CUDA folder has no runtime
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    ov = openvino()  # declines telemetry before NNCF's import checks it
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    samples = task.ptq_samples(CALIBRATION_SAMPLES)
    with torch.no_grad():
        float_model = ov.convert_model(model, example_input=samples[0])
    dataset = nncf.Dataset(samples, lambda x: x.numpy())
    ranges = AdvancedQuantizationParameters(activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX)
    nncf.set_log_level(logging.WARNING)  # NNCF logs and draws progress bars on stdout, outside the run's log
    with contextlib.redirect_stdout(io.StringIO()):
        return nncf.quantize(float_model, dataset, subset_size=len(samples), target_device=nncf.TargetDevice.NPU,
                             advanced_parameters=ranges)


class OpenVinoNet(nn.Module):
    """An OpenVINO model compiled for this CPU behind the `nn.Module` call the tasks' metrics make.

    Float parts run in f32 (a CPU with AMX would otherwise pick bf16), on torch's thread count (the run's).
    """

    def __init__(self, model):
        super().__init__()
        self.compiled = openvino().Core().compile_model(
            model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": torch.get_num_threads()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.compiled([x.numpy()])[self.compiled.output(0)].copy())


def eval_split(task: Task) -> str:
    """The split INT8 is checked on: test, or val for a task whose test split is empty."""
    return "test" if len(task.test) else "val"


def int8_metric(model: nn.Module, task: Task) -> tuple[object, float]:
    """(the INT8 `openvino.Model` of `model`, its task metric on `eval_split(task)`, every image)."""
    quantized = quantize(model, task)
    return quantized, float(task.evaluate(OpenVinoNet(quantized), eval_split(task), all_images=True))
