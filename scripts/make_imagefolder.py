"""A generated ImageFolder of JPEGs at ImageNet size, so that 224-px runs decode and augment real files.

    python scripts/make_imagefolder.py OUT [--classes 100] [--train 100] [--val 20] [--workers 0]

Writes OUT/train/<class>/<n>.jpg and OUT/val/<class>/<n>.jpg (the layout `task.dataset: image_folder` reads),
quality 90, sizes drawn around ImageNet's (about 400 x 350, 300-500 px a side). Each class is a family of
pictures: stripes at the class's angle and frequency over a background of the class's hue, with random blobs and
noise, so that networks can learn something; the point is the data path (decoding, random-resized crops,
flips) at ImageNet's cost per image, not accuracy. Deterministic: image n of a class is drawn from (class, split, n).
"""
from __future__ import annotations

import argparse
import colorsys
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np


def _picture(label: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB uint8 image of class `label`."""
    height, width = (int(v) for v in rng.integers(300, 501, size=2))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    angle = np.pi * label / classes
    period = 8 + 40 * ((label * 7) % classes) / classes
    stripes = 0.5 + 0.5 * np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period
                                 + rng.uniform(0, 2 * np.pi))
    hue = (label / classes + rng.normal(0, 0.02)) % 1.0
    base = np.array(colorsys.hsv_to_rgb(hue, 0.6, 0.9), dtype=np.float32)
    image = base * (0.55 + 0.45 * stripes[..., None])
    for _ in range(int(rng.integers(2, 6))):  # blobs of random colours
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(20, 120)
        mask = ((yy - cy) ** 2 + (xx - cx) ** 2) < r * r
        image[mask] = rng.uniform(0, 1, size=3)
    image += rng.normal(0, 0.05, size=image.shape).astype(np.float32)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def _write_class(out: str, split: str, label: int, classes: int, count: int) -> int:
    from PIL import Image

    folder = Path(out) / split / f"class{label:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        path = folder / f"{n:05d}.jpg"
        if path.exists():
            continue
        rng = np.random.default_rng([label, 0 if split == "train" else 1, n])
        staged = path.with_suffix(".tmp")
        Image.fromarray(_picture(label, classes, rng)).save(staged, format="JPEG", quality=90)
        os.replace(staged, path)  # an interrupted run leaves no half-written image
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--train", type=int, default=100, help="images per class in train/")
    parser.add_argument("--val", type=int, default=20, help="images per class in val/")
    parser.add_argument("--workers", type=int, default=0, help="processes (0 = one per core)")
    args = parser.parse_args()
    if min(args.classes, args.train, args.val) < 1:
        parser.error("--classes, --train and --val must be >= 1")
    jobs = [(split, label, count) for split, count in (("train", args.train), ("val", args.val))
            for label in range(args.classes)]
    with ProcessPoolExecutor(args.workers or os.cpu_count()) as pool:
        written = sum(pool.map(_write_class, *zip(*[(args.out, s, label, args.classes, c) for s, label, c in jobs])))
    print(f"{written} JPEGs in {args.out} ({args.classes} classes; {args.train} train and {args.val} val each)")


if __name__ == "__main__":
    main()
