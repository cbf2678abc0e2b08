"""The shape of PyTorch's ImageNet example (``examples/imagenet/main.py``), trimmed to run in seconds on a CPU:
``-j`` workers, train and validation ``DataLoader``s with ``pin_memory=True`` always, ``len(train_loader)`` in
the progress line, validation under ``no_grad`` after each epoch, a checkpoint saved at each epoch's end.
Nothing in it knows about dataprof.

    python examples/frameworks/imagenet_train.py --epochs 2 -j 2
    python examples/frameworks/imagenet_train.py --epochs 2 -j 1 --multiprocessing-distributed   # 2 ranks on CPU
    dataprof tune examples/frameworks/imagenet_train.py --epochs 100 -j 4
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import JpegDataset  # noqa: E402
from train import TinyCNN  # noqa: E402


def train(loader: DataLoader, model: nn.Module, criterion: nn.Module, optimizer: torch.optim.Optimizer,
          epoch: int, print_freq: int) -> None:
    """One epoch, printing ``Epoch: [e][i/N] Time t`` (the step's own time, data included) every print_freq, and
    the epoch's whole training time at its end (its workers' start and stop included)."""
    model.train()
    start = end = time.perf_counter()
    steps = 0
    for i, (images, target) in enumerate(loader):
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        took, end = time.perf_counter() - end, time.perf_counter()
        steps += 1
        if i % print_freq == 0:
            print(f"Epoch: [{epoch}][{i}/{len(loader)}]\tTime {took:.4f}\tLoss {loss.item():.3f}", flush=True)
    print(f"train epoch {epoch}: {steps} steps in {time.perf_counter() - start:.4f} s", flush=True)


def validate(loader: DataLoader, model: nn.Module, criterion: nn.Module) -> float:
    """The validation loss, under ``no_grad`` (its loader's knobs said first)."""
    print(f"val loader: num_workers={loader.num_workers} prefetch_factor={loader.prefetch_factor} "
          f"persistent_workers={loader.persistent_workers}", flush=True)
    model.eval()
    total, seen = 0.0, 0
    with torch.no_grad():
        for images, target in loader:
            total += criterion(model(images), target).item() * len(target)
            seen += len(target)
    return total / max(seen, 1)


def main() -> int:
    """Parse the options, then train: in this process, or as ``--world-size`` ranks it spawns itself."""
    opts = options()
    if opts.multiprocessing_distributed:  # as the ImageNet example: one process per device, spawned here
        torch.multiprocessing.spawn(main_worker, nprocs=opts.world_size, args=(opts,))
    else:
        main_worker(0, opts)
    return 0


def options() -> argparse.Namespace:
    """The script's options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--workers", type=int, default=4)
    parser.add_argument("--val-workers", type=int, default=None, help="the validation loader's (default: -j)")
    parser.add_argument("-b", "--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--val-images", type=int, default=64)
    parser.add_argument("--size", type=int, default=96, help="the JPEGs' side, before the crop")
    parser.add_argument("--out-size", type=int, default=64)
    parser.add_argument("-p", "--print-freq", type=int, default=1)
    parser.add_argument("--prefetch-factor", type=int, default=None, help="batches each worker loads ahead")
    parser.add_argument("--persistent-workers", action="store_true", help="keep the workers between epochs")
    parser.add_argument("--eval-first", type=int, default=0, metavar="K",
                        help="validate K times before training (a resumed run checking its checkpoint)")
    parser.add_argument("--multiprocessing-distributed", action="store_true",
                        help="spawn --world-size ranks here (gloo on CPU), each with its share of the data")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:29517")
    return parser.parse_args()


def main_worker(rank: int, opts: argparse.Namespace) -> None:
    """Train as ``rank`` (of ``--world-size`` with ``--multiprocessing-distributed``, else alone)."""
    distributed = opts.multiprocessing_distributed
    if distributed:
        torch.distributed.init_process_group("gloo", init_method=opts.dist_url, rank=rank,
                                             world_size=opts.world_size)
    train_dataset = JpegDataset(count=opts.images, size=opts.size, out_size=opts.out_size)
    val_dataset = JpegDataset(count=opts.val_images, size=opts.size, out_size=opts.out_size)
    sampler = torch.utils.data.distributed.DistributedSampler(train_dataset) if distributed else None
    train_loader = DataLoader(train_dataset, batch_size=opts.batch_size, shuffle=sampler is None,
                              num_workers=opts.workers, pin_memory=True, sampler=sampler,
                              prefetch_factor=opts.prefetch_factor if opts.workers else None,
                              persistent_workers=opts.persistent_workers and opts.workers > 0)
    val_loader = DataLoader(val_dataset, batch_size=opts.batch_size, shuffle=False,
                            num_workers=opts.workers if opts.val_workers is None else opts.val_workers,
                            pin_memory=True)
    model: nn.Module = TinyCNN()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(opts.eval_first):
        print(f" * Val loss {validate(val_loader, model, criterion):.3f}", flush=True)
    for epoch in range(opts.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        train(train_loader, model, criterion, optimizer, epoch, opts.print_freq)
        loss = validate(val_loader, model, criterion)
        print(f" * Val loss {loss:.3f}", flush=True)
        if rank == 0:
            torch.save({"epoch": epoch + 1, "state_dict": model.state_dict()}, "checkpoint.pth.tar")
            shutil.copyfile("checkpoint.pth.tar", "model_best.pth.tar")
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
