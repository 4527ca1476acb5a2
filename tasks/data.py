"""Image data sources and deterministic, resumable batch iteration.

Every source is a map-style dataset that returns whole batches (`get_batch(indices, seed)`), so that
augmentation randomness is drawn from a seed derived from (run seed, epoch, step): a run resumed in the middle
of an epoch sees exactly the batches an uninterrupted run would have seen, with any number of loader workers.
"""
from __future__ import annotations

import gzip
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = ["DataError", "BatchSource", "TensorImages", "FolderImages", "read_fashion_mnist", "read_cifar",
           "split_indices", "EpochBatches", "iterate_eval", "batch_seed", "Augment", "FASHION_MNIST_DIR", "to_device"]

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


class DataError(ValueError):
    """Data cannot be read: a missing folder or file, an unreadable format, an empty split."""


class BatchSource(Protocol):
    """A dataset that builds a whole batch at once."""

    num_classes: int

    def __len__(self) -> int: ...

    def get_batch(self, indices: np.ndarray, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (float, N x C x H x W, normalised) and labels of `indices`; augmented when seed is not None."""


def batch_seed(seed: int, epoch: int, step: int) -> int:
    """A 63-bit seed for one batch, independent of everything drawn before it."""
    return int(np.random.SeedSequence([seed, epoch, step]).generate_state(1, dtype=np.uint64)[0] >> 1)


def to_device(batch: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A batch made on the CPU, on `device`: to CUDA from pinned (page-locked) memory with a non-blocking copy, as
    torch's DataLoader with `pin_memory` does; on the CPU the batch itself."""
    device = torch.device(device)
    if device.type == "cpu":
        return batch
    if device.type == "cuda" and not batch.is_pinned():
        batch = batch.pin_memory()
    return batch.to(device, non_blocking=True)


# ---------------------------------------------------------------------------------------------------- readers
def _read_idx(path: Path) -> np.ndarray:
    """Read a (optionally gzipped) IDX file: the format of MNIST and Fashion-MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    payload = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if payload.size != int(np.prod(dims)):
        raise DataError(f"{path} is truncated: expected {int(np.prod(dims))} values, found {payload.size}")
    return payload.reshape(tuple(dims))


def read_fashion_mnist(root: str | Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST from the Debian package's gzipped IDX files (or unzipped ones) under `root`.

    Returns uint8 images (N, 1, 28, 28) and int64 labels.
    """
    root = Path(root)
    prefix = "train" if train else "t10k"
    found = {}
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        candidates = [root / f"{prefix}-{kind}.gz", root / f"{prefix}-{kind}", root / "raw" / f"{prefix}-{kind}.gz",
                      root / "FashionMNIST" / "raw" / f"{prefix}-{kind}"]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise DataError(f"Fashion-MNIST not found in {root} (no {prefix}-{kind}[.gz]); install it with "
                            "'sudo apt-get install dataset-fashion-mnist' (files land in "
                            f"{FASHION_MNIST_DIR}) or set task.root to a folder holding the IDX files")
        found[kind] = _read_idx(path)
    images, labels = found["images-idx3-ubyte"], found["labels-idx1-ubyte"]
    if images.ndim != 3 or len(images) != len(labels):
        raise DataError(f"Fashion-MNIST files in {root} disagree: {images.shape} images, {labels.shape} labels")
    return images[:, None].copy(), labels.astype(np.int64)


def read_cifar(root: str | Path, train: bool, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10/100 from a local root in torchvision's layout (the extracted python batches); never downloads."""
    from torchvision.datasets import CIFAR10, CIFAR100

    cls = CIFAR10 if num_classes == 10 else CIFAR100
    try:
        ds = cls(str(root), train=train, download=False)
    except RuntimeError as exc:
        raise DataError(f"CIFAR-{num_classes} not found under {root}: {exc} (extract the python version of the "
                        f"archive there, e.g. {root}/{cls.base_folder})") from exc
    return np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)), np.asarray(ds.targets, dtype=np.int64)


def split_indices(n: int, val_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random split of range(n) into (train, val) indices."""
    if not 0 <= val_size < n:
        raise DataError(f"val_size must be in [0, {n}), got {val_size}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[val_size:]), np.sort(perm[:val_size])


# ---------------------------------------------------------------------------------------------------- sources
@dataclass
class Augment:
    """Batch augmentation for small images held in memory.

    Args:
        crop_padding: random crop of the original size from the image zero-padded by this many pixels.
        hflip: random horizontal flip with probability 0.5.
        random_erasing: probability of timm's RandomErasing per image (0 disables it).
    """

    crop_padding: int = 0
    hflip: bool = False
    random_erasing: float = 0.0


def _random_erasing(probability: float):
    if probability <= 0:
        return None
    from timm.data import RandomErasing

    return RandomErasing(probability=probability, mode="pixel", device="cpu")


class TensorImages:
    """Images held in memory as uint8 (N, C, H, W), normalised per channel on the fly."""

    def __init__(self, images, labels, num_classes: int, mean, std, augment: Augment | None = None):
        if len(images) == 0:
            raise DataError("empty image set")
        self.images = torch.as_tensor(images).contiguous()
        self.labels = torch.as_tensor(labels).contiguous()
        self.num_classes = num_classes
        self.mean, self.std = tuple(mean), tuple(std)
        self._mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        self._std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        self.augment = augment or Augment()
        self._eraser = _random_erasing(self.augment.random_erasing)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])

    def subset(self, indices: np.ndarray, augment: Augment | None = None) -> "TensorImages":
        idx = torch.as_tensor(np.asarray(indices))
        return TensorImages(self.images[idx], self.labels[idx], self.num_classes, self.mean, self.std,
                            augment if augment is not None else self.augment)

    def get_batch(self, indices: np.ndarray, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(indices))
        x = self.images[idx].float().div_(255.0)
        if seed is not None:
            x = self._augment(x, seed)
        x = (x - self._mean) / self._std
        if seed is not None and self._eraser is not None:
            random.seed(seed)  # timm's RandomErasing draws from Python's and torch's global RNGs
            torch.manual_seed(seed)
            x = self._eraser(x)
        return x, self.labels[idx]

    def _augment(self, x: torch.Tensor, seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        n, c, h, w = x.shape
        pad = self.augment.crop_padding
        if pad > 0:
            padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
            dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
            dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
            rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None]
            cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :]
            x = padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]
        if self.augment.hflip:
            flip = torch.rand(n, generator=gen) < 0.5
            x[flip] = x[flip].flip(-1)
        return x


class FolderImages:
    """An image folder in torchvision's ImageFolder layout (one sub-folder per class), read per batch.

    Training batches use timm's `create_transform` (random-resized crop, flip, optional RandAugment / random
    erasing), seeded per batch; evaluation uses timm's resize + centre crop.
    """

    def __init__(self, root: str | Path, image_size: int, auto_augment: str | None = None,
                 random_erasing: float = 0.0, mean=None, std=None):
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder

        root = Path(root)
        if not root.is_dir():
            raise DataError(f"image folder {root} does not exist")
        try:
            self.folder = ImageFolder(str(root))
        except (FileNotFoundError, RuntimeError) as exc:
            raise DataError(f"cannot read image folder {root}: {exc}") from exc
        self.num_classes = len(self.folder.classes)
        first_of_class = {label: path for path, label in reversed(self.folder.samples)}
        for path in first_of_class.values():  # a folder of non-images fails now, not after hours of training
            self._read(path)
        kwargs = {} if mean is None else {"mean": tuple(mean), "std": tuple(std)}
        self.train_transform = create_transform(image_size, is_training=True, auto_augment=auto_augment,
                                                re_prob=random_erasing, **kwargs)
        self.eval_transform = create_transform(image_size, is_training=False, **kwargs)
        self.image_shape = (3, image_size, image_size)

    def __len__(self) -> int:
        return len(self.folder)

    def subset(self, indices: np.ndarray) -> "_FolderSubset":
        return _FolderSubset(self, np.asarray(indices))

    def get_batch(self, indices: np.ndarray, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        if seed is not None:
            random.seed(seed)
            torch.manual_seed(seed)
        transform = self.train_transform if seed is not None else self.eval_transform
        images, labels = [], []
        for i in indices:
            path, label = self.folder.samples[int(i)]
            images.append(transform(self._read(path)))
            labels.append(label)
        return torch.stack(images), torch.tensor(labels, dtype=torch.int64)

    @staticmethod
    def _read(path: str):
        from PIL import Image

        try:
            with Image.open(path) as image:
                return image.convert("RGB")
        except OSError as exc:  # PIL's UnidentifiedImageError included
            raise DataError(f"cannot read image {path}: {exc}") from exc


class _FolderSubset:
    def __init__(self, parent: FolderImages, indices: np.ndarray):
        self.parent, self.indices = parent, indices
        self.num_classes, self.image_shape = parent.num_classes, parent.image_shape

    def __len__(self) -> int:
        return len(self.indices)

    def get_batch(self, indices, seed):
        return self.parent.get_batch(self.indices[np.asarray(indices)], seed)


# ---------------------------------------------------------------------------------------------------- batching
class EpochBatches:
    """Deterministic batches of one epoch: a permutation drawn from (seed, epoch), resumable at any step.

    With `workers` > 0 the batches are built ahead in that many processes (torch's DataLoader, pinned memory on a
    GPU machine), for sources whose batches cost real work (JPEG decoding and augmentation at 224 px); each batch is
    still drawn from its own seed, so the batches are the same with any number of workers."""

    def __init__(self, source: BatchSource, batch_size: int, seed: int, drop_last: bool = True, workers: int = 0):
        if batch_size < 1:
            raise DataError(f"batch_size must be >= 1, got {batch_size}")
        self.source, self.batch_size, self.seed, self.drop_last = source, batch_size, seed, drop_last
        self.workers = workers

    def steps_per_epoch(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __call__(self, epoch: int, start_step: int = 0) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Yield (step, images, labels) from `start_step` to the end of `epoch`."""
        epoch_batches = _SeededBatches(self, epoch, start_step)
        batches = (epoch_batches[i] for i in range(len(epoch_batches)))
        if self.workers and len(epoch_batches):
            from torch.utils.data import DataLoader

            batches = DataLoader(epoch_batches, batch_size=None, num_workers=self.workers,
                                 pin_memory=torch.cuda.is_available(), prefetch_factor=4)
        for step, (x, y) in zip(range(start_step, self.steps_per_epoch()), batches):
            yield step, x, y


class _SeededBatches:
    """The batches of one epoch from `start_step` on, as a map-style dataset (item i: batch start_step + i)."""

    def __init__(self, batches: EpochBatches, epoch: int, start_step: int):
        self.source, self.batch_size, self.seed, self.epoch = batches.source, batches.batch_size, batches.seed, epoch
        self.start_step, self.steps = start_step, batches.steps_per_epoch()
        self.perm = np.random.default_rng([batches.seed, epoch]).permutation(len(batches.source))

    def __len__(self) -> int:
        return max(0, self.steps - self.start_step)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        step = self.start_step + i
        idx = self.perm[step * self.batch_size:(step + 1) * self.batch_size]
        return self.source.get_batch(idx, batch_seed(self.seed, self.epoch, step))


def iterate_eval(source: BatchSource, batch_size: int, limit: int | None = None):
    """Un-augmented batches in index order (optionally only the first `limit` samples)."""
    n = len(source) if limit is None else min(limit, len(source))
    for start in range(0, n, batch_size):
        yield source.get_batch(np.arange(start, min(start + batch_size, n)), None)
