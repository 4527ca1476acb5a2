"""Weight-sharing search spaces, one module per family, registered by name."""
from . import mobilenet  # noqa: F401  (registers the family)
from . import edsr  # noqa: F401  (registers the family)
from . import resnet  # noqa: F401  (registers the family)
from . import hybrid  # noqa: F401  (registers the family)
from .base import (SPACES, ArchError, Choice, SearchSpace, SpaceConfig, SpaceFamily, Supernet, arch_key,
                   build_space, space_config_class, space_family)

__all__ = ["SPACES", "ArchError", "Choice", "SearchSpace", "SpaceConfig", "SpaceFamily", "Supernet", "arch_key",
           "build_space", "space_config_class", "space_family"]
