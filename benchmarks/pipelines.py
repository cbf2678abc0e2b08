"""Accuracy on real pipelines: dataprof's samples/s against a bare loop in a fresh process, interleaved.

Sleep datasets hide what real pipelines show: allocation, decoding, a heap
that a warm parent would hand its trials. Two pipelines here allocate per
sample: ``JpegDecode`` decodes generated JPEGs and augments them
(torchvision's transforms v2 when installed, else the same steps in
PIL/numpy), ``TensorPerSample`` creates and transforms fresh tensors. For
each config, dataprof (a one-config sweep) and the bare loop (a fresh
``python`` running ``for batch in DataLoader(...)``) run in alternating order,
A B, B A, …, so the machine's drift over minutes cancels; each pair and its
ratio are printed, then the median ratio per config.

    python benchmarks/pipelines.py [--pairs 3] [--seconds 3] [--workers 0,2,4] [--pipelines JpegDecode,...]
    python benchmarks/pipelines.py --loader    # the same pipelines as loader factories (DataLoader targets)

With ``--loader`` each pipeline is a training script's ``make_loader()``
(its own sampler and collate function): the bare loop iterates the loader it
returns, dataprof sweeps the factory as a DataLoader target and rebuilds it.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, default_collate


class JpegDecode(Dataset):
    """Decode one of 32 generated 320×240 JPEGs, random-resized-crop to 224, flip, normalise."""

    def __init__(self, length: int = 2048, images: int = 32) -> None:
        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(0)
        self.blobs = []
        for _ in range(images):
            pixels = (rng.random((240, 320, 3)) * 255).astype("uint8")
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
            self.blobs.append(buffer.getvalue())
        self.length = length
        self.transform = _augmentation()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        image = Image.open(io.BytesIO(self.blobs[index % len(self.blobs)])).convert("RGB")
        return self.transform(image), index % 10


def _augmentation() -> Any:
    try:
        from torchvision.transforms import v2
    except Exception:  # torchvision absent, or not built for this torch
        return _pil_augmentation
    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.485, 0.456, 0.406],
                                                                           [0.229, 0.224, 0.225])])


def _pil_augmentation(image: Any) -> torch.Tensor:
    import numpy as np

    tensor = torch.from_numpy(np.asarray(image.resize((224, 224))).copy()).permute(2, 0, 1).float() / 255
    return ((tensor - 0.45) / 0.225).flip(-1)


class TensorPerSample(Dataset):
    """Fresh tensors per sample: noise, a blur by averaging shifted copies, a random crop, a cast."""

    def __init__(self, length: int = 4096) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 160, 160, generator=generator)
        blurred = (image + image.roll(1, -1) + image.roll(1, -2) + image.roll(-1, -1)) / 4
        top, left = index % 32, (index * 7) % 32
        return blurred[:, top:top + 128, left:left + 128].contiguous().half()


def jpeg_loader(workers: int = 2, batch_size: int = 32) -> DataLoader:
    """``JpegDecode`` as a training script's loader: its own shuffling sampler and collate function."""
    dataset = JpegDecode()
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset, generator=torch.Generator()),
                      collate_fn=default_collate, num_workers=workers, prefetch_factor=4 if workers else None,
                      persistent_workers=workers > 0)


def tensor_loader(workers: int = 2, batch_size: int = 32) -> DataLoader:
    """``TensorPerSample`` as a training script's loader."""
    return DataLoader(TensorPerSample(), batch_size=batch_size, shuffle=True, num_workers=workers,
                      prefetch_factor=4 if workers else None, persistent_workers=workers > 0)


LOADERS = {"JpegDecode": "jpeg_loader", "TensorPerSample": "tensor_loader"}
"""``--loader``: each pipeline's loader factory, swept as a DataLoader target."""


def measure(side: str, target: str, config: Any, batch_size: int, seconds: float, loader: bool = False) -> float:
    """samples/s of one config: dataprof's (a one-config sweep) or a bare loop's in a fresh process. ``loader``:
    the target is a loader factory, called with the config's worker count; the bare loop iterates what it
    returns, dataprof rebuilds it with the config's knobs."""
    from _bare import bare_rate_fresh, dataprof_rates

    args = {"workers": config.num_workers, "batch_size": batch_size} if loader else {}
    if side == "bare":
        return bare_rate_fresh(target, args, config, batch_size, seconds)
    return dataprof_rates(target, args, [config], None if loader else batch_size, seconds).get(config, 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", default="0,2,4")
    parser.add_argument("--pipelines", default="JpegDecode,TensorPerSample")
    parser.add_argument("--loader", action="store_true",
                        help="sweep each pipeline's loader factory (a DataLoader target) against a bare loop over "
                             "the loader it returns")
    opts = parser.parse_args()
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent))
    sys.path.insert(0, str(here))
    from dataprof.results.space import SearchSpace

    warnings.filterwarnings("ignore", message="This DataLoader will create")
    worst = 0.0
    for name in opts.pipelines.split(","):
        target = f"benchmarks/pipelines.py:{LOADERS[name] if opts.loader else name}"
        print(f"{name} (batch {opts.batch_size}, {opts.seconds:g} s windows)")
        print(f"  {'config':<16}{'pair':>5}{'order':>7}{'dataprof':>10}{'bare loop':>11}{'ratio':>8}")
        for workers in (int(w) for w in opts.workers.split(",")):
            config = SearchSpace(workers=(workers,)).config(workers, prefetch=4)
            ratios = []
            for pair in range(opts.pairs):
                order = ("dataprof", "bare") if pair % 2 == 0 else ("bare", "dataprof")
                rates = {side: measure(side, target, config, opts.batch_size, opts.seconds, opts.loader)
                         for side in order}
                ratio = rates["dataprof"] / rates["bare"]
                ratios.append(ratio)
                print(f"  {config.label():<16}{pair + 1:>5}{'A B' if pair % 2 == 0 else 'B A':>7}"
                      f"{rates['dataprof']:>10.1f}{rates['bare']:>11.1f}{ratio:>8.3f}", flush=True)
            median = statistics.median(ratios)
            worst = max(worst, abs(median - 1))
            print(f"  {config.label():<16} median dataprof/bare = {median:.3f}")
    print(f"worst |median dataprof/bare - 1| = {100 * worst:.1f}% (target: within 5%)")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
