"""The registry of search strategies: `STRATEGIES[name]` is the `SearchStrategy` subclass that
`search.strategy=<name>` runs. Each strategy's module registers its class (`register_strategy`);
`nas/strategies/__init__.py` imports those modules.
"""
from __future__ import annotations

from dataclasses import is_dataclass

from .strategy import SearchStrategy

__all__ = ["STRATEGIES", "register_strategy"]

#: the registered strategies by name (`register_strategy`)
STRATEGIES: dict[str, type[SearchStrategy]] = {}

#: keys of the `search` section that are not strategies (and `SearchConfig.extra`)
_RESERVED = ("strategy", "finalize", "extra")


def register_strategy(cls: type[SearchStrategy]) -> type[SearchStrategy]:
    """Class decorator: registers a `SearchStrategy` subclass under its `name`, so that `search.strategy=<name>`
    runs it and `search.<name>` holds its settings (`config_class`)."""
    if not (isinstance(cls, type) and issubclass(cls, SearchStrategy)):
        raise TypeError(f"register_strategy: {cls!r} is not a SearchStrategy subclass")
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name.isidentifier() or name in _RESERVED:
        raise ValueError(f"register_strategy: {cls.__name__} needs a class attribute `name`, an identifier other "
                         f"than {', '.join(_RESERVED)}")
    if not is_dataclass(getattr(cls, "config_class", None)):
        raise TypeError(f"register_strategy: {cls.__name__}.config_class must be a dataclass (its settings)")
    if STRATEGIES.get(name, cls) is not cls:
        raise ValueError(f"register_strategy: {name!r} is taken by {STRATEGIES[name].__name__}")
    STRATEGIES[name] = cls
    return cls
