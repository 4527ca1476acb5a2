"""Intel's VPUNN cost models (VPU 2.0, VPU 2.7, VPU 4.0, NPU 5.0), read from the published `.vpunn` files and
run with numpy (the NN) and numba (the rules, descriptors and theoretical cycles, and the NN of a few rows).

* `read_vpunn`: the FlatBuffers model file reader.
* `DpuModel`: DPU workloads (`DPUWorkload`) -> cycles, batched, with the official sanitizer and error codes.
* `DmaModel`, `theoretical_dma_cycles`: DMA transfers.
* `LayerModel`: whole layers split over tiles and into workloads (`dpu_layer`, `LayerRequest`).
* `VpunnCostModel` / `load_vpunn_cost_model("VPU_2_7")`: latency of torch networks (`hw_cost.CostModel`).

Behaviour follows the official VPUNN runtime (the rules it reproduces: docs/vpunn.md); the model files
come from Intel's repository intel/npu-nn-cost-model (folder models/) and are shipped in `models/` here (see its
NOTICE); `paths.find_model_dir` picks the folder ($VPUNAS_VPUNN_DIR or an explicit folder override it).
"""
from .jit_cache import drop_stale_cache

drop_stale_cache()  # before any compiled kernel loads its cache (jit_cache.py says why)

from .devices import DEVICES, DeviceConfig, device_config
from .dma import (DMAWorkload, DMAWorkloadNPU40_50, DmaModel, dma_npu40_50_workload_from_row, dma_workload_from_row,
                  theoretical_dma_cycles)
from .dpu import DpuModel
from .enums import (ActivationFunction, DataType, DMADirection, ExecutionMode, ISIStrategy, Layout, Operation,
                    Swizzling, VPUDevice, VPUTilingStrategy)
from .errors import ERROR_CODES, VpunnError, error_name, is_error
from .layer import LayerModel, LayerRequest, LayerResult, TileResult, dpu_layer
from .network import (DEVICE_MODELS, DdrPolicy, LayerCost, NetworkCost, VpunnCostModel, VpunnOptions,
                      load_vpunn_cost_model)
from .paths import ENV_VAR, find_model_dir, resolve_model_file
from .reader import VpunnNetwork, parse_model_name, read_vpunn
from .workload import DPUWorkload, workload_from_row

__all__ = [
    "ActivationFunction", "DataType", "DdrPolicy", "device_config", "DEVICE_MODELS", "DeviceConfig",
    "DEVICES", "dma_npu40_50_workload_from_row", "dma_workload_from_row", "DMADirection", "DmaModel", "DMAWorkload",
    "DMAWorkloadNPU40_50", "dpu_layer", "DpuModel", "DPUWorkload", "ENV_VAR", "ERROR_CODES", "error_name",
    "ExecutionMode", "find_model_dir", "is_error", "ISIStrategy", "LayerCost", "LayerModel", "LayerRequest",
    "LayerResult", "Layout", "load_vpunn_cost_model", "NetworkCost", "Operation", "parse_model_name", "read_vpunn",
    "resolve_model_file", "Swizzling", "theoretical_dma_cycles", "TileResult", "VPUDevice", "VpunnCostModel",
    "VpunnError", "VpunnNetwork", "VpunnOptions", "VPUTilingStrategy", "workload_from_row",
]
