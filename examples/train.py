"""A small real training loop for ``dataprof run``: a tiny CNN on the JPEG example, CPU by default, CUDA when
present. Nothing in it knows about dataprof.

    python examples/train.py --epochs 1
    dataprof run examples/train.py --epochs 1 --workers 2
    dataprof run --max-steps 40 examples/train.py --device cuda     # a CI smoke test on a GPU runner
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from images import JpegDataset  # noqa: E402


class TinyCNN(nn.Module):
    """Three convolutions and a linear head: a step of a few tens of milliseconds on a CPU."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class scores for a batch of images."""
        return self.head(self.features(images).flatten(1))


def make_loader(images: int = 1024, out_size: int = 128, batch_size: int = 32, workers: int = 0,
                pin_memory: bool = False, prefetch_factor: int | None = None) -> DataLoader:
    """The training's loader: decoded, augmented JPEGs (a function ``dataprof sweep`` can call on its own)."""
    return DataLoader(JpegDataset(count=images, out_size=out_size), batch_size=batch_size, shuffle=True,
                      num_workers=workers, pin_memory=pin_memory, persistent_workers=workers > 0,
                      prefetch_factor=prefetch_factor if workers else None)


def thread_loader(images: int, out_size: int, batch_size: int, workers: int, prefetch_factor: int | None) -> object:
    """The same batches loaded by ``workers`` threads of this process: a torchdata.nodes pipeline over the loader's
    dataset, shuffled batch sampler and collate (docs/threads.md), no DataLoader."""
    import torchdata.nodes as tn
    from torch.utils.data import BatchSampler, RandomSampler, default_collate

    dataset = JpegDataset(count=images, out_size=out_size)
    node = tn.SamplerWrapper(BatchSampler(RandomSampler(dataset), batch_size, drop_last=False))
    node = tn.ParallelMapper(node, map_fn=lambda indices: default_collate([dataset[i] for i in indices]),
                             num_workers=workers, method="thread")
    return tn.Loader(tn.Prefetcher(node, prefetch_factor=(prefetch_factor or 2) * workers))


def main() -> int:
    """Train for ``--epochs`` epochs; print the loss and the images per second of each."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--prefetch-factor", type=int, default=None, help="batches each worker loads ahead")
    parser.add_argument("--threads", action="store_true",
                        help="load with --workers threads (a torchdata.nodes pipeline), no DataLoader")
    parser.add_argument("--images", type=int, default=1024, help="JPEGs in the dataset (generated once)")
    parser.add_argument("--out-size", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    opts = parser.parse_args()
    device = torch.device(opts.device)
    loader = thread_loader(opts.images, opts.out_size, opts.batch_size, opts.workers, opts.prefetch_factor) \
        if opts.threads and opts.workers else make_loader(opts.images, opts.out_size, opts.batch_size, opts.workers,
                                                          device.type == "cuda", opts.prefetch_factor)
    model = TinyCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(opts.epochs):
        start, seen, total = time.perf_counter(), 0, 0.0
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels)
            total += loss.item() * len(labels)
        elapsed = time.perf_counter() - start
        print(f"epoch {epoch + 1}: loss {total / max(seen, 1):.3f} · {seen / elapsed:,.0f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
