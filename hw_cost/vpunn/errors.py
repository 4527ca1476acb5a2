"""Errors of the VPUNN runtime: the Python exception and the official uint32 error codes."""
from __future__ import annotations

import numpy as np

from ..cost_model import CostModelError

__all__ = ["VpunnError", "ERROR_CODES", "ERROR_NAMES", "error_name", "is_error",
           "ERROR_INPUT_TOO_BIG", "ERROR_INVALID_INPUT_CONFIGURATION", "ERROR_INVALID_INPUT_DEVICE",
           "ERROR_INVALID_INPUT_OPERATION", "ERROR_INVALID_OUTPUT_RANGE", "ERROR_TILE_OUTPUT",
           "ERROR_INVALID_LAYER_CONFIGURATION"]


class VpunnError(CostModelError):
    """A VPUNN model file, model directory, workload table or request is unusable; the message says why."""


_UINT32_MAX = 0xFFFFFFFF
# name -> k, where the code is 0xFFFFFFFF - k (docs/vpunn.md §9)
_K = {
    "ERROR_INPUT_TOO_BIG": 0, "ERROR_INVALID_INPUT_CONFIGURATION": 1, "ERROR_INVALID_INPUT_DEVICE": 2,
    "ERROR_INVALID_INPUT_OPERATION": 3, "ERROR_INVALID_OUTPUT_RANGE": 4, "ERROR_TILE_OUTPUT": 5,
    "ERROR_TILE_SPLIT_ZERO_CYC_OUTPUT": 6, "ERROR_TILE_SPLIT_EXCEPTION": 7, "ERROR_INVALID_LAYER_CONFIGURATION": 8,
    "ERROR_CUMULATED_CYCLES_TOO_LARGE": 9, "ERROR_INVALID_CONVERSION_TO_CYCLES": 10,
    "ERROR_INFERENCE_NOT_POSSIBLE": 12, "ERROR_L2_INVALID_PARAMETERS": 16, "ERROR_CACHE_MISS": 18,
}
ERROR_CODES: dict[str, int] = {name: _UINT32_MAX - k for name, k in _K.items()}
ERROR_NAMES: dict[int, str] = {code: name for name, code in ERROR_CODES.items()}

ERROR_INPUT_TOO_BIG = ERROR_CODES["ERROR_INPUT_TOO_BIG"]
ERROR_INVALID_INPUT_CONFIGURATION = ERROR_CODES["ERROR_INVALID_INPUT_CONFIGURATION"]
ERROR_INVALID_INPUT_DEVICE = ERROR_CODES["ERROR_INVALID_INPUT_DEVICE"]
ERROR_INVALID_INPUT_OPERATION = ERROR_CODES["ERROR_INVALID_INPUT_OPERATION"]
ERROR_INVALID_OUTPUT_RANGE = ERROR_CODES["ERROR_INVALID_OUTPUT_RANGE"]
ERROR_TILE_OUTPUT = ERROR_CODES["ERROR_TILE_OUTPUT"]
ERROR_INVALID_LAYER_CONFIGURATION = ERROR_CODES["ERROR_INVALID_LAYER_CONFIGURATION"]

#: a cycle value is an error code iff it exceeds this
_ERROR_THRESHOLD = _UINT32_MAX - 1000


def is_error(cycles):
    """True where a cycle count (scalar or array) is one of the uint32 error codes."""
    return np.asarray(cycles, dtype=np.int64) > _ERROR_THRESHOLD


def error_name(cycles: int) -> str:
    """The official name of an error code, '' for a valid cycle count."""
    cycles = int(cycles)
    if cycles <= _ERROR_THRESHOLD:
        return ""
    return ERROR_NAMES.get(cycles, f"ERROR_{_UINT32_MAX - cycles}")

