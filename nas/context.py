"""What a run works with: its config's task, search space and cost model on its device, among its processes
(`SearchContext`, built by `build_context`); every room that runs archs of a run starts from one.

The run's device is decided in one place, `resolve_device`, when the run starts (`nas.run.prepare_run`); the
context carries that `torch.device` to every stage. A finished run read back on another machine (export, its
report, `vpunas cost` of its archs) asks for the CPU instead: it trains nothing.
"""
from __future__ import annotations

import torch

from hw_cost import CostModel, CostModelSpec, load_cost_model
from search_spaces import build_space
from tasks import build_task

from .config import ConfigError, CostConfig, RunConfig
from .distributed import current
from .latency.lut_validation import load_run_correction
from .rundir import RunDir
from .search_context import SearchContext

__all__ = ["build_context", "build_task_and_space", "resolve_device", "run_cost_model",
           "npu_generation_model"]


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    """The config's `device` as the run's `torch.device`: "auto" is CUDA when torch finds a device, else the CPU;
    "cuda" where torch finds none is a ConfigError. Under torchrun, process `local_rank` of a machine takes CUDA
    device `local_rank`."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda, but torch finds no CUDA device here (set device: cpu or auto)")
    return torch.device("cuda", local_rank) if requested == "cuda" else torch.device(requested)


def build_task_and_space(config: RunConfig):
    """The config's task, and its search space shaped by the task's data (input shape, outputs)."""
    task = build_task(config.task, seed=config.seed)
    return task, build_space(config.space, input_shape=task.input_shape, num_outputs=task.num_outputs)


def run_cost_model(config: RunConfig, run_dir: RunDir) -> CostModel:
    """The run's cost model as the run uses it: with its options, a latency table corrected to the run's machine
    when the run recorded a correction (`nas.latency.lut_validation`)."""
    cost_model = load_cost_model(config.cost.spec, **config.cost.options())
    if cost_model.is_measured:
        load_run_correction(cost_model, run_dir)
    return cost_model


def npu_generation_model(cost: CostConfig, generation: str, *, dtype: str | None = None,
                         model_dir: str | None = None) -> CostModel:
    """VPUNN's model of NPU `generation` (`nas.config.NPU_GENERATIONS`) with the run's options (`cost.dtype`,
    `cost.model_dir`), `dtype` and `model_dir` replacing them where given: the latency of a run's archs and
    baselines on every generation, beside the run's own cost model."""
    options = cost.vpunn_options()
    if dtype:
        options["dtype"] = dtype
    if model_dir:
        options["model_dir"] = model_dir
    return load_cost_model(CostModelSpec("vpunn", generation), **options)


def build_context(config: RunConfig, run_dir: RunDir, device: torch.device, progress: bool = True) -> SearchContext:
    """The run's task, space and cost model on `device` (`resolve_device` when the run starts; the CPU for a
    finished run read back), among the processes of `nas.distributed.current()`."""
    torch.set_num_threads(config.threads)
    task, space = build_task_and_space(config)
    dist = current()
    return SearchContext(config, run_dir, task, space, run_cost_model(config, run_dir), progress and dist.is_main,
                         device, dist)
