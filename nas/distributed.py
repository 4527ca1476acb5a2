"""The processes of one run started by torchrun: who they are, and the few collectives the run needs.

    torchrun --nproc-per-node N -m nas.cli search CONFIG.yaml

torchrun gives each process RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE in its environment. `start`
joins the processes into one process group (gloo on the CPU; on CUDA, NCCL for tensors and gloo for Python
objects), `current` describes the group of this process, `cleanup` ends it. Without torchrun, or with one
process, the context is a single process and every collective is the identity: the code paths are the same.
"""
from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["Distributed", "start", "current", "cleanup", "TIMEOUT"]

#: how long a process waits for the others in one collective: rank 0 alone finalises the chosen archs and scores
#: the baselines while the others wait for its results, which can take hours
TIMEOUT = datetime.timedelta(hours=24)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "")
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer (set by torchrun)") from None


@dataclass(frozen=True)
class Distributed:
    """This process's place among the processes of a run.

    Args:
        rank / world_size: this process's index and the number of processes.
        local_rank / local_world_size: the same on this machine (the CUDA device is `local_rank`).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_environment(cls) -> "Distributed":
        """The launch torchrun describes in the environment (a single process when it describes none)."""
        world = _env_int("WORLD_SIZE") or 1
        rank = _env_int("RANK") or 0
        local_rank = _env_int("LOCAL_RANK")
        local_world = _env_int("LOCAL_WORLD_SIZE") or world
        if world < 1 or not 0 <= rank < world:
            raise ConfigError(f"environment: RANK={rank} is not a rank of WORLD_SIZE={world}")
        return cls(rank, world, rank if local_rank is None else local_rank, local_world)

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run's files."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_gather(self, obj: Any) -> list:
        """Every process's `obj` (picklable), in rank order, in every process."""
        if not self.enabled:
            return [obj]
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` in every process (the others pass anything, e.g. None)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true in any process."""
        if not self.enabled:
            return flag
        value = torch.tensor([int(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the processes, in place."""
        if self.enabled:
            dist.all_reduce(tensor)
        return tensor

    def sum_tensors_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Sum each of `tensors` (e.g. gradients) over the processes, in place, in one collective per dtype."""
        if self.enabled:
            _through_flat_buffers(tensors, dist.all_reduce)

    def broadcast_tensors_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Overwrite `tensors` (e.g. a state dict's) with rank 0's, in one collective per dtype."""
        if self.enabled:
            _through_flat_buffers(tensors, lambda flat: dist.broadcast(flat, src=0))

    def share(self, n: int) -> slice:
        """This process's contiguous share of `n` items (sizes differ by one at most)."""
        return slice(n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size)

    def map(self, fn: Callable[[Any], Any], items: Sequence) -> list:
        """`[fn(item) for item in items]` in every process, each process computing every world_size-th item."""
        if not self.enabled:
            return [fn(item) for item in items]
        parts = self.all_gather([fn(item) for item in items[self.rank::self.world_size]])
        return [parts[i % self.world_size][i // self.world_size] for i in range(len(items))]


def _through_flat_buffers(tensors: Sequence[torch.Tensor], collective: Callable[[torch.Tensor], Any]) -> None:
    """Apply an in-place `collective` to `tensors` packed into one flat buffer per dtype, then unpack (any
    memory format, e.g. channels-last weights)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault(tensor.dtype, []).append(tensor)
    for group in by_dtype.values():
        flat = torch.cat([t.reshape(-1) for t in group])
        collective(flat)
        offset = 0
        for tensor in group:
            tensor.copy_(flat[offset:offset + tensor.numel()].view(tensor.shape))
            offset += tensor.numel()


def start(device_type: str) -> Distributed:
    """Join the processes torchrun started into the default process group (once) and describe this one."""
    launch = Distributed.from_environment()
    if not launch.enabled or dist.is_initialized():
        return current()
    if device_type == "cuda":
        torch.cuda.set_device(launch.local_rank)
        backend = "cpu:gloo,cuda:nccl"  # tensors through NCCL, picklable objects (records) through gloo
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=TIMEOUT)
    logger.info("process %d of %d (%s)", launch.rank, launch.world_size, backend)
    return current()


def current() -> Distributed:
    """The process group this process belongs to; a single process when none was started."""
    if not (dist.is_available() and dist.is_initialized()):
        return Distributed()
    launch = Distributed.from_environment()
    return Distributed(dist.get_rank(), dist.get_world_size(), launch.local_rank, launch.local_world_size)


def cleanup() -> None:
    """End the process group, if one was started."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
