"""Image classification: data splits, loss, top-1 evaluation."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .data import (FASHION_MNIST_DIR, Augment, DataError, EpochBatches, FolderImages, TensorImages, iterate_eval,
                   read_cifar, read_fashion_mnist, split_indices)

logger = logging.getLogger(__name__)

__all__ = ["ClassificationConfig", "ClassificationTask", "DATASETS"]

DATASETS = ("fashion_mnist", "cifar10", "cifar100", "image_folder")
_STATS = {  # per-channel mean / std of the training sets
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


@dataclass
class ClassificationConfig:
    """Classification data and training recipe.

    Args:
        dataset: one of `DATASETS`. `image_folder` reads `root/train` and `root/val` (ImageFolder layout).
        root: where the data lies (Fashion-MNIST: the Debian package's folder; CIFAR: torchvision's layout).
        image_size: network input size for `image_folder` (in-memory sets keep their native size).
        val_size: training images held out for the search's accuracy (the test set is only used in reports).
        train_size: train on a fixed random subset of this many images (0 = the whole training split).
        label_smoothing: of the cross-entropy loss (timm's LabelSmoothingCrossEntropy).
        calib_images: training images (un-augmented) used to recalibrate batch norm of a subnet.
        eval_images: score search candidates on the first N images of the val split (0 = all of it).
        test_images: the test split's first N images (0 = all of it). Every test metric of a run (the front, the
            finalised archs, INT8, the baselines) is then on these images; the smoke configs use it to run quickly.
        loader_workers: processes that build training batches ahead of the training (0 = the run's own process
            builds each when it is due). Image folders at 224 px need them on a GPU: one process decodes and
            augments a few hundred images a second, a GPU trains thousands (`scripts/bench_gpu.py --imagenet`
            measures both). The batches are the same with any number.
    """

    type: str = "classification"
    dataset: str = "fashion_mnist"
    root: str = FASHION_MNIST_DIR
    image_size: int = 224
    val_size: int = 5000
    train_size: int = 0
    batch_size: int = 128
    eval_batch_size: int = 1000
    crop_padding: int = 2
    hflip: bool = True
    random_erasing: float = 0.0
    auto_augment: Optional[str] = None
    label_smoothing: float = 0.1
    calib_images: int = 2000
    eval_images: int = 0
    test_images: int = 0
    loader_workers: int = 0

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise DataError(f"dataset: unknown {self.dataset!r}; valid: {', '.join(DATASETS)}")
        for name in ("val_size", "train_size", "calib_images", "eval_images", "test_images", "crop_padding",
                     "loader_workers"):
            if getattr(self, name) < 0:
                raise DataError(f"{name}: must be >= 0")
        if self.auto_augment and self.dataset != "image_folder":
            raise DataError("auto_augment: applies to image_folder data; in-memory data sets augment with "
                            "crop_padding, hflip and random_erasing")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise DataError("batch_size and eval_batch_size must be >= 1")


class ClassificationTask:
    """Splits, batches, loss and top-1 of a classification data set.

    The search ranks architectures by top-1 on `val` (held out from the training set); `test` is reported.
    """

    metric = "top1"
    scale = None  # its output is no image

    def __init__(self, config: ClassificationConfig, seed: int):
        if config.dataset not in DATASETS:
            raise DataError(f"unknown dataset {config.dataset!r}; valid: {', '.join(DATASETS)}")
        self.config = config
        train_full, self.test = self._load(config)
        train_idx, val_idx = split_indices(len(train_full), config.val_size, seed=seed)
        if config.train_size:
            if config.train_size > len(train_idx):
                raise DataError(f"train_size {config.train_size} exceeds the {len(train_idx)} training images")
            train_idx = np.sort(np.random.default_rng([seed, 2]).permutation(train_idx)[:config.train_size])
        if isinstance(train_full, TensorImages):  # folder sources augment with timm's per-sample transforms
            self.train = train_full.subset(train_idx, Augment(config.crop_padding, config.hflip, config.random_erasing))
        else:
            self.train = train_full.subset(train_idx)
        self.val = train_full.subset(val_idx)
        if config.test_images:
            if config.test_images > len(self.test):
                raise DataError(f"test_images {config.test_images} exceeds the {len(self.test)} test images")
            self.test = self.test.subset(np.arange(config.test_images))
        # un-augmented training images for batch-norm recalibration: a fixed sample, the same for every subnet
        calib_idx = np.random.default_rng([seed, 1]).permutation(len(train_idx))[:config.calib_images]
        self.calib = train_full.subset(train_idx[np.sort(calib_idx)])
        self.num_classes = self.num_outputs = train_full.num_classes
        self.input_shape = tuple(train_full.image_shape)
        self.train_batches = EpochBatches(self.train, config.batch_size, seed, workers=config.loader_workers)
        self._criterion = self._make_criterion(config.label_smoothing)
        logger.info("%s: %d train / %d val / %d test images, %d classes, input %s", config.dataset, len(self.train),
                    len(self.val), len(self.test), self.num_classes, "x".join(map(str, self.input_shape)))

    @staticmethod
    def _make_criterion(smoothing: float) -> nn.Module:
        from timm.loss import LabelSmoothingCrossEntropy

        return LabelSmoothingCrossEntropy(smoothing) if smoothing > 0 else nn.CrossEntropyLoss()

    @staticmethod
    def _load(config: ClassificationConfig):
        if config.dataset == "fashion_mnist":
            mean, std = _STATS["fashion_mnist"]
            train = TensorImages(*read_fashion_mnist(config.root, train=True), 10, mean, std)
            test = TensorImages(*read_fashion_mnist(config.root, train=False), 10, mean, std)
        elif config.dataset in ("cifar10", "cifar100"):
            n = 10 if config.dataset == "cifar10" else 100
            mean, std = _STATS[config.dataset]
            train = TensorImages(*read_cifar(config.root, True, n), n, mean, std)
            test = TensorImages(*read_cifar(config.root, False, n), n, mean, std)
        else:
            root = Path(config.root)
            for part in ("train", "val"):
                if not (root / part).is_dir():
                    raise DataError(f"image_folder dataset needs {root / part} (one sub-folder per class)")
            train = FolderImages(root / "train", config.image_size, auto_augment=config.auto_augment,
                                 random_erasing=config.random_erasing)
            test = FolderImages(root / "val", config.image_size)
        return train, test

    # ------------------------------------------------------------------------------------------- training
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._criterion(output, target)

    @staticmethod
    def distill_loss(output: torch.Tensor, teacher_output: torch.Tensor) -> torch.Tensor:
        """In-place distillation (BigNAS / OFA): cross-entropy against the largest subnet's soft labels."""
        return torch.sum(-F.softmax(teacher_output.detach(), dim=-1) * F.log_softmax(output, dim=-1), dim=-1).mean()

    def calibration_batches(self) -> Iterator[torch.Tensor]:
        for x, _ in iterate_eval(self.calib, self.config.eval_batch_size):
            yield x

    def ptq_samples(self, count: int) -> list[torch.Tensor]:
        """Single-image inputs that calibrate post-training quantization: the first `count` calibration images."""
        x, _ = self.calib.get_batch(np.arange(min(count, len(self.calib))), None)
        return list(x.split(1))

    def preprocessing(self) -> dict:
        """How a deployed model's input must be prepared (recorded next to exported models)."""
        if isinstance(self.test, TensorImages):
            return {"scale": "pixel / 255", "mean": list(self.test.mean), "std": list(self.test.std),
                    "input_shape": list(self.input_shape)}
        from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

        return {"scale": "pixel / 255", "mean": list(IMAGENET_DEFAULT_MEAN), "std": list(IMAGENET_DEFAULT_STD),
                "resize": "timm eval transform (resize, centre crop)", "input_shape": list(self.input_shape)}

    # ------------------------------------------------------------------------------------------- evaluation
    #: how many standard errors of the val split's sampling noise a network's top-1 must lie above a collapsed
    #: network's to have learned anything
    UNTRAINED_STANDARD_ERRORS = 2.0

    @torch.no_grad()
    def untrained_level(self) -> float:
        """The val top-1 at or below which a trained network has learned nothing: what answering the val split's
        most common class scores (a collapsed network's answer), plus `UNTRAINED_STANDARD_ERRORS` standard errors
        of a top-1 near it on that many images."""
        counts = torch.zeros(self.num_classes, dtype=torch.int64)
        for _, y in iterate_eval(self.val, self.config.eval_batch_size, self.config.eval_images or None):
            counts += torch.bincount(y, minlength=self.num_classes)
        share, images = float(counts.max()) / float(counts.sum()), float(counts.sum())
        return 100.0 * (share + self.UNTRAINED_STANDARD_ERRORS * math.sqrt(share * (1 - share) / images))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "val", all_images: bool = False) -> float:
        """Top-1 accuracy in percent on `split` ('val' or 'test'); val is cut to `eval_images` unless
        `all_images`."""
        source = {"val": self.val, "test": self.test}[split]
        model.eval()
        correct = total = 0
        limit = (self.config.eval_images or None) if split == "val" and not all_images else None
        for x, y in iterate_eval(source, self.config.eval_batch_size, limit):
            correct += int((model(x).argmax(dim=1) == y).sum())
            total += len(y)
        return 100.0 * correct / total

    def scores(self, model: nn.Module, split: str = "val") -> dict[str, float]:
        """Top-1 on `split`: the one figure a classification reports."""
        return {self.metric: self.evaluate(model, split)}
