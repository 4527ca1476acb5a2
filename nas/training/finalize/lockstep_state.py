"""The lockstep training state in its checkpoint file: what it holds, and which checkpoints a trainer of given
archs may resume or continue."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from ...errors import RunDirError
from ...rundir import load_checkpoint


def lockstep_state(global_step: int, total_steps: int, net_steps: Sequence[int], names: Sequence[str],
                   nets: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> dict:
    """The checkpoint of a lockstep training of the archs `names` at `global_step`."""
    return {"global_step": global_step, "total_steps": total_steps, "net_steps": net_steps, "names": names,
            "nets": [n.state_dict() for n in nets], "optimizers": [o.state_dict() for o in optimizers]}


def resumed_state(checkpoint_path: Path, names: Sequence[str]) -> dict:
    """The checkpoint of a lockstep training of exactly the archs `names`, to resume it."""
    state = load_checkpoint(checkpoint_path)
    if state["names"] != names:
        raise RunDirError(f"{checkpoint_path} holds the finalisation of other archs; it cannot be resumed "
                          "with this run's front")
    return state


def continued_state(checkpoint_path: Path, names: Sequence[str]) -> tuple[list[dict], list[dict], int]:
    """(weights, optimizer states, step) of the archs `names`, in that order, from the checkpoint of a lockstep
    training of them among others (the screening's)."""
    state = load_checkpoint(checkpoint_path)
    index = {name: i for i, name in enumerate(state["names"])}
    missing = [name for name in names if name not in index]
    if missing:
        raise RunDirError(f"{checkpoint_path} does not hold {len(missing)} of the archs to continue")
    return ([state["nets"][index[name]] for name in names], [state["optimizers"][index[name]] for name in names],
            state["global_step"])
