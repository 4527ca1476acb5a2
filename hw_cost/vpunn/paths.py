"""Where the `.vpunn` model files are.

The model folder is, in this order: an explicit folder (`model_dir=`, a config's `cost.model_dir`, `--model-dir`),
else `$VPUNAS_VPUNN_DIR`, else the copies shipped in this package (`hw_cost/vpunn/models/`: `vpu_2_0`, `vpu_2_7`,
their `.fast` variants, `dma_2_7`, `vpu_4_0`, `dma_4_0`, `vpu_5_1` and `dmann_5_0`, unmodified from
intel/npu-nn-cost-model, Apache-2.0; see the NOTICE there).
A model file may also be given as a path, which is used as it is.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import VpunnError

__all__ = ["ENV_VAR", "DOWNLOAD_HINT", "SHIPPED_MODEL_DIR", "default_model_dir", "find_model_dir",
           "resolve_model_file", "MODEL_FILES"]

ENV_VAR = "VPUNAS_VPUNN_DIR"
DOWNLOAD_HINT = ("the published files are in Intel's repository intel/npu-nn-cost-model, folder models/ "
                 "(https://github.com/intel/npu-nn-cost-model/tree/main/models)")
#: cost-model spec -> file name
MODEL_FILES = {"VPU_2_0": "vpu_2_0.vpunn", "VPU_2_0.fast": "vpu_2_0.fast.vpunn", "VPU_2_7": "vpu_2_7.vpunn",
               "VPU_2_7.fast": "vpu_2_7.fast.vpunn", "DMA_2_7": "dma_2_7.vpunn",
               # the pairing of the upstream library's own tests: NPU 5.0 runs the 5.1 DPU network
               "VPU_4_0": "vpu_4_0.vpunn", "DMA_4_0": "dma_4_0.vpunn",
               "NPU_5_0": "vpu_5_1.vpunn", "DMA_5_0": "dmann_5_0.vpunn"}
#: the folder of the model files shipped with the package (the files of MODEL_FILES)
SHIPPED_MODEL_DIR = Path(__file__).resolve().parent / "models"


def default_model_dir() -> Path | None:
    """The shipped model folder, or None when the installation lacks it."""
    return SHIPPED_MODEL_DIR if SHIPPED_MODEL_DIR.is_dir() else None


def find_model_dir(model_dir=None) -> Path:
    """The model folder: `model_dir` if given, else $VPUNAS_VPUNN_DIR (when set and not blank), else the
    shipped folder. A folder that is named but missing is an error, never silently replaced."""
    if model_dir is not None:
        path = Path(model_dir).expanduser()
        if not path.is_dir():
            raise VpunnError(f"VPUNN model directory {path} does not exist; {DOWNLOAD_HINT}")
        return path
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise VpunnError(f"{ENV_VAR}={env} is not a directory; point it at a folder of .vpunn files or unset "
                             f"it to use the files shipped with vpunas ({DOWNLOAD_HINT})")
        return path
    path = default_model_dir()
    if path is None:
        raise VpunnError(f"no VPUNN model directory found: the shipped folder {SHIPPED_MODEL_DIR} is missing (a "
                         f"broken installation?); give a model folder (`model_dir`) or set {ENV_VAR} to one holding "
                         f"the .vpunn files; {DOWNLOAD_HINT}")
    return path


def resolve_model_file(name, model_dir=None) -> Path:
    """A model file given as a path, or by its file name (`vpu_2_7.vpunn`, `models/vpu_2_7.vpunn`) in the folder."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    folder = find_model_dir(model_dir)
    candidate = folder / path.name
    if not candidate.is_file():
        shipped = (f"; the shipped folder holds only {', '.join(sorted(set(MODEL_FILES.values())))}: give "
                   f"a model folder (`model_dir`) or set {ENV_VAR} to use other files"
                   if folder.resolve() == SHIPPED_MODEL_DIR else "")
        raise VpunnError(f"VPUNN model file {name} not found (neither as a path nor in {folder}){shipped}; "
                         f"{DOWNLOAD_HINT}")
    return candidate
