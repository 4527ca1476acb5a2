"""Where the `.vpunn` model files are: an explicit folder, `VPUNAS_VPUNN_DIR`, or `../shared/vpunn/models`."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import VpunnError

__all__ = ["ENV_VAR", "DOWNLOAD_HINT", "default_model_dir", "find_model_dir", "resolve_model_file",
           "default_vectors_dir", "MODEL_FILES"]

ENV_VAR = "VPUNAS_VPUNN_DIR"
DOWNLOAD_HINT = ("the published files are in Intel's repository intel/npu-nn-cost-model, folder models/ "
                 "(https://github.com/intel/npu-nn-cost-model/tree/main/models)")
#: cost-model spec -> file name
MODEL_FILES = {"VPU_2_0": "vpu_2_0.vpunn", "VPU_2_0.fast": "vpu_2_0.fast.vpunn", "VPU_2_7": "vpu_2_7.vpunn",
               "VPU_2_7.fast": "vpu_2_7.fast.vpunn", "DMA_2_7": "dma_2_7.vpunn"}
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def default_model_dir() -> Path | None:
    """`../shared/vpunn/models` beside the project root, when it exists."""
    path = _PROJECT_ROOT.parent / "shared" / "vpunn" / "models"
    return path if path.is_dir() else None


def default_vectors_dir() -> Path | None:
    """`../shared/vpunn-vectors` beside the project root (the reference vectors), when it exists."""
    path = _PROJECT_ROOT.parent / "shared" / "vpunn-vectors"
    return path if path.is_dir() else None


def find_model_dir(model_dir=None) -> Path:
    """The model folder: `model_dir` if given, else $VPUNAS_VPUNN_DIR, else the default beside the project."""
    if model_dir is not None:
        path = Path(model_dir).expanduser()
        if not path.is_dir():
            raise VpunnError(f"VPUNN model directory {path} does not exist; {DOWNLOAD_HINT}")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise VpunnError(f"{ENV_VAR}={env} is not a directory; point it at a folder of .vpunn files "
                             f"({DOWNLOAD_HINT})")
        return path
    path = default_model_dir()
    if path is None:
        raise VpunnError(f"no VPUNN model directory found: pass --model-dir (model_dir=) or set {ENV_VAR} to a "
                         f"folder holding the .vpunn files; {DOWNLOAD_HINT}")
    return path


def resolve_model_file(name, model_dir=None) -> Path:
    """A model file given as a path, or by its file name (`vpu_2_7.vpunn`, `models/vpu_2_7.vpunn`) in the folder."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    folder = find_model_dir(model_dir)
    candidate = folder / path.name
    if not candidate.is_file():
        raise VpunnError(f"VPUNN model file {name} not found (neither as a path nor in {folder}); {DOWNLOAD_HINT}")
    return candidate
