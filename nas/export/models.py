"""Deployable models of a run's architectures: TorchScript, ONNX or OpenVINO IR (float, or INT8 quantized by NNCF),
each checked against PyTorch."""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from hw_cost.openvino_runtime import openvino

from ..config import load_config
from ..context import build_context
from ..errors import ParameterError, QuantizationError
from ..records import Candidate, read_candidates
from ..rundir import RunDir, atomic_write_text
from ..search_context import SearchContext
from ..training.evaluation import ArchEvaluator
from ..training.finalize import load_final_weights
from ..training.supernet_training import load_trained_supernet
from .quantize import DEFAULT_MAX_DROP, eval_split, int8_metric

logger = logging.getLogger(__name__)

__all__ = ["export_arch", "deployable_model", "FORMATS", "PRECISIONS", "run_arch"]

FORMATS = {"torch": ".pt", "onnx": ".onnx", "openvino": ".xml"}
PRECISIONS = ("fp32", "int8")


def run_arch(run_dir: RunDir, arch_id: str) -> Candidate:
    """The candidate of the run with id `arch_id` (an integer id)."""
    if not run_dir.candidates.exists():
        raise FileNotFoundError(f"{run_dir.candidates} not found: is {run_dir.path} a vpunas run?")
    for candidate in read_candidates(run_dir.candidates):
        if str(candidate.id) == str(arch_id):
            return candidate
    raise ParameterError(f"`arch_id` {arch_id}: no such id in {run_dir.candidates}")


def _save(model: nn.Module, example: torch.Tensor, fmt: str, path: Path) -> None:
    if fmt == "torch":
        torch.jit.save(torch.jit.trace(model, example), str(path))
    elif fmt == "onnx":
        torch.onnx.export(model, (example,), str(path), input_names=["input"], output_names=["output"],
                          dynamo=True, external_data=False)
    else:
        ov = openvino()
        ov.save_model(ov.convert_model(model, example_input=example), str(path), compress_to_fp16=False)


def _run_exported(fmt: str, path: Path, x: torch.Tensor) -> np.ndarray:
    if fmt == "torch":
        return torch.jit.load(str(path))(x).detach().numpy()
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    compiled = openvino().Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled([x.numpy()])[compiled.output(0)]


def deployable_model(ctx: SearchContext, candidate: Candidate, supernet) -> tuple[nn.Module, bool]:
    """(the model of a run's `candidate` in eval mode, whether its weights are finalised): finalised weights when
    the arch was finalised, else inherited ones from `supernet` (the run's trained supernet,
    `load_trained_supernet`) with batch norm recalibrated."""
    model = ArchEvaluator(ctx.space, supernet, ctx.task, ctx.cost_model, channels_last=False).subnet(candidate.arch)
    finalised = load_final_weights(ctx.run_dir, candidate.id, model)
    return model.to(memory_format=torch.contiguous_format).eval(), finalised


def _int8_checked(model: nn.Module, task, path: Path, max_drop: float | None) -> dict:
    """Quantize `model` to INT8 (`nas.export.quantize`), check its task metric against the float model's on the same
    images and save it as `path`; returns the INT8 fields of the export's json.

    Raises `QuantizationError` when the metric drops by more than `max_drop` (None: `DEFAULT_MAX_DROP`)."""
    metric, split = task.metric, eval_split(task)
    max_drop = DEFAULT_MAX_DROP[metric] if max_drop is None else max_drop
    quantized, int8 = int8_metric(model, task)
    fp = task.evaluate(model, split, all_images=True)
    if fp - int8 > max_drop:
        raise QuantizationError(f"the INT8 model scores {split} {metric} {int8:.2f}, {fp - int8:.2f} below the float "
                                f"model's {fp:.2f} (allowed: {max_drop:g}; `max_drop` sets the bound)")
    openvino().save_model(quantized, str(path), compress_to_fp16=False)
    return {f"int8_{split}_{metric}": round(int8, 4), f"float_{split}_{metric}": round(fp, 4),
            "int8_drop": round(fp - int8, 4), "max_drop": max_drop}


def export_arch(run_dir: RunDir, arch_id: str, fmt: str, out: str | Path | None = None, precision: str = "fp32",
                max_drop: float | None = None) -> Path:
    """Export arch `arch_id` of a finished run: its finalised weights when it was finalised, else its inherited,
    batch-norm-recalibrated weights.

    Writes the model (and for OpenVINO its .bin) plus `<name>.json` (arch, metric, latency, input shape and
    normalisation), after checking that the exported model reproduces the PyTorch outputs. `precision="int8"`
    (OpenVINO only) quantizes the checked float model and checks the INT8 model's task metric instead, against
    the float model's within `max_drop` (see `_int8_checked`).
    """
    if fmt not in FORMATS:
        raise ParameterError(f"`fmt` {fmt!r}: valid formats are {', '.join(FORMATS)}")
    if precision not in PRECISIONS:
        raise ParameterError(f"`precision` {precision!r}: valid precisions are {', '.join(PRECISIONS)}")
    if precision == "int8" and fmt != "openvino":
        raise ParameterError(f"`precision` int8 needs `fmt` openvino (NNCF quantizes OpenVINO models), not {fmt}")
    if max_drop is not None and max_drop < 0:
        raise ParameterError(f"`max_drop` {max_drop:g}: must be >= 0")
    candidate = run_arch(run_dir, arch_id)
    ctx = build_context(load_config(run_dir.config), run_dir, torch.device("cpu"), progress=False)  # trains nothing
    supernet = load_trained_supernet(ctx.space, run_dir.supernet_checkpoint, ctx.config.train)
    model, finalised = deployable_model(ctx, candidate, supernet)
    suffix = "_int8" if precision == "int8" else ""
    path = Path(out) if out else run_dir.models_dir / f"arch{arch_id}{suffix}{FORMATS[fmt]}"
    if path.suffix != FORMATS[fmt]:
        path = path.with_suffix(FORMATS[fmt])
    example = torch.randn(1, *ctx.task.input_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = model(example).numpy()
    with tempfile.TemporaryDirectory(dir=path.parent if path.parent.exists() else None) as tmp:
        staged = Path(tmp) / path.name
        with torch.no_grad():
            _save(model, example, fmt, staged)
        got = _run_exported(fmt, staged, example)
        error = float(np.max(np.abs(got - reference)))
        if not np.allclose(got, reference, rtol=1e-3, atol=1e-3):
            raise RuntimeError(f"exported {fmt} model differs from PyTorch by {error:.3g}")
        int8 = _int8_checked(model, ctx.task, staged, max_drop) if precision == "int8" else {}
        if int8:  # the INT8 model's deviation, for the record (its check is the metric's drop)
            error = float(np.max(np.abs(_run_exported(fmt, staged, example) - reference)))
        path.parent.mkdir(parents=True, exist_ok=True)
        for produced in Path(tmp).iterdir():
            shutil.move(str(produced), path.parent / produced.name)
    metric = ctx.task.metric
    final = candidate.final
    scores = ({metric: final.val, f"test_{metric}": candidate.test_figure, "weights": "finalised"} if finalised else
              {metric: candidate.score, "weights": "inherited from the supernet, batch norm recalibrated"})
    info = {"arch": candidate.arch, "id": candidate.id, **scores, "latency_ms": candidate.latency_ms,
            "cost_model": candidate.cost_model, "input_shape": [1, *ctx.task.input_shape], "format": fmt,
            "precision": precision, **int8, "max_abs_diff_vs_pytorch": error,
            "preprocessing": ctx.task.preprocessing()}
    atomic_write_text(path.with_suffix(".json"), json.dumps(info, indent=1) + "\n")
    logger.info("exported arch %s as %s %s to %s (max |diff| vs PyTorch %.2g%s)", arch_id, precision, fmt, path,
                error, "".join(f"; {k} {v:g}" for k, v in int8.items()))
    return path
