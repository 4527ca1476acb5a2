"""Hardware cost: layer descriptors of torch models, the CostModel interface, latency tables, VPUNN."""
from .cost_model import COST_MODEL_KINDS, Block, CostModel, CostModelError, layers_as_blocks, load_cost_model
from .layers import LayerExtractionError, LayerSpec, extract_layers

__all__ = ["Block", "CostModel", "CostModelError", "COST_MODEL_KINDS", "LayerExtractionError", "LayerSpec",
           "extract_layers", "layers_as_blocks", "load_cost_model"]
