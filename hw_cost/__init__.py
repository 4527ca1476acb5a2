"""Hardware cost: layer descriptors of torch models, the CostModel interface, latency tables, VPUNN.

Importing the package registers the cost models of `hw_cost.lut` and `hw_cost.vpunn` (`hw_cost.registry`).
"""
from . import lut, vpunn  # noqa: F401  (they register their kinds of cost model)
from .cost_model import Block, CostModel, CostModelError, complexity, layers_as_blocks
from .layers import LayerExtractionError, LayerSpec, extract_layers
from .registry import COST_MODEL_KINDS, CostModelKind, CostModelSpec, load_cost_model, register_cost_model

__all__ = ["Block", "CostModel", "CostModelError", "COST_MODEL_KINDS", "complexity", "CostModelKind",
           "CostModelSpec", "LayerExtractionError", "LayerSpec", "extract_layers", "layers_as_blocks",
           "load_cost_model", "register_cost_model"]
