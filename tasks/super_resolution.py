"""Single-image super-resolution: HR images -> bicubic LR, random patch training, PSNR / SSIM as the literature reports.

Data. HR images are read from folders (DIV2K-style training folder, Set5/Set14/B100/Urban100-style held-out
folders) or, offline, from the real photos bundled with scikit-image (`SKIMAGE_SPLITS`). Every HR image is
converted to 8-bit RGB (grayscale replicated, alpha dropped, 16-bit scaled), cropped at the bottom / right to a
multiple of the scale ("mod crop"), and downscaled by MATLAB's `imresize(HR, 1/scale)` (bicubic, a = -0.5, kernel
widened by the scale: antialiasing), the degradation DIV2K's LR images and every bicubic SR benchmark use.
Images are held in memory as uint8 (DIV2K's 800 training images at x2: about 7 GB HR plus 1.7 GB LR).

Training samples random LR patches with the aligned HR patches, each under one of the 8 flips / rotations, all
drawn from the batch seed (so a resumed run sees the same batches); the loss is L1 (EDSR).

Evaluation follows the SR literature (EDSR, RCAN, BasicSR): the whole LR image goes through the network, the
output is clamped and quantised to 8 bits, both images are converted to the Y channel of ITU-R BT.601
(`rgb_to_y`), `scale` pixels are shaved off every border, and PSNR (peak 255) and SSIM (Wang et al. 2004:
Gaussian window sigma 1.5, K1 = 0.01, K2 = 0.03) are averaged over the images.

Network input and target are `pixel / 255 - RGB_MEAN` (EDSR's mean shift, DIV2K's mean), so networks are pure
convolutions; `preprocessing()` records this for exported models.
"""
from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .data import DataError, EpochBatches

logger = logging.getLogger(__name__)

__all__ = ["SuperResolutionConfig", "SuperResolutionTask", "SrImage", "PatchSource", "BicubicUpsampler",
           "imresize", "resize_matrix", "rgb_to_y", "psnr", "ssim", "shave", "load_rgb", "read_image_folder",
           "prepare_images", "SKIMAGE_SPLITS", "RGB_MEAN", "IMAGE_SUFFIXES"]

#: the offline default: real photos bundled with scikit-image 0.26 (files in skimage/data), a fixed split.
#: Synthetic or degraded pictures (color, phantom, logo, chessboards, clock_motion, ...) are left out.
SKIMAGE_SPLITS = {
    "train": ("motorcycle_left.png", "motorcycle_right.png", "hubble_deep_field.jpg", "retina.jpg", "ihc.png",
              "camera.png", "brick.png", "grass.png", "gravel.png", "moon.png", "coins.png"),
    "val": ("chelsea.png", "coffee.png"),       # held out: the search's metric
    "test": ("astronaut.png", "rocket.jpg"),    # held out: reported only (front and baselines)
}
#: DIV2K's RGB mean (EDSR's MeanShift), subtracted from inputs and targets
RGB_MEAN = (0.4488, 0.4371, 0.4040)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
SSIM_WINDOW = 11  # the Gaussian window's side (sigma 1.5, truncated at 3.5 sigma)


# ---------------------------------------------------------------------------------------------------- resizing
def _cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with a = -0.5 (MATLAB's 'bicubic')."""
    ax = np.abs(x)
    ax2, ax3 = ax ** 2, ax ** 3
    return ((1.5 * ax3 - 2.5 * ax2 + 1) * (ax <= 1)
            + (-0.5 * ax3 + 2.5 * ax2 - 4 * ax + 2) * ((ax > 1) & (ax <= 2)))


@functools.lru_cache(maxsize=64)
def resize_matrix(in_length: int, out_length: int, scale: float, antialias: bool = True) -> np.ndarray:
    """The (out_length, in_length) matrix of MATLAB's bicubic `imresize` along one axis.

    Output pixel i (1-based) samples the input at u = i / scale + (1 - 1 / scale) / 2; when downscaling with
    antialiasing the kernel is stretched by 1 / scale (h(x) = scale * cubic(scale * x), width 4 / scale). Weights
    are normalised to sum to 1, and taps outside the image are mirrored with the edge pixel repeated
    (MATLAB's index rule [1..n, n..1]).
    """
    width = 4.0
    if scale < 1 and antialias:
        kernel = lambda x: scale * _cubic(scale * x)
        width /= scale
    else:
        kernel = _cubic
    u = np.arange(1, out_length + 1) / scale + 0.5 * (1 - 1 / scale)
    left = np.floor(u - width / 2)
    taps = int(np.ceil(width)) + 2
    indices = left[:, None] + np.arange(taps)[None, :]            # 1-based, may fall outside [1, in_length]
    weights = kernel(u[:, None] - indices)
    weights /= weights.sum(axis=1, keepdims=True)
    mirror = np.concatenate([np.arange(in_length), np.arange(in_length)[::-1]])
    columns = mirror[np.mod(indices.astype(np.int64) - 1, 2 * in_length)]
    matrix = np.zeros((out_length, in_length))
    np.add.at(matrix, (np.repeat(np.arange(out_length), taps), columns.ravel()), weights.ravel())
    matrix.setflags(write=False)
    return matrix


def imresize(image: np.ndarray, scale: float, antialias: bool = True) -> np.ndarray:
    """MATLAB's `imresize(image, scale)` with the default bicubic kernel, for H x W or H x W x C arrays.

    The output side is ceil(scale * side). Axes are resized one after the other, rows first (MATLAB resizes the
    axis with the smaller scale first; both are equal here). A uint8 image is rounded and clipped to uint8 after
    each axis, as MATLAB's uint8 path does; float images stay float64.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    is_uint8 = image.dtype == np.uint8
    out = np.asarray(image, dtype=np.float64)
    for axis in (0, 1):
        n = out.shape[axis]
        matrix = resize_matrix(n, int(np.ceil(scale * n - 1e-9)), float(scale), antialias)
        out = np.moveaxis(np.tensordot(matrix, out, axes=([1], [axis])), 0, axis)
        if is_uint8:
            out = np.clip(np.floor(out + 0.5), 0, 255)
    return out.astype(np.uint8) if is_uint8 else out


class BicubicUpsampler(nn.Module):
    """MATLAB-style bicubic upscaling of an N x C x H x W batch by an integer `scale`: the bicubic SR baseline.

    The same kernel as `imresize` (no antialiasing is involved when upscaling), applied as two matrix products.
    """

    def __init__(self, scale: int):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        rows = torch.tensor(resize_matrix(h, h * self.scale, float(self.scale)), dtype=x.dtype)
        cols = torch.tensor(resize_matrix(w, w * self.scale, float(self.scale)), dtype=x.dtype)
        return rows @ x @ cols.T


# ---------------------------------------------------------------------------------------------------- metrics
def rgb_to_y(image: np.ndarray) -> np.ndarray:
    """Luma of ITU-R BT.601 for an H x W x 3 RGB image in [0, 255]: Y = 16 + (65.481 R + 128.553 G + 24.966 B) / 255.

    Returns float64 Y in [16, 235] (not rounded, as EDSR's and BasicSR's evaluation code computes it).
    """
    image = np.asarray(image, dtype=np.float64)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"expected an H x W x 3 RGB image, got shape {image.shape}")
    return 16.0 + image @ np.array([65.481, 128.553, 24.966]) / 255.0


def shave(image: np.ndarray, border: int) -> np.ndarray:
    """Drop `border` pixels from every side (the SR literature shaves `scale` pixels before measuring)."""
    return image[border:image.shape[0] - border, border:image.shape[1] - border] if border else image


def psnr(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB; identical images give inf."""
    if a.shape != b.shape:
        raise ValueError(f"PSNR of images of different shapes {a.shape} and {b.shape}")
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(data_range ** 2 / mse)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """SSIM of two single-channel images as Wang et al. define it (scikit-image with the paper's settings)."""
    from skimage.metrics import structural_similarity

    return float(structural_similarity(np.asarray(a, np.float64), np.asarray(b, np.float64), data_range=data_range,
                                       gaussian_weights=True, sigma=1.5, use_sample_covariance=False))


# ---------------------------------------------------------------------------------------------------- images
def load_rgb(path: str | Path) -> np.ndarray:
    """An image file as H x W x 3 uint8 RGB: grayscale replicated, alpha dropped, other bit depths rescaled."""
    from skimage import io, util

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. PIL's warnings about odd metadata
            image = io.imread(str(path))
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    elif image.ndim == 3 and image.shape[2] in (1, 2):  # gray (+ alpha)
        image = np.repeat(image[:, :, :1], 3, axis=2)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, :3]
    if image.ndim != 3 or image.shape[2] != 3:
        raise DataError(f"{path}: not a 2-D grayscale or RGB image (shape {image.shape})")
    if image.dtype != np.uint8:
        try:
            image = util.img_as_ubyte(image)
        except ValueError as exc:
            raise DataError(f"{path}: cannot convert pixels of type {image.dtype} to 8 bits: {exc}") from exc
    return np.ascontiguousarray(image)


def read_image_folder(folder: str | Path) -> list[Path]:
    """The image files of `folder` (not its sub-folders), sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"image folder {folder} does not exist")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"image folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return files


@dataclass
class SrImage:
    """One HR image (mod-cropped, H x W x 3 uint8) and its bicubic LR version."""

    name: str
    hr: np.ndarray
    lr: np.ndarray


def prepare_images(paths: list[Path], scale: int, min_lr_side: int, purpose: str) -> list[SrImage]:
    """Load, mod-crop and downscale `paths`; images whose LR side would be under `min_lr_side` are skipped
    with a warning. Raises DataError when nothing is left."""
    images = []
    for path in paths:
        hr = load_rgb(path)
        h, w = hr.shape[0] // scale * scale, hr.shape[1] // scale * scale
        if min(h, w) // scale < min_lr_side:
            logger.warning("%s: skipping %s (%dx%d): its x%d LR image would be smaller than %d pixels", purpose,
                           path.name, hr.shape[1], hr.shape[0], scale, min_lr_side)
            continue
        hr = np.ascontiguousarray(hr[:h, :w])
        images.append(SrImage(path.stem, hr, imresize(hr, 1.0 / scale)))
    if not images:
        raise DataError(f"{purpose}: no usable image among {len(paths)} (each needs an LR side of at least "
                        f"{min_lr_side} pixels at x{scale})")
    return images


def _to_tensor(images: np.ndarray) -> torch.Tensor:
    """N x H x W x 3 uint8 -> N x 3 x H x W float, mean-shifted."""
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)
    return x - torch.tensor(RGB_MEAN).view(1, 3, 1, 1)


class PatchSource:
    """Training pairs: random aligned LR / HR patches under random flips and 90-degree rotations.

    Sample i of an epoch comes from image i mod len(images); crop positions and the 8-way dihedral transform
    are drawn from the batch seed. `len` is the number of patches per epoch.
    """

    num_classes = 0

    def __init__(self, images: list[SrImage], scale: int, patch_size: int, patches_per_epoch: int):
        self.images, self.scale, self.patch, self.length = images, scale, patch_size, patches_per_epoch

    def __len__(self) -> int:
        return self.length

    def get_batch(self, indices: np.ndarray, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(LR patches, HR patches) as N x 3 x p x p and N x 3 x sp x sp; seed None: centre crops, untransformed."""
        rng = np.random.default_rng(seed)
        p, s = self.patch, self.scale
        lrs, hrs = [], []
        for i in np.asarray(indices):
            image = self.images[int(i) % len(self.images)]
            h, w = image.lr.shape[:2]
            if seed is None:
                y, x, t = (h - p) // 2, (w - p) // 2, 0
            else:
                y, x, t = int(rng.integers(h - p + 1)), int(rng.integers(w - p + 1)), int(rng.integers(8))
            lr = image.lr[y:y + p, x:x + p]
            hr = image.hr[s * y:s * (y + p), s * x:s * (x + p)]
            if t >= 4:
                lr, hr = lr[:, ::-1], hr[:, ::-1]
            lrs.append(np.rot90(lr, t % 4))
            hrs.append(np.rot90(hr, t % 4))
        return _to_tensor(np.stack(lrs)), _to_tensor(np.stack(hrs))


# ---------------------------------------------------------------------------------------------------- the task
@dataclass
class SuperResolutionConfig:
    """Super-resolution data and evaluation.

    Args:
        scale: upscaling factor, 2, 3 or 4 (must match the space's).
        dataset: `skimage` (offline default: `SKIMAGE_SPLITS`) or `folders` (HR images in `root`/`train_dir`,
            `root`/`val_dir`, `root`/`test_dir`, e.g. DIV2K_train_HR, DIV2K_valid_HR, benchmark/Set14/HR).
        root: base folder of the three folders (relative to the config file; empty: the working directory);
            absolute folders ignore it.
        train_dir / val_dir / test_dir: HR image folders; `val` ranks archs in the search, `test` is reported.
        patch_size: LR patch side for training (the HR patch is `scale` times larger).
        batch_size: patches per step.
        epoch_patches: patches per epoch.
        deploy_size: (H, W) of the LR frame at which latency is costed: [360, 640] is a 1280x720 output at x2.
        val_crop: centre-crop the val images (the search's metric, evaluated for every arch) to at most this
            side, to make the search cheaper; 0 = whole images. Test images are always whole.
    """

    type: str = "super_resolution"
    scale: int = 2
    dataset: str = "skimage"
    root: str = ""
    train_dir: str = ""
    val_dir: str = ""
    test_dir: str = ""
    patch_size: int = 24
    batch_size: int = 16
    epoch_patches: int = 1600
    deploy_size: list[int] = field(default_factory=lambda: [360, 640])
    val_crop: int = 0

    def __post_init__(self):
        if self.scale not in (2, 3, 4):
            raise DataError(f"scale: must be 2, 3 or 4, got {self.scale}")
        if self.dataset not in ("skimage", "folders"):
            raise DataError(f"dataset: unknown {self.dataset!r}; valid: skimage, folders")
        if self.dataset == "folders":
            for key in ("train_dir", "val_dir", "test_dir"):
                if not getattr(self, key):
                    raise DataError(f"{key}: needed with dataset 'folders' (a folder of HR images)")
        if self.patch_size < 4:
            raise DataError(f"patch_size: must be >= 4, got {self.patch_size}")
        if self.batch_size < 1 or self.epoch_patches < self.batch_size:
            raise DataError("batch_size must be >= 1 and epoch_patches >= batch_size")
        if len(self.deploy_size) != 2 or min(self.deploy_size) < 1:
            raise DataError(f"deploy_size: expected [H, W] of positive sizes, got {list(self.deploy_size)}")
        if self.val_crop and self.val_crop < 2 * self.scale + SSIM_WINDOW:
            raise DataError(f"val_crop: must be 0 or >= {2 * self.scale + SSIM_WINDOW} at x{self.scale}")


class SuperResolutionTask:
    """Splits, patches, L1 loss and PSNR (Y, shaved) of single-image super-resolution.

    `input_shape` is the deployment LR frame (latency); networks are fully convolutional and run on any size.
    """

    metric = "psnr"
    num_classes = 0  # its outputs are no classes

    def __init__(self, config: SuperResolutionConfig, seed: int):
        self.config, self.scale, self.seed = config, config.scale, seed
        paths = self._paths(config)
        # held-out images need a border to shave and room for the SSIM window
        min_eval = -(-(2 * config.scale + SSIM_WINDOW) // config.scale)
        self.train = PatchSource(prepare_images(paths["train"], config.scale, config.patch_size, "train"),
                                 config.scale, config.patch_size, config.epoch_patches)
        self.val = self._centre_crop(prepare_images(paths["val"], config.scale, min_eval, "val"), config.val_crop)
        self.test = prepare_images(paths["test"], config.scale, min_eval, "test")
        self.num_outputs = 3
        self.input_shape = (3, int(config.deploy_size[0]), int(config.deploy_size[1]))
        self.train_batches = EpochBatches(self.train, config.batch_size, seed)
        self._bicubic_psnr: float | None = None
        logger.info("super-resolution x%d (%s): %d train / %d val / %d test images; %d patches of %d px per epoch",
                    config.scale, config.dataset, len(self.train.images), len(self.val), len(self.test),
                    config.epoch_patches, config.patch_size)

    @staticmethod
    def _paths(config: SuperResolutionConfig) -> dict[str, list[Path]]:
        if config.dataset == "skimage":
            import skimage.data

            folder = Path(skimage.data.__file__).parent
            missing = [n for names in SKIMAGE_SPLITS.values() for n in names if not (folder / n).is_file()]
            if missing:
                raise DataError(f"scikit-image's bundled photos {missing} are missing from {folder}")
            return {split: [folder / n for n in names] for split, names in SKIMAGE_SPLITS.items()}
        root = Path(config.root) if config.root else Path.cwd()
        return {split: read_image_folder(root / getattr(config, f"{split}_dir")) for split in ("train", "val", "test")}

    def _centre_crop(self, images: list[SrImage], crop: int) -> list[SrImage]:
        """Centre crops of at most `crop` HR pixels a side, on the scale's grid; the LR crop is cut from the LR
        image of the whole photo (not a downscaled crop, which would differ at its borders)."""
        s = self.scale
        crop = crop // s * s
        if not crop:
            return images
        out = []
        for im in images:
            (h, w), ch, cw = im.hr.shape[:2], min(im.hr.shape[0], crop), min(im.hr.shape[1], crop)
            y, x = (h - ch) // 2 // s * s, (w - cw) // 2 // s * s
            out.append(SrImage(im.name, np.ascontiguousarray(im.hr[y:y + ch, x:x + cw]),
                               np.ascontiguousarray(im.lr[y // s:(y + ch) // s, x // s:(x + cw) // s])))
        return out

    # ------------------------------------------------------------------------------------------- training
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if output.shape != target.shape:
            raise DataError(f"network output {tuple(output.shape[1:])} does not match the HR patch "
                            f"{tuple(target.shape[1:])}: the space's scale must equal task.scale ({self.scale})")
        return F.l1_loss(output, target)

    @staticmethod
    def distill_loss(output: torch.Tensor, teacher_output: torch.Tensor) -> torch.Tensor:
        """In-place distillation: L1 to the largest subnet's output."""
        return F.l1_loss(output, teacher_output.detach())

    def calibration_batches(self) -> Iterator[torch.Tensor]:
        """Nothing: EDSR-style networks have no batch norm to recalibrate."""
        return iter(())

    def ptq_samples(self, count: int) -> list[torch.Tensor]:
        """Single-image inputs that calibrate post-training quantization: `count` LR training patches, drawn from
        the run's seed."""
        lr, _ = self.train.get_batch(np.arange(count), self.seed)
        return list(lr.split(1))

    def preprocessing(self) -> dict:
        """How a deployed model's input must be prepared and its output read back."""
        return {"scale": "pixel / 255", "mean": list(RGB_MEAN), "std": [1.0, 1.0, 1.0],
                "output": "add mean, clamp to [0, 1], multiply by 255", "upscale": self.scale,
                "input_shape": list(self.input_shape)}

    # ------------------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def super_resolve(self, model: nn.Module, image: SrImage) -> np.ndarray:
        """The network's 8-bit RGB output (H x W x 3 uint8) for one LR image."""
        out = model(_to_tensor(image.lr[None]))
        if tuple(out.shape[-2:]) != image.hr.shape[:2]:
            raise DataError(f"network output {tuple(out.shape[-2:])} for {image.name} does not match the HR image "
                            f"{image.hr.shape[:2]}: the space's scale must equal task.scale ({self.scale})")
        out = (out[0] + torch.tensor(RGB_MEAN).view(3, 1, 1)).clamp_(0, 1).mul_(255).round_()
        return out.permute(1, 2, 0).to(torch.uint8).numpy()

    def scores(self, model: nn.Module, split: str = "val", with_ssim: bool = True) -> dict[str, float]:
        """Mean PSNR (dB) and SSIM over `split`, on Y with `scale` pixels shaved."""
        images = {"val": self.val, "test": self.test}[split]
        model.eval()
        psnrs, ssims = [], []
        for image in images:
            sr = shave(rgb_to_y(self.super_resolve(model, image)), self.scale)
            hr = shave(rgb_to_y(image.hr), self.scale)
            psnrs.append(psnr(sr, hr))
            if with_ssim:
                ssims.append(ssim(sr, hr))
        return {"psnr": float(np.mean(psnrs)), **({"ssim": float(np.mean(ssims))} if with_ssim else {})}

    def evaluate(self, model: nn.Module, split: str = "val", all_images: bool = True) -> float:
        """Mean PSNR in dB on `split` ('val' or 'test'), Y channel, border of `scale` pixels shaved (every split
        is always scored whole: `all_images` is accepted for the common task interface)."""
        return self.scores(model, split, with_ssim=False)["psnr"]

    def untrained_level(self) -> float:
        """The val PSNR at or below which a trained network has learned nothing: bicubic upscaling's, which a
        network with a bicubic skip and an untrained (zero) body returns, and a diverged one falls below."""
        if self._bicubic_psnr is None:
            self._bicubic_psnr = self.evaluate(self.bicubic_model())
        return self._bicubic_psnr

    def bicubic_model(self) -> nn.Module:
        """The bicubic baseline as a network: MATLAB-style bicubic upscaling of the (mean-shifted) LR input.

        Bicubic weights sum to 1, so upscaling the mean-shifted input and adding the mean back equals upscaling
        the image itself.
        """
        return BicubicUpsampler(self.scale)
