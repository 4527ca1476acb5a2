"""Trained reference baselines shared by runs: their weights and scores, keyed by everything that determines them.

An entry is one file `<network>-<digest>.pt` in the cache folder (`$VPUNAS_CACHE` when set and not blank, else
`~/.cache/vpunas/baselines`), written atomically: {"key", "model" (state dict), "scores", "steps"}. The key is the
network, its width and input shape and classes, the task settings that change the data or the scores, the
training recipe, the seed and the torchvision version; the digest names the file and the stored key is checked on
reading. An entry that cannot be read or does not fit the network is logged as a warning and trained again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

import torch.nn as nn

from ..errors import RunDirError
from ..rundir import atomic_torch_save, load_checkpoint
from ..training.supernet_training import SANDWICH_SETTINGS

logger = logging.getLogger(__name__)

__all__ = ["CACHE_ENV", "cache_dir", "cache_key", "CachedBaseline", "BaselineCache"]

CACHE_ENV = "VPUNAS_CACHE"
#: bumped when what an entry means changes (its layout, the adaptation of the networks)
FORMAT = 1
#: task settings that change neither the training batches nor the scores of a trained network
_TASK_IRRELEVANT = {"eval_batch_size", "calib_images", "loader_workers"}
#: recipe settings the one-network trainer does not use (sandwich rule) or that change how, not what, it trains
_TRAIN_IRRELEVANT = {"checkpoint_every", "cuda_graphs", *SANDWICH_SETTINGS}


def cache_dir() -> Path:
    value = os.environ.get(CACHE_ENV, "").strip()
    return Path(value) if value else Path.home() / ".cache" / "vpunas" / "baselines"


def cache_key(network: dict, input_shape, num_classes: int, task_config, train_config, seed: int) -> dict:
    """What determines a trained reference network and its scores; `network` is e.g. {"network": "resnet18"}
    or {"network": "mobilenet_v2", "width": 0.35}; the configs are the run's dataclasses."""
    import torchvision

    task = {k: v for k, v in dataclasses.asdict(task_config).items() if k not in _TASK_IRRELEVANT}
    if not task.get("test_images"):  # the whole test split, as entries made before the setting existed say
        task.pop("test_images", None)
    train = {k: v for k, v in dataclasses.asdict(train_config).items() if k not in _TRAIN_IRRELEVANT}
    key = {"format": FORMAT, **network, "input_shape": list(input_shape), "num_classes": num_classes,
           "task": task, "train": train, "seed": seed, "torchvision": torchvision.__version__}
    return json.loads(json.dumps(key))  # plain JSON values, as an entry stores it


@dataclasses.dataclass
class CachedBaseline:
    model: nn.Module
    scores: dict
    steps: int


class BaselineCache:
    """The cache folder (default `cache_dir()`)."""

    def __init__(self, folder: Path | None = None):
        self.folder = Path(folder) if folder is not None else cache_dir()

    def path(self, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        return self.folder / f"{key['network']}-{digest}.pt"

    def load(self, key: dict, model: nn.Module) -> CachedBaseline | None:
        """The entry of `key` with its weights loaded into `model` (a fresh network of the key), or None when
        there is none or it is damaged (a warning)."""
        path = self.path(key)
        try:
            entry = load_checkpoint(path)
        except FileNotFoundError:
            return None
        except RunDirError as exc:
            logger.warning("baseline cache: %s; training the network again", exc)
            return None
        try:
            if entry["key"] != key:
                raise ValueError("its key is not the one its name stands for")
            model.load_state_dict(entry["model"])
            scores, steps = dict(entry["scores"]), int(entry["steps"])
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
            logger.warning("baseline cache: %s does not fit (%s); training the network again", path,
                           str(exc).splitlines()[0][:160])
            return None
        return CachedBaseline(model, scores, steps)

    def store(self, key: dict, model: nn.Module, scores: dict, steps: int) -> Path:
        path = self.path(key)
        atomic_torch_save({"key": key, "model": model.state_dict(), "scores": scores, "steps": steps}, path)
        return path
