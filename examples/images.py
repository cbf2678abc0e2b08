"""A CPU-bound image pipeline: JPEG decode + augmentation with Pillow.

The JPEGs are generated once into a cache directory (``root``), so the
dataset's constructor is cheap after the first run. With torchvision
installed, its transforms are used; otherwise equivalent Pillow/numpy steps.

    dataprof sweep examples/images.py:JpegDataset --batch-size 32
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter
from torch.utils.data import Dataset

DEFAULT_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dataprof" / "examples" / "jpegs"


def generate_jpegs(root: Path, count: int, size: int) -> list[Path]:
    """Write ``count`` random-texture JPEGs of ``size``×``size`` once; reuse them after."""
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"img_{i:05d}_{size}.jpg" for i in range(count)]
    rng = np.random.default_rng(0)
    for path in paths:
        if path.exists():
            continue
        base = rng.integers(0, 255, (size // 8, size // 8, 3), dtype=np.uint8)
        image = Image.fromarray(base).resize((size, size), Image.BICUBIC)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        image.save(tmp, format="JPEG", quality=90)
        os.replace(tmp, path)
    return paths


class Compose:
    """Apply stages in order; like torchvision's Compose, it holds them in ``.transforms``."""

    def __init__(self, transforms: list[object]) -> None:
        self.transforms = list(transforms)

    def __call__(self, image: object) -> object:
        for transform in self.transforms:
            image = transform(image)  # type: ignore[operator]
        return image


class RandomResizedCrop:
    def __init__(self, out_size: int, scale: tuple[float, float] = (0.35, 1.0)) -> None:
        self.out_size, self.scale = out_size, scale

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        scale = random.uniform(*self.scale)
        crop_w, crop_h = int(width * scale), int(height * scale)
        left, top = random.randint(0, width - crop_w), random.randint(0, height - crop_h)
        return image.crop((left, top, left + crop_w, top + crop_h)).resize((self.out_size,) * 2, Image.BILINEAR)


class RandomHorizontalFlip:
    def __call__(self, image: Image.Image) -> Image.Image:
        return image.transpose(Image.FLIP_LEFT_RIGHT) if random.random() < 0.5 else image


class GaussianBlur:
    def __init__(self, sigma: tuple[float, float] = (0.1, 1.5)) -> None:
        self.sigma = sigma

    def __call__(self, image: Image.Image) -> Image.Image:
        return image.filter(ImageFilter.GaussianBlur(radius=random.uniform(*self.sigma)))


class ToNormalizedTensor:
    def __init__(self, mean: float = 0.45, std: float = 0.25) -> None:
        self.mean, self.std = mean, std

    def __call__(self, image: Image.Image) -> torch.Tensor:
        array = (np.asarray(image, dtype=np.float32) / 255.0 - self.mean) / self.std
        return torch.from_numpy(array.transpose(2, 0, 1).copy())


def default_transform(out_size: int) -> object:
    """RandomResizedCrop, flip, blur, normalise: torchvision's when it loads, else the same steps in Pillow."""
    try:
        from torchvision import transforms
    except Exception:  # torchvision missing, or not loadable beside this torch build
        return Compose([RandomResizedCrop(out_size), RandomHorizontalFlip(), GaussianBlur(), ToNormalizedTensor()])
    return transforms.Compose([
        transforms.RandomResizedCrop(out_size, scale=(0.35, 1.0)),
        transforms.RandomHorizontalFlip(),
        transforms.GaussianBlur(5, sigma=(0.1, 1.5)),
        transforms.ToTensor(),
        transforms.Normalize([0.45] * 3, [0.25] * 3),
    ])


class JpegDataset(Dataset):
    """Decode a JPEG from disk and augment it: CPU work in every sample."""

    def __init__(self, root: str | None = None, count: int = 256, size: int = 384, out_size: int = 224) -> None:
        self.paths = generate_jpegs(Path(root) if root else DEFAULT_ROOT, count, size)
        self.transform = default_transform(out_size)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        with Image.open(self.paths[index]) as image:
            image = image.convert("RGB")
        return self.transform(image), index % 10
